"""`kubectl baton status` for a runtime routed through the gateway, with the operator as a real
process and gateway replicas played by stand-ins (harness.standin_gateway: a real Lease each, a
real admin listener on 127.0.0.1 answering seal and in-flight as the test sets): while the
retiring generation drains, status says the gateway is on and the step; once drainSeconds ran out
with calls still in flight, it shows the count the operator recorded (the transition's drainNote,
carried into the history entry), the same text the history holds."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.standin_gateway import StandinGateway

Start = Callable[..., OperatorProcess]


@pytest.fixture
def standins(cluster: Any, namespace: str) -> Iterator[Callable[..., StandinGateway]]:
    started: list[StandinGateway] = []

    def start(instance: str, **kw: Any) -> StandinGateway:
        g = StandinGateway(cluster.api_client, namespace, instance, **kw)
        started.append(g)
        return g
    yield start
    for g in started:
        g.close()


def _status(cluster: Any, name: str, namespace: str) -> str:
    script = Path(sys.executable).parent / "kubectl-baton"
    res = subprocess.run([str(script), "status", name, "-n", namespace, "--kubeconfig", cluster.kubeconfig],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=cluster.env)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.usefixtures("kwok_nodes")
def test_status_shows_the_gateway_and_the_calls_left_in_flight(
        operators: Start, rts: Runtimes, namespace: str, cluster: Any,
        standins: Callable[..., StandinGateway]) -> None:
    a = standins("gw-a")
    b = standins("gw-b")
    a.inflight, b.inflight = 2, 1  # never finish: the drain ends at its budget
    m = runtime_manifest("routed", service=True, budgets={"drainSeconds": 15, "admissionSeconds": 45})
    m["spec"]["service"]["gateway"] = True
    rts.create(m)
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.wait_ready("routed", 1)
    # drainSeconds 15: Draining lasts that long (the calls never finish), time enough for one call of
    # the plugin on a loaded machine.
    rts.set_image("routed", "example/tool:2")

    wait_for(lambda: (rts.status("routed").get("transition") or {}).get("step") == "Draining", timeout=30,
             what="the retire draining")
    shown = _status(cluster, "routed", namespace)
    assert "  transition: Handoff g1 -> g2 (TemplateChanged), step Draining, deadline " in shown, shown
    assert ("  gateway: on: during a transition new calls are held, each at most 45s (budgets.admissionSeconds), "
            "and the retiring generation drains its calls in flight") in shown, shown

    st = rts.wait_ready("routed", 2, timeout=60)
    recorded = st["history"][0]["message"]
    assert recorded == "drain incomplete: 3 calls still in flight at the gateway", recorded
    shown = _status(cluster, "routed", namespace)
    assert f"  last retired: generation 1 ({st['history'][0]['outcome']}): {recorded}" in shown, shown
    assert "  transition: none" in shown
