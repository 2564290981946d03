"""Prometheus metrics of the operator (names are part of the chart's alert contract)."""

from __future__ import annotations

import enum
from typing import Any, Mapping

import prometheus_client

import baton
from baton import collectors
from baton.lifecycle import plan
from baton.model import status as status_mod

# No `<name>_created` series: Prometheus ignores them, and they were 58 of 501 samples a scrape.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus-client 0.26

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)
# process_* (memory, CPU, open fds, start time) and python_* (gc, version), as every client
# library exports them; prometheus-client registers them only on its global registry.
prometheus_client.ProcessCollector(registry=REGISTRY)
prometheus_client.PlatformCollector(registry=REGISTRY)
prometheus_client.GCCollector(registry=REGISTRY)

BUILD_INFO = prometheus_client.Info("baton_build", "The running Baton's version.", registry=REGISTRY)
BUILD_INFO.info({"version": baton.version()})

LOCK_WAIT = prometheus_client.Histogram(
    "baton_lock_wait_seconds", "Time from wanting a runtime's lifecycle Lease to holding it.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120), registry=REGISTRY,
)
STEP_DURATION = prometheus_client.Histogram(
    "baton_step_duration_seconds", "Duration of each lifecycle step.", ["step"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600), registry=REGISTRY,
)
HANDOFFS = prometheus_client.Counter(
    "baton_handoffs_total", "Generations retired, by outcome (Retired, Reset, ForceRecovered, ...).",
    ["outcome"], registry=REGISTRY,
)
# No `replica` label: the scrape's own `pod`/`instance` target labels already say which one.
TRANSITIONS = prometheus_client.Counter(
    "baton_transitions_total", "Transitions begun, by kind.", ["kind"], registry=REGISTRY,
)
CLEANUP_FAILURES = prometheus_client.Counter(
    "baton_cleanup_failures_total", "Old pods not confirmed gone within cleanupSeconds, by reason.",
    ["reason"], registry=REGISTRY,
)
FORCE_RECOVERIES = prometheus_client.Counter(
    "baton_force_recoveries_total", "Stuck pods abandoned by a recorded force recovery.", registry=REGISTRY,
)
STALE_VERBS = prometheus_client.Counter(
    "baton_stale_verbs_total", "Reset/force-recovery annotations refused as stale, by verb.", ["verb"],
    registry=REGISTRY,
)
DRAIN_INCOMPLETE = prometheus_client.Counter(
    "baton_drain_incomplete_total", "Retires whose drain budget ran out.", registry=REGISTRY,
)
CONNECT_TIMEOUTS = prometheus_client.Counter(
    "baton_connect_timeouts_total", "New generations not Ready within connectSeconds.", registry=REGISTRY,
)
LOCK_TIMEOUTS = prometheus_client.Counter(
    "baton_lock_timeouts_total", "Waits for a lifecycle Lease that exceeded lockSeconds.", registry=REGISTRY,
)
LEASE_CONFLICTS = prometheus_client.Counter(
    "baton_lease_conflicts_total", "Lease acquisitions or renewals lost to another holder.", registry=REGISTRY,
)
PIN_RECHECK_ABORTS = prometheus_client.Counter(
    "baton_pin_recheck_aborts_total",
    "Stops of admission not sent: the generation was pinned (or the claims view not listed) when "
    "the flip was about to be sent, though not when it was decided.",
    registry=REGISTRY,
)
FENCING_REJECTIONS = prometheus_client.Counter(
    "baton_fencing_rejections_total",
    "Writes refused because this replica's fencing token was stale (API server CEL rule or local check).",
    registry=REGISTRY,
)
ACTION_ERRORS = prometheus_client.Counter(
    "baton_action_errors_total", "API calls of a plan that failed, by action.", ["action"], registry=REGISTRY,
)
EVENTS_DROPPED = prometheus_client.Counter(
    "baton_events_dropped_total", "Kubernetes Events not posted because too many waited to be posted.", registry=REGISTRY,
)
DRAIN_PROBE_ERRORS = prometheus_client.Counter(
    "baton_drain_probe_errors_total",
    "Drain probes that did not count as idle for a reason other than a non-200 answer, by kind.",
    ["kind"], registry=REGISTRY,
)
POD_REJECTIONS = prometheus_client.Counter(
    "baton_pod_rejections_total", "Pod creates the API server refused (quota, PodSecurity, invalid pod).",
    registry=REGISTRY,
)
NAME_CONFLICTS = prometheus_client.Counter(
    "baton_name_conflicts_total",
    "Foreign objects found holding a runtime's name (NameConflict) or claiming it (MultiplePods), by kind.",
    ["kind"], registry=REGISTRY,
)
PASSES_THROTTLED = prometheus_client.Counter(
    "baton_passes_throttled_total",
    "Passes of a runtime delayed by its rate limit (a loop that would otherwise spin).", registry=REGISTRY,
)
API_REQUESTS = prometheus_client.Counter(
    "baton_api_requests_total", "Requests to the API server, by client (work or leases), verb, resource and code.",
    ["client", "verb", "resource", "code"], registry=REGISTRY,
)
API_LATENCY = prometheus_client.Histogram(
    "baton_api_request_duration_seconds", "Latency of API requests, by client, verb and resource.",
    ["client", "verb", "resource"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
CACHE_OBJECTS = prometheus_client.Gauge(
    "baton_cache_objects", "Objects held in the watch-fed caches, by kind.", ["kind"], registry=REGISTRY,
)
RETIREMENTS_BLOCKED_TOTAL = prometheus_client.Counter(
    "baton_retirements_blocked_total",
    "Retires that outlasted budgets.pinSeconds waiting for ToolRuntimeClaim pins (RetirementBlocked).",
    registry=REGISTRY,
)
FORCE_RETIRES = prometheus_client.Counter(
    "baton_force_retires_total", "Pinned generations retired by a person (annotation baton.dev/force-retire).",
    registry=REGISTRY,
)
# Idle and wake (spec.idle; issue 43). The wake's latency: from the demand (the Wake transition's
# start) to its generation serving; a wake takes a pod's start, so seconds to minutes.
WAKES = prometheus_client.Counter(
    "baton_wakes_total", "Wakes of idle runtimes (spec.idle), by outcome: woken (served within "
    "spec.idle.wakeSeconds) or failed (retired again, WakeFailed, backed off).", ["outcome"], registry=REGISTRY,
)
WAKE_SECONDS = prometheus_client.Histogram(
    "baton_wake_seconds", "Wake latency of the wakes that served: from the demand to the new generation Ready.",
    buckets=(0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600), registry=REGISTRY,
)
# Hooks around a handoff (spec.hooks; issue 45): every hook's end, and how long it took (its
# call, and a gate's wait: seconds to minutes).
HOOK_RUNS = prometheus_client.Counter(
    "baton_hook_runs_total", "Hooks (spec.hooks) that ended, by hook (preRetire, postReady) and outcome (Succeeded, "
    "Failed: a Fail hook that holds its step, Ignored, ForceRecovered).", ["hook", "outcome"], registry=REGISTRY,
)
HOOK_SECONDS = prometheus_client.Histogram(
    "baton_hook_seconds", "Seconds from a hook's start to its end (its call and its gate), by hook.", ["hook"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800), registry=REGISTRY,
)
QUEUE_DEPTH = prometheus_client.Gauge(
    "baton_queue_depth", "Runtimes waiting in the work queue for a worker (not counting timed wake-ups).",
    registry=REGISTRY,
)
WORKERS_BUSY = prometheus_client.Gauge(
    "baton_workers_busy", "Workers acting on a runtime right now (of BATON_WORKERS).", registry=REGISTRY,
)
RESYNCS = prometheus_client.Counter(
    "baton_resyncs_total", "Periodic resyncs (BATON_RESYNC_SECONDS): each gives every runtime in view a pass within the period.",
    registry=REGISTRY,
)
# --- Passes and the work queue, in the shape controller-runtime and client-go give Go operators
# (controller_runtime_reconcile_total{result}, controller_runtime_reconcile_time_seconds,
# workqueue_*). A pass takes milliseconds when it only reads and tens to hundreds of them when it
# writes (docs/performance.md); an API request times out at 10 s.
class PassResult(str, enum.Enum):
    """What a pass asked of the queue (the `result` label of baton_passes_total)."""

    SUCCESS = "success"              # nothing more until an event (or the runtime is gone)
    REQUEUE_AFTER = "requeue_after"  # a timed wake-up
    REQUEUE = "requeue"              # act again at once
    ERROR = "error"                  # an action failed (back-off), or the pass raised


PASSES = prometheus_client.Counter(
    "baton_passes_total", "Passes of a runtime, by result (success, requeue_after, requeue, error).",
    ["result"], registry=REGISTRY,
)
for _result in PassResult:
    PASSES.labels(result=_result.value)
PASS_DURATION = prometheus_client.Histogram(
    "baton_pass_duration_seconds", "Duration of one pass of one runtime (read, decide, act).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)
QUEUE_DURATION = prometheus_client.Histogram(
    "baton_queue_duration_seconds",
    "Time a runtime waited in the work queue for a worker, from when it was due to when a worker took it.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=REGISTRY,
)
WORK_DURATION = prometheus_client.Histogram(
    "baton_queue_work_duration_seconds",
    "Time a worker kept a runtime: one turn, its passes in a row while they ask to act at once.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=REGISTRY,
)
QUEUE_ADDS = prometheus_client.Counter(
    "baton_queue_adds_total", "Runtimes added to the work queue (not counting one already waiting).", registry=REGISTRY,
)
QUEUE_RETRIES = prometheus_client.Counter(
    "baton_queue_retries_total", "Runtimes put back with a delay after a failure or a throttled pass.",
    registry=REGISTRY,
)
WORKERS_MAX = prometheus_client.Gauge(
    "baton_workers_max", "Workers of the queue (BATON_WORKERS): baton_workers_busy at most this.", registry=REGISTRY,
)


class QueueObserver:
    """The work queue's reports (baton.queue.Observer) as the families above."""

    def depth(self, n: int) -> None:
        QUEUE_DEPTH.set(n)

    def added(self) -> None:
        QUEUE_ADDS.inc()

    def started(self, *, waited: float) -> None:
        QUEUE_DURATION.observe(waited)

    def finished(self, *, worked: float) -> None:
        WORK_DURATION.observe(worked)

    def retried(self) -> None:
        QUEUE_RETRIES.inc()


PASS_ERRORS = prometheus_client.Counter(
    "baton_pass_errors_total",
    "Passes that raised (a bug or an unexpected answer): logged with the traceback, retried after a back-off.",
    registry=REGISTRY,
)


class WatchError(str, enum.Enum):
    """Why a watch of an informer failed (the `reason` label of baton_watch_errors_total)."""

    GONE = "Gone"                # 410: the resume point is too old, the kind is listed again
    FORBIDDEN = "Forbidden"      # 403: RBAC refuses the list or watch
    THROTTLED = "Throttled"      # 429
    API_ERROR = "ApiError"       # another status (5xx, ...)
    BAD_STREAM = "BadStream"     # a line the client cannot read: listed again
    DISCONNECTED = "Disconnected"  # a dropped connection, a timeout


WATCH_ERRORS = prometheus_client.Counter(
    "baton_watch_errors_total",
    "Lists or watches of an informer that failed, by kind watched and reason (Gone: listed again).",
    ["kind", "reason"], registry=REGISTRY,
)


def watch_error_reason(status: int) -> WatchError:
    """The reason for an API error status of a list or watch."""
    if status == 410:
        return WatchError.GONE
    if status == 403:
        return WatchError.FORBIDDEN
    if status == 429:
        return WatchError.THROTTLED
    return WatchError.API_ERROR


WATCH_EVENTS = prometheus_client.Counter(
    "baton_watch_events_total",
    "Watch events (added, modified, deleted) an informer received, by kind: this replica's share of the watch traffic.",
    ["kind"], registry=REGISTRY,
)


WATCH_BYTES = prometheus_client.Counter(
    "baton_watch_bytes_total",
    "Bytes of watch streams received (event lines, bookmarks included), by resource: this replica's "
    "share of the watch traffic in bytes.",
    ["resource"], registry=REGISTRY,
)


def init_watch_errors(kind: str) -> None:
    """Every reason of one watched kind has a series from the start (0 until its first error),
    and so has its count of watch events."""
    for reason in WatchError:
        WATCH_ERRORS.labels(kind=kind, reason=reason.value)
    WATCH_EVENTS.labels(kind=kind)


SHUTTING_DOWN = prometheus_client.Gauge(
    "baton_shutting_down", "1 once SIGTERM was received.", registry=REGISTRY,
)

# Sharding (BATON_SHARD_RANGES; 0 ranges: off, every replica tries every runtime).
SHARD_RANGES = prometheus_client.Gauge(
    "baton_shard_ranges", "Ranges the runtimes' hash space is cut into (BATON_SHARD_RANGES; 0: sharding off).",
    registry=REGISTRY,
)
SHARD_RANGES_HELD = prometheus_client.Gauge(
    "baton_shard_ranges_held", "Ranges this replica holds (its runtimes are the ones it tries).", registry=REGISTRY,
)
SHARD_MEMBERS = prometheus_client.Gauge(
    "baton_shard_members", "Operator replicas this replica sees alive (membership Leases).", registry=REGISTRY,
)
SHARD_RANGE_MOVES = prometheus_client.Counter(
    "baton_shard_range_moves_total",
    "Ranges this replica took, handed back (over its share, or at shutdown) or lost (a renewal refused).",
    ["move"], registry=REGISTRY,
)

# Every label value these counters can take has a series from the start (0 until its first
# event), so rate() and absent() work before anything happened.
KNOWN_LABELS: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (HANDOFFS, "outcome", tuple(o.value for o in status_mod.Outcome)),
    (TRANSITIONS, "kind", tuple(k.value for k in status_mod.TransitionKind)),
    (CLEANUP_FAILURES, "reason", (status_mod.Reason.DELETE_REJECTED.value, status_mod.Reason.POD_STUCK_TERMINATING.value,
                                  status_mod.Reason.HOOK_FAILED.value)),
    (STALE_VERBS, "verb", ("reset", "force-recovery", "force-retire", "retry-hook")),
    (SHARD_RANGE_MOVES, "move", ("taken", "handed_back", "lost")),
    (WAKES, "outcome", tuple(o.value.lower() for o in status_mod.WakeOutcome)),
)
for _series, _label, _values in KNOWN_LABELS:
    for _value in _values:
        _series.labels(**{_label: _value})
for _hook in status_mod.HookName:
    HOOK_SECONDS.labels(hook=_hook.value)
    for _outcome in status_mod.HookOutcome:
        HOOK_RUNS.labels(hook=_hook.value, outcome=_outcome.value)

# What decide() asks to record (plan.Record), by metric: the series, and whether it takes labels.
_RECORDED: dict[plan.Metric, tuple[Any, bool]] = {
    plan.Metric.HANDOFFS: (HANDOFFS, True),
    plan.Metric.CLEANUP_FAILURES: (CLEANUP_FAILURES, True),
    plan.Metric.FORCE_RECOVERIES: (FORCE_RECOVERIES, False),
    plan.Metric.STALE_VERBS: (STALE_VERBS, True),
    plan.Metric.DRAIN_INCOMPLETE: (DRAIN_INCOMPLETE, False),
    plan.Metric.CONNECT_TIMEOUTS: (CONNECT_TIMEOUTS, False),
    plan.Metric.LOCK_TIMEOUTS: (LOCK_TIMEOUTS, False),
    plan.Metric.STEP_DURATION: (STEP_DURATION, True),
    plan.Metric.POD_REJECTIONS: (POD_REJECTIONS, False),
    plan.Metric.NAME_CONFLICTS: (NAME_CONFLICTS, True),
    plan.Metric.TRANSITIONS: (TRANSITIONS, True),
    plan.Metric.RETIREMENTS_BLOCKED: (RETIREMENTS_BLOCKED_TOTAL, False),
    plan.Metric.FORCE_RETIRES: (FORCE_RETIRES, False),
    plan.Metric.WAKES: (WAKES, True),
    plan.Metric.WAKE_SECONDS: (WAKE_SECONDS, False),
    plan.Metric.HOOK_RUNS: (HOOK_RUNS, True),
    plan.Metric.HOOK_SECONDS: (HOOK_SECONDS, True),
}
# The histograms among them observe the value; the counters count one.
_OBSERVED = frozenset({plan.Metric.STEP_DURATION, plan.Metric.WAKE_SECONDS, plan.Metric.HOOK_SECONDS})
# Label values written in lower case on the series (the status says Woken/Failed; the alert
# contract says woken/failed).
_LOWERED = frozenset({plan.Metric.WAKES})


def record(metric: plan.Metric, *, labels: Mapping[str, str], value: float) -> None:
    """Record what a plan asks (a plan.Record)."""
    entry = _RECORDED.get(metric)
    if entry is None:
        return
    series, labelled = entry
    if labelled:
        series = series.labels(**({k: v.lower() for k, v in labels.items()} if metric in _LOWERED else labels))
    if metric in _OBSERVED:
        series.observe(value)
    else:
        series.inc()


# The container's memory limit, read at scrape time (baton.collectors).
REGISTRY.register(collectors.MemoryLimitCollector())
