"""Baton's alerts and Grafana dashboard against a real Prometheus scraping a real operator.

Prometheus is the server `make tools` builds from the pinned Prometheus module (no web UI), on
127.0.0.1, scraping the operator's /metrics every second the way the chart's ServiceMonitor does
(job "baton-metrics", target namespace "baton-system", honor_labels) and evaluating the chart's
own rules (release "baton" in "baton-system", short `for`) every second.

A stuck pod (a finalizer nobody removes) holds a handoff in CleanupFailed: BatonCleanupFailedHeld
fires for that runtime; a force recovery resolves it and fires BatonForceRecovery. Every query of
the dashboard the chart ships then runs against that Prometheus and must neither error nor come
back empty. Last, the operator stops and BatonOperatorDown fires. Firing alerts with the real
scrape labels also prove the release scoping of the expressions matches what a scrape yields.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from dev.wait import WaitTimeout, wait_for
from harness.chart import render
from harness.operator import OperatorProcess
from harness.prometheus import (DASHBOARD, JOB, RELEASE_NAMESPACE, RUNBOOKS, Prometheus, chart_rules, dashboard_queries,
                                stuck_threshold_in_runbook)
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int], Prometheus]]:
    started: list[Prometheus] = []

    def start(target_port: int) -> Prometheus:
        rules = chart_rules(cleanupFailedFor="2s", operatorDownFor="2s", forceRecoveryWindow="10m")
        p = Prometheus(tmp_path / "prometheus", rules, target_port)
        started.append(p)
        return p.start()

    yield start
    for p in started:
        p.stop()


def test_dashboard_has_the_panels_asked_for() -> None:
    titles = {t for t, _ in dashboard_queries()}
    for wanted in ("Runtimes by condition", "Handoffs by outcome", "Step duration p95 by step",
                   "Lock wait p50 / p95", "Cleanup failures by reason", "Force recoveries",
                   "Passes by result", "Pass duration p50 / p95", "Queue depth and workers",
                   "Time in queue p95 and the longest turn", "API error ratio", "Watch errors by kind and reason",
                   "Memory against the limit", "Held and in-flight calls", "Refusals by reason",
                   "Added latency of held calls p50 / p95"):
        assert wanted in titles, f"dashboard has no panel {wanted!r}"


def test_dashboard_configmap_is_opt_in_and_carries_the_json() -> None:
    assert not [o for o in render() if o["kind"] == "ConfigMap"]
    objs = render({"grafanaDashboard.enabled": "true", "grafanaDashboard.labels.team": "platform",
                   "grafanaDashboard.annotations.grafana_folder": "Operators"})
    [cm] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["team"] == "platform"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Operators"}
    assert cm["metadata"]["namespace"] == "baton-system"
    assert json.loads(cm["data"]["baton.json"]) == json.loads(DASHBOARD.read_text())
    [cm] = [o for o in render({"grafanaDashboard.enabled": "true", "grafanaDashboard.namespace": "monitoring"})
            if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["namespace"] == "monitoring"


def test_alerts_fire_and_resolve_and_every_dashboard_query_answers(
        operators: Start, rts: Runtimes, namespace: str,
        prometheus: Callable[[int], Prometheus]) -> None:
    op = operators("op-a")
    prom = prometheus(op.metrics_port)
    wait_for(lambda: [s["value"][1] for s in prom.query(f'up{{job="{JOB}", namespace="{RELEASE_NAMESPACE}"}}')] == ["1"],
             timeout=30, what="Prometheus scrapes the operator")

    budgets = {"lockSeconds": 2, "connectSeconds": 13, "drainSeconds": 3, "terminationGraceSeconds": 1,
               "cleanupSeconds": 4}
    rts.create(runtime_manifest("held", budgets=budgets))
    st1 = rts.wait_ready("held", 1)
    rts.core.patch_namespaced_pod(st1["current"]["pod"], namespace,
                                  {"metadata": {"finalizers": ["test.baton.dev/hold"]}})
    rts.set_image("held", "example/tool:2")
    wait_for(lambda: (rts.condition("held", "CleanupFailed") or {}).get("status") == "True",
             timeout=30, what="CleanupFailed=True")

    # The threshold of BatonTransitionStuck, as the runbook states it, is what the operator exports.
    terms = stuck_threshold_in_runbook()
    expected = float(sum(budgets[t] for t in terms))
    sel = f'baton_transition_budget_seconds{{job="{JOB}", namespace="{namespace}", runtime="held"}}'
    got = wait_for(lambda: prom.query(sel), timeout=20, what=sel)
    assert [float(s["value"][1]) for s in got] == [expected], (terms, got)

    held = {"namespace": namespace, "runtime": "held"}
    [alert] = wait_for(lambda: [a for a in prom.alerts("BatonCleanupFailedHeld", **held) if a["state"] == "firing"],
                       timeout=60, what="BatonCleanupFailedHeld firing")
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#batoncleanupfailedheld"
    assert f"ToolRuntime {namespace}/held" in alert["annotations"]["summary"]
    assert not prom.alerts("BatonForceRecovery")

    rts.annotate("held", "baton.dev/force-recovery", "1")
    rts.wait_ready("held", 2)
    wait_for(lambda: not prom.alerts("BatonCleanupFailedHeld", **held), timeout=60,
             what="BatonCleanupFailedHeld resolved")
    [fr] = wait_for(lambda: [a for a in prom.alerts("BatonForceRecovery") if a["state"] == "firing"],
                    timeout=60, what="BatonForceRecovery firing")
    assert fr["annotations"]["runbook_url"] == f"{RUNBOOKS}#batonforcerecovery"

    # Every panel of the dashboard answers, with at least one number. A counter series that
    # appeared with the force recovery needs two scrapes before increase() sees it: wait for that.
    empty: list[str] = []

    def all_answer() -> bool:
        empty.clear()
        for title, expr in dashboard_queries():
            result: list[dict[str, Any]] = prom.query(expr)  # a query Prometheus refuses fails here
            if "baton_gateway_" in expr or "baton_wake_seconds" in expr or "baton_hook_seconds" in expr:
                # No gateway runs here, so no wake either (spec.idle needs it), and no runtime has
                # hooks: accepted is all this test can ask of those panels (a quantile of nothing
                # is NaN; tests/integration/test_dashboard_idle_panel.py and
                # test_dashboard_hooks_panel.py answer them from recorded series).
                continue
            if expr.startswith("max by (pod) (baton_memory_limit_bytes{"):
                continue  # absent when the container has no memory limit, as this test's process
            if not any(math.isfinite(float(s["value"][1])) for s in result):
                empty.append(f"{title}: {expr} -> {result}")
        return not empty

    try:
        wait_for(all_answer, timeout=30, interval=1, what="every dashboard query answers")
    except WaitTimeout:
        raise AssertionError("dashboard queries that return nothing:\n" + "\n".join(empty)) from None

    # (Not asserted: that BatonOperatorDown is quiet while the operator runs. One slow scrape on
    # a loaded machine is up=0 for a second; the selector it uses is the one waited for above.)
    op.kill()
    wait_for(lambda: [a for a in prom.alerts("BatonOperatorDown") if a["state"] == "firing"],
             timeout=60, what="BatonOperatorDown firing once the operator is gone")
