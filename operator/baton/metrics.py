"""Prometheus metrics of the operator (names are part of the chart's alert contract)."""

from __future__ import annotations

import time
from typing import Callable, Iterable

import prometheus_client
from prometheus_client import core as prom_core

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)

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
TRANSITIONS = prometheus_client.Counter(
    "baton_transitions_total", "Transitions begun, by kind and by the replica that began them.",
    ["kind", "replica"], registry=REGISTRY,
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
FENCING_REJECTIONS = prometheus_client.Counter(
    "baton_fencing_rejections_total",
    "Writes refused because this replica's fencing token was stale (API server CEL rule or local check).",
    registry=REGISTRY,
)
ACTION_ERRORS = prometheus_client.Counter(
    "baton_action_errors_total", "API calls of a plan that failed, by action.", ["action"], registry=REGISTRY,
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
QUEUE_DEPTH = prometheus_client.Gauge(
    "baton_queue_depth", "Runtimes waiting in the work queue for a worker (not counting timed wake-ups).",
    registry=REGISTRY,
)
WORKERS_BUSY = prometheus_client.Gauge(
    "baton_workers_busy", "Workers acting on a runtime right now (of BATON_WORKERS).", registry=REGISTRY,
)
SHUTTING_DOWN = prometheus_client.Gauge(
    "baton_shutting_down", "1 once SIGTERM was received.", registry=REGISTRY,
)


class RuntimeCollector:
    """Per-runtime gauges computed at scrape time from the last status each worker saw."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, str, dict[str, str], float | None, float | None]]]):
        # source yields (namespace, runtime, {condition: status}, transition_start_epoch, budget_sum)
        self._source = source

    def collect(self) -> Iterable[prom_core.Metric]:
        by_cond = prom_core.GaugeMetricFamily(
            "baton_runtimes", "Runtimes by condition and status.", labels=["condition", "status"]
        )
        per = prom_core.GaugeMetricFamily(
            "baton_runtime_condition", "1 when the runtime's condition is True.", labels=["namespace", "runtime", "condition"]
        )
        age = prom_core.GaugeMetricFamily(
            "baton_transition_age_seconds", "Age of the transition under way.", labels=["namespace", "runtime"]
        )
        budget = prom_core.GaugeMetricFamily(
            "baton_transition_budget_seconds", "Sum of the runtime's budgets: a transition older than this is stuck.",
            labels=["namespace", "runtime"],
        )
        counts: dict[tuple[str, str], int] = {}
        now = time.time()
        for ns, name, conds, started, budget_sum in self._source():
            for cond, value in conds.items():
                counts[(cond, value)] = counts.get((cond, value), 0) + 1
                per.add_metric([ns, name, cond], 1.0 if value == "True" else 0.0)
            if started is not None and budget_sum is not None:
                age.add_metric([ns, name], max(0.0, now - started))
                budget.add_metric([ns, name], budget_sum)
        for (cond, value), n in sorted(counts.items()):
            by_cond.add_metric([cond, value], n)
        return [by_cond, per, age, budget]

    def describe(self) -> Iterable[prom_core.Metric]:
        return []
