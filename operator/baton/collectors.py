"""The operator's Prometheus collectors read at scrape time: the work queue's turns under way,
the per-runtime gauges from the last status each worker saw, the container's memory limit.

Families computed when /metrics is scraped, not series kept between scrapes; ``baton.metrics``
registers the memory limit's, ``baton.activities`` the others. I/O: MemoryLimitCollector reads
the cgroup's files (nothing else here does any); names are part of the chart's alert contract.
"""

from __future__ import annotations

import pathlib
import time
from typing import Callable, Iterable

from prometheus_client import core as prom_core


class QueueCollector:
    """client-go's workqueue_unfinished_work_seconds and workqueue_longest_running_processor_seconds,
    read at scrape time from the turns under way: a worker stuck on one runtime shows here long
    before its turn ends and is counted in baton_queue_work_duration_seconds."""

    def __init__(self, running: Callable[[], Iterable[float]]) -> None:
        self._running = running

    def collect(self) -> Iterable[prom_core.Metric]:
        running = list(self._running())
        return [
            prom_core.GaugeMetricFamily(
                "baton_queue_unfinished_work_seconds",
                "Seconds the turns under way have run so far, summed (grows while a worker is stuck).",
                value=sum(running)),
            prom_core.GaugeMetricFamily(
                "baton_queue_longest_running_processor_seconds",
                "Seconds the longest turn under way has run so far (0 when no worker is busy).",
                value=max(running, default=0.0)),
        ]

    def describe(self) -> Iterable[prom_core.Metric]:
        return []


# kube-state-metrics' shape for conditions: one series per status, exactly one of them 1, so that
# False and Unknown are told apart and `status="true"` selects the condition holding.
CONDITION_STATUSES = ("true", "false", "unknown")


def condition_status(value: str) -> str:
    """The `status` label for a condition's status ("True" -> "true"; anything unexpected -> "unknown")."""
    lowered = value.strip().lower()
    return lowered if lowered in CONDITION_STATUSES else "unknown"


class RuntimeCollector:
    """Per-runtime gauges computed at scrape time from the last status each worker saw."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, str, dict[str, str], float | None, float | None]]],
                 *, idle: Callable[[], int | None] = lambda: None):
        # source yields (namespace, runtime, {condition: status}, transition_start_epoch, budget_sum);
        # idle: how many runtimes are idle (status.idle.since set), None where this replica does
        # not report the per-runtime series (baton.exporter).
        self._source = source
        self._idle = idle

    def collect(self) -> Iterable[prom_core.Metric]:
        by_cond = prom_core.GaugeMetricFamily(
            "baton_runtimes", "Runtimes by condition and status (true, false, unknown).",
            labels=["condition", "status"],
        )
        per = prom_core.GaugeMetricFamily(
            "baton_runtime_condition",
            "The runtime's conditions, one-hot: 1 on the series whose status (true, false, unknown) holds.",
            labels=["namespace", "runtime", "condition", "status"],
        )
        age = prom_core.GaugeMetricFamily(
            "baton_transition_age_seconds", "Age of the transition under way.", labels=["namespace", "runtime"]
        )
        budget = prom_core.GaugeMetricFamily(
            "baton_transition_budget_seconds", "Sum of the runtime's budgets: a transition older than this is stuck.",
            labels=["namespace", "runtime"],
        )
        blocked = prom_core.GaugeMetricFamily(
            "baton_retirements_blocked",
            "1 while the runtime's retire is blocked by ToolRuntimeClaim pins past budgets.pinSeconds "
            "(RetirementBlocked=True; its generation keeps serving), else 0.",
            labels=["namespace", "runtime"],
        )
        counts: dict[tuple[str, str], int] = {}
        now = time.time()
        for ns, name, conds, started, budget_sum in self._source():
            is_blocked = conds.get("RetirementBlocked") == "True"
            blocked.add_metric([ns, name], 1.0 if is_blocked else 0.0)
            for cond, value in conds.items():
                holds = condition_status(value)
                counts[(cond, holds)] = counts.get((cond, holds), 0) + 1
                for status in CONDITION_STATUSES:
                    per.add_metric([ns, name, cond, status], 1.0 if status == holds else 0.0)
            if started is not None and budget_sum is not None and not is_blocked:
                # A blocked retire is reported by baton_retirements_blocked, not as a stuck transition.
                age.add_metric([ns, name], max(0.0, now - started))
                budget.add_metric([ns, name], budget_sum)
        for (cond, holds), n in sorted(counts.items()):
            by_cond.add_metric([cond, holds], n)
        families: list[prom_core.Metric] = [by_cond, per, age, budget, blocked]
        idle = self._idle()
        if idle is not None:
            families.append(prom_core.GaugeMetricFamily(
                "baton_runtimes_idle", "Runtimes idle now (spec.idle): no generation runs until a wake.", value=idle))
        return families

    def describe(self) -> Iterable[prom_core.Metric]:
        return []


# cgroup v2, then v1. v1 spells "no limit" as a huge number, v2 as "max".
CGROUP_MEMORY_LIMITS = (
    pathlib.Path("/sys/fs/cgroup/memory.max"),
    pathlib.Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
_UNLIMITED = 2**62


def memory_limit(paths: Iterable[pathlib.Path] = CGROUP_MEMORY_LIMITS) -> int | None:
    """The container's memory limit in bytes from its cgroup; None when unlimited or unreadable."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < _UNLIMITED else None
    return None


class MemoryLimitCollector:
    """baton_memory_limit_bytes, read at scrape time, so that an alert can compare
    process_resident_memory_bytes with the limit the chart set, before the OOM killer does."""

    def __init__(self, *, paths: Iterable[pathlib.Path] = CGROUP_MEMORY_LIMITS) -> None:
        self._paths = tuple(paths)

    def collect(self) -> Iterable[prom_core.Metric]:
        family = prom_core.GaugeMetricFamily(
            "baton_memory_limit_bytes", "Memory limit of the operator's container (cgroup); absent when unlimited.",
        )
        limit = memory_limit(self._paths)
        if limit is not None:
            family.add_metric([], float(limit))
        return [family]

    def describe(self) -> Iterable[prom_core.Metric]:
        return []
