"""`kubectl baton status` for a runtime routed through the gateway, with the operator as a real
process and gateway replicas played by stand-ins (harness.standin_gateway: a real Lease each, a
real admin listener on 127.0.0.1 answering seal and in-flight as the test sets): while the
retiring generation drains, status says the gateway is on and the step; once drainSeconds ran out
with calls still in flight, it shows the count the operator recorded (the transition's drainNote,
carried into the history entry), the same text the history holds. Then with the operator and a
real gateway process (harness.gateway) and the tool played on its kwok-loop pod IP: a slow call in
flight on N during the handoff shows as in flight, a call arriving meanwhile as held for N+1,
and both go once the transition ends."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
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


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


def _calls(rts: Runtimes) -> dict[str, Any]:
    return (rts.status("tool").get("transition") or {}).get("gatewayCalls") or {}


@pytest.mark.usefixtures("kwok_nodes")
def test_status_shows_the_calls_in_flight_and_held_during_a_handoff(
        operators: Start, gateways: Callable[..., GatewayProcess], rts: Runtimes, namespace: str, cluster: Any,
        fleet: ToolFleet) -> None:
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    gw = gateways("gw-a")
    m = runtime_manifest("tool", service=True, loopback=True, budgets={"drainSeconds": 120, "admissionSeconds": 120})
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    rts.create(m)
    st = rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    assert call(gw.port, host, body=rpc()).generation == 1
    out: dict[str, Reply | Exception] = {}

    def send(key: str, body: bytes) -> None:
        try:
            out[key] = call(gw.port, host, body=body, timeout=90)
        except Exception as exc:  # recorded, asserted below
            out[key] = exc
    # The tool answers `slow` after 30 s (its cap): the drain waits for it, with room for the plugin.
    slow = threading.Thread(target=send, args=("slow", rpc("slow", rid="slow", seconds=30)), daemon=True)
    slow.start()
    held = None
    try:
        wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={st['current']['uid']}")[1]["inflight"] == 1, timeout=10,
                 what="the slow call in flight on g1")
        rts.set_image("tool", "example/tool:2")
        wait_for(lambda: _calls(rts).get("inflight") == 1, timeout=20, what="status recording 1 call in flight on g1")
        shown = _status(cluster, "tool", namespace)
        print(shown)
        assert "    gateway calls: 1 in flight on g1, 0 held for g2 (1 of 1 gateway replica answered)" in shown, shown

        # A call arriving now is held (g1 is sealed, g2 not serving yet): status says so.
        held = threading.Thread(target=send, args=("held", rpc(rid="held")), daemon=True)
        held.start()
        wait_for(lambda: _calls(rts).get("held") == 1, timeout=15, what="status recording 1 call held for g2")
        shown = _status(cluster, "tool", namespace)
        print(shown)
        assert "  transition: Handoff g1 -> g2 (TemplateChanged), step Draining, deadline " in shown, shown
        assert "    gateway calls: 1 in flight on g1, 1 held for g2 (1 of 1 gateway replica answered)" in shown, shown
        assert "slow" not in out, "the slow call finished before the plugin could show it: the test proved nothing"
    finally:
        slow.join(90)
        if held is not None:
            held.join(90)
    after = rts.wait_ready("tool", 2, timeout=120)
    print(f"slow: {out.get('slow')}; held: {out.get('held')}")
    slow_reply, held_reply = out["slow"], out["held"]
    assert isinstance(slow_reply, Reply) and slow_reply.status == 200 and slow_reply.generation == 1
    assert isinstance(held_reply, Reply) and held_reply.status == 200 and held_reply.generation == 2
    # The transition ended: the counts went with it.
    assert after.get("transition") is None
    shown = _status(cluster, "tool", namespace)
    print(shown)
    assert "  transition: none" in shown and "gateway calls" not in shown, shown
