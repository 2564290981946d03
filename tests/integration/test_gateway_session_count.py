"""The handoff's session count (issue 42 item 4: "the count in the handoff's history entry, a line
in `kubectl baton status`"), through real processes on the local plane.

While the retiring generation drains, the operator asks every live gateway replica
`GET /v1/inflight`; each answer lists the fingerprints of the MCP sessions that replica last
forwarded to the pod. The operator counts them once each over the replicas
(status.transition.gatewayCalls.sessions), keeps the count when the drain ends and writes it into
the generation's history entry (`sessionsToRebind`); `kubectl baton status` shows it.

- With stand-in replicas (harness.standin_gateway: a real Lease and admin listener each, answering
  what the test sets) and the operator as a real process: two replicas listing overlapping
  sessions give the distinct count.
- With real gateway processes and a tool that keeps MCP sessions (harness.gateway.McpSessions):
  three clients initialize through the gateway and call through both replicas; the handoff's
  history entry counts 3. Needs the gateway's session code (operator/baton/gateway/sessions.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, McpSessions, ToolFleet, call, rpc
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.standin_gateway import StandinGateway

pytestmark = pytest.mark.usefixtures("kwok_nodes")

SESSIONS_CODE = Path(__file__).resolve().parents[2] / "operator" / "baton" / "gateway" / "sessions.py"


@pytest.fixture
def standins(cluster: Any, namespace: str) -> Iterator[Callable[..., StandinGateway]]:
    started: list[StandinGateway] = []

    def start(instance: str) -> StandinGateway:
        g = StandinGateway(cluster.api_client, namespace, instance)
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


def test_the_history_entry_counts_the_sessions_the_replicas_saw_once_each(
        operators: Callable[..., OperatorProcess], rts: Runtimes, namespace: str, cluster: Any,
        standins: Callable[..., StandinGateway]) -> None:
    a, b = standins("gw-a"), standins("gw-b")
    # One session's calls went through both replicas ("s2"): counted once.
    a.sessions, b.sessions = ["s1", "s2"], ["s2", "s3"]
    m = runtime_manifest("routed", service=True, budgets={"drainSeconds": 30})
    m["spec"]["service"]["gateway"] = True
    rts.create(m)
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.wait_ready("routed", 1)
    rts.set_image("routed", "example/tool:2")
    st = rts.wait_ready("routed", 2, timeout=60)
    [entry] = st["history"]
    assert (entry["generation"], entry.get("sessionsToRebind")) == (1, 3), entry
    assert entry.get("message") is None, "a clean drain"
    assert a.count("GET", "/v1/inflight") >= 1 and b.count("GET", "/v1/inflight") >= 1
    shown = _status(cluster, "routed", namespace)
    print(shown)
    assert "  sessions: 3 on generation 1, re-bound at their next call (sessions: Rebind)" in shown, shown

    # A replica that answers without the list (a gateway older than the count): unknown, no line.
    b.sessions = None
    rts.set_image("routed", "example/tool:3")
    st = rts.wait_ready("routed", 3, timeout=60)
    assert st["history"][-1]["generation"] == 2 and "sessionsToRebind" not in st["history"][-1], st["history"]
    shown = _status(cluster, "routed", namespace)
    assert "sessions:" not in shown, shown


INITIALIZE = rpc("initialize", rid=0, protocolVersion="2025-11-25", capabilities={},
                 clientInfo={"name": "baton-session-count-test", "version": "1.0"})
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.skipif(not SESSIONS_CODE.exists(), reason="the gateway's session code (issue 42 items 1-2) is not there")
def test_the_sessions_forwarded_by_real_gateways_reach_the_history_entry(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, cluster: Any) -> None:
    fleet = ToolFleet(cluster.api_client, namespace, "tool", port=free_port(), sessions=McpSessions())
    try:
        gw_a, gw_b = gateways("gw-a"), gateways("gw-b")
        operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
        m = runtime_manifest("tool", service=True, loopback=True, budgets={"admissionSeconds": 30, "connectSeconds": 60})
        m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
        m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
        rts.create(m)
        rts.wait_ready("tool", 1)
        tool1 = wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
        host = f"tool.{namespace}"
        sessions: list[str] = []
        for i, first in enumerate((gw_a, gw_b, gw_a)):
            r = call(first.port, host, body=INITIALIZE, headers=HEADERS, timeout=30)
            assert r.status == 200, (r.status, r.headers, r.body)
            sid = r.headers["mcp-session-id"]
            sessions.append(sid)
            with_id = {**HEADERS, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
            assert call(first.port, host, body=INITIALIZED, headers=with_id, timeout=30).status == 202
            # Each session's calls go through both replicas: counted once by the operator.
            for n, gw in enumerate((gw_a, gw_b)):
                r = call(gw.port, host, body=rpc(rid=n + 1, name="echo", arguments={}), headers=with_id, timeout=30)
                assert r.status == 200 and r.generation == 1, (i, r.status, r.headers, r.body)
        assert len(set(sessions)) == 3 and len(tool1.issued) == 3

        rts.set_image("tool", "example/tool:2")
        st = rts.wait_ready("tool", 2, timeout=60)
        [entry] = st["history"]
        assert (entry["generation"], entry.get("sessionsToRebind")) == (1, 3), entry
        shown = _status(cluster, "tool", namespace)
        print(shown)
        assert "  sessions: 3 on generation 1, re-bound at their next call (sessions: Rebind)" in shown, shown
    finally:
        fleet.stop()
