"""Issue 43 item 4: what decide() asks to record of a wake (plan.Record WAKES, WAKE_SECONDS) reaches
baton_wakes_total{outcome="woken"|"failed"} and baton_wake_seconds, and baton_runtimes_idle counts
the idle runtimes on the replica that reports the per-runtime series."""
from __future__ import annotations

from baton import collectors, controller, metrics
from baton.lifecycle import plan
from baton.model import status as st


def _value(name: str, **labels: str) -> float:
    got = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_wakes_are_counted_by_outcome_in_lower_case_and_their_latency_observed() -> None:
    assert metrics.REGISTRY.get_sample_value("baton_wakes_total", {"outcome": "failed"}) is not None, "0 from the start"
    woken, failed = _value("baton_wakes_total", outcome="woken"), _value("baton_wakes_total", outcome="failed")
    count, total = _value("baton_wake_seconds_count"), _value("baton_wake_seconds_sum")
    metrics.record(plan.Metric.WAKES, labels={"outcome": st.WakeOutcome.WOKEN.value}, value=1.0)
    metrics.record(plan.Metric.WAKE_SECONDS, labels={}, value=2.5)
    metrics.record(plan.Metric.WAKES, labels={"outcome": st.WakeOutcome.FAILED.value}, value=1.0)
    assert _value("baton_wakes_total", outcome="woken") == woken + 1
    assert _value("baton_wakes_total", outcome="failed") == failed + 1
    assert (_value("baton_wake_seconds_count"), _value("baton_wake_seconds_sum")) == (count + 1, total + 2.5)
    assert _value("baton_wake_seconds_bucket", le="3.0") >= 1


def test_the_idle_gauge_counts_what_the_source_says_and_is_absent_without_one() -> None:
    def families(idle: int | None) -> dict[str, float]:
        c = collectors.RuntimeCollector(lambda: [], idle=lambda: idle)
        return {f.name: f.samples[0].value for f in c.collect() if f.samples and not f.samples[0].labels}
    assert families(3) == {"baton_runtimes_idle": 3.0}
    assert families(None) == {}, "not the reporting replica: no series"
    assert controller.is_idle({"status": {"idle": {"since": "2026-01-01T00:00:00Z"}}})
    assert not controller.is_idle({"status": {"idle": {"since": None, "lastWake": {}}}})
    assert not controller.is_idle({"status": {}})
