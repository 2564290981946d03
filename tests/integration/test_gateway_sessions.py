"""Handshake-era MCP sessions across handoffs on the local plane (issue 42, items 1-2;
docs/gateway.md, "Sessions across a handoff"): operator and gateway replicas as real processes,
each generation's tool a ToolServer that keeps MCP sessions in its own memory
(harness.gateway.McpSessions: a new pod knows none of the old one's sessions).

The client here is a handshake-era client as the official SDKs are: it initializes once and
keeps its Mcp-Session-Id for every later call, never initializing again after an error.

- With `spec.service.sessions: Rebind` (the default), a session initialized on N keeps working on
  N+1 and N+2 without a 404, its calls alternating between two gateway replicas (one restarted
  between the handoffs); a call arriving during the handoff is held and answered by N+1; each
  replica replays `initialize` + `notifications/initialized` on a new generation once, the pod
  only ever sees its own session ids and the client only its own; counted in
  baton_gateway_sessions_rebound_total{outcome}.
- `Expire` answers the 404 UnknownSession after a handoff; a replay the serving pod refuses gives
  404 SessionReplayFailed saying why; DELETE ends the backend session; a 404 of the serving pod
  for a live mapping is passed on, not re-bound again.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import (SESSION_NOT_FOUND, GatewayProcess, InitializeFailure, McpSessions, Reply, ToolFleet,
                             ToolServer, call, rpc)
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")

NEVER_READY = "baton.dev/test-never-ready"  # kwok-loop: a pod with it never turns Ready
# The client's initialize, as a 2025-11-25 client sends it; a replay must send it verbatim.
INITIALIZE = rpc("initialize", rid=0, protocolVersion="2025-11-25", capabilities={"sampling": {}},
                 clientInfo={"name": "baton-session-test", "version": "1.0"})
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()


def session_runtime(name: str, *, port: int, sessions: str | None = None) -> dict[str, Any]:
    """A loopback runtime behind the gateway whose tool listens on `port`; short budgets."""
    m = runtime_manifest(name, service=True, loopback=True, budgets={"admissionSeconds": 30, "connectSeconds": 60})
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    if sessions is not None:
        m["spec"]["service"]["sessions"] = sessions
    return m


@pytest.fixture
def mode() -> McpSessions:
    return McpSessions()


@pytest.fixture
def fleet(cluster: Any, namespace: str, mode: McpSessions) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port(), sessions=mode)
    yield f
    f.stop()


class Client:
    """One handshake-era MCP client of runtime `tool`: `initialize` once, then every call with
    the session id it was given (through whichever gateway replica the test names)."""

    def __init__(self, namespace: str) -> None:
        self.host = f"tool.{namespace}"
        self.session = ""
        self.calls = 0

    def initialize(self, gw: GatewayProcess) -> Reply:
        r = call(gw.port, self.host, body=INITIALIZE, headers={"Accept": "application/json, text/event-stream"}, timeout=30)
        assert r.status == 200, (r.status, r.headers, r.body)
        self.session = r.headers["mcp-session-id"]
        done = self.send(gw, INITIALIZED)
        assert done.status == 202, (done.status, done.headers, done.body)
        return r

    def send(self, gw: GatewayProcess, body: bytes | None, *, method: str = "POST") -> Reply:
        headers = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": self.session,
                   "MCP-Protocol-Version": "2025-11-25"}
        return call(gw.port, self.host, body=body, method=method, headers=headers, timeout=60)

    def tool_call(self, gw: GatewayProcess) -> Reply:
        self.calls += 1
        return self.send(gw, rpc(rid=self.calls, name="echo", arguments={}))


def sse_result(body: bytes) -> Any:
    """The JSON-RPC answer in an SSE body (the tool's `event: message`)."""
    data = [line[len("data:"):].strip() for line in body.decode().replace("\r\n", "\n").split("\n")
            if line.startswith("data:")]
    assert len(data) == 1, body
    return json.loads(data[0])


def assert_answered(r: Reply, *, client: Client, tool: ToolServer) -> None:
    """Answered 200 by `tool` under a session id that tool issued; the client sees its own id."""
    assert r.status == 200, (r.status, r.headers, r.body)
    result = r.json()["result"]
    assert r.generation == tool.generation == result["gen"], (r.headers, result)
    assert result["session"] in tool.issued, "the pod got a session id it did not issue"
    assert r.headers.get("mcp-session-id") == client.session, "the client sees its own session id in every answer"


def assert_own_ids_only(tool: ToolServer) -> None:
    """Every request `tool` got with a session id carried one it issued; each initialize was the
    client's, verbatim, and each session it issued was told `notifications/initialized` before
    its first other request."""
    for e in tool.seen():
        assert e["session"] is None or e["session"] in tool.issued, (tool.generation, e["rpc"], e["session"])
    for init in tool.seen(rpc="initialize"):
        assert init["body"] == INITIALIZE, init["body"]
    for sid in tool.issued:
        rpcs = [e["rpc"] for e in tool.seen() if e["session"] == sid]
        assert rpcs and rpcs[0] == "notifications/initialized", (tool.generation, rpcs)


def start_runtime(operators: Callable[..., OperatorProcess], rts: Runtimes, fleet: ToolFleet, namespace: str,
                  *, sessions: str | None = None) -> ToolServer:
    # The operator seals the gateway replicas (their Leases are in the test's namespace).
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.create(session_runtime("tool", port=fleet.port, sessions=sessions))
    rts.wait_ready("tool", 1)
    tool: ToolServer = wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    return tool


def hand_off(rts: Runtimes, fleet: ToolFleet, generation: int, *, template: dict[str, Any] | None = None) -> ToolServer:
    """Change the template (the image to example/tool:<generation>), wait for that generation's tool."""
    rt = rts.get("tool")
    containers = rt["spec"]["template"]["spec"]["containers"]
    containers[0]["image"] = f"example/tool:{generation}"
    rts.patch("tool", {"spec": {"template": {**(template or {}), "spec": {"containers": containers}}}})
    rts.wait_ready("tool", generation, timeout=60)
    tool: ToolServer = wait_for(lambda: fleet.of(generation), timeout=30, what=f"the tool of g{generation}")
    return tool


def rebound(gw: GatewayProcess, outcome: str = "rebound") -> float:
    return gw.metric("baton_gateway_sessions_rebound_total", outcome=outcome)


def test_a_session_keeps_working_across_two_handoffs_and_two_replicas_one_restarted(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet, mode: McpSessions) -> None:
    mode.sse = True  # initialize answered as an event stream, as the official Python SDK's server does
    gw_a, gw_b = gateways("gw-a"), gateways("gw-b")
    tool1 = start_runtime(operators, rts, fleet, namespace)
    client = Client(namespace)
    init = client.initialize(gw_a)
    assert init.headers["content-type"].startswith("text/event-stream")
    assert sse_result(init.body)["result"]["serverInfo"]["version"] == "1"
    assert tool1.issued and client.session.startswith("bt1.") and client.session not in tool1.issued, \
        "the client gets the gateway's own session id, not the pod's"
    for gw in (gw_a, gw_b, gw_a, gw_b):
        assert_answered(client.tool_call(gw), client=client, tool=tool1)
    assert [e["rpc"] for e in tool1.seen()] == ["initialize", "notifications/initialized"] + ["tools/call"] * 4

    # Handoff 1 -> 2, g2 kept not Ready: a call of the session arriving meanwhile is held, then
    # answered by g2 (Rebind holds it like any other call: no 404 at once).
    rt = rts.get("tool")
    containers = rt["spec"]["template"]["spec"]["containers"]
    containers[0]["image"] = "example/tool:2"
    rts.patch("tool", {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: "true"}},
                                             "spec": {"containers": containers}}}})
    wait_for(lambda: (rts.status("tool").get("transition") or {}).get("step") == "Connecting", timeout=60,
             what="the handoff in Connecting")
    held: list[Reply | Exception] = []

    def held_call() -> None:
        try:
            held.append(client.tool_call(gw_a))
        except Exception as exc:  # recorded, asserted below
            held.append(exc)
    caller = threading.Thread(target=held_call, daemon=True)
    caller.start()
    wait_for(lambda: held or gw_a.metric("baton_gateway_held") >= 1, timeout=30, what="the session's call held")
    assert not held, f"answered while no generation served: {held}"
    new = wait_for(lambda: next((p for p in rts.pods("tool") if (p.metadata.labels or {}).get("baton.dev/generation") == "2"
                                 and p.status and p.status.pod_ip), None), timeout=30, what="g2's pod with an IP")
    rts.core.patch_namespaced_pod(new.metadata.name, namespace, {"metadata": {"annotations": {NEVER_READY: None}}})
    rts.wait_ready("tool", 2, timeout=60)
    tool2 = wait_for(lambda: fleet.of(2), timeout=30, what="the tool of g2")
    caller.join(60)
    assert held and isinstance(held[0], Reply), held
    print(f"held during the handoff: {held[0].status} g{held[0].generation} after {held[0].seconds:.2f}s")
    assert_answered(held[0], client=client, tool=tool2)
    assert gw_a.metric("baton_gateway_calls_total", outcome="held_then_forwarded") == 1, "the call was held, then forwarded"
    for gw in (gw_b, gw_a, gw_b, gw_a):
        assert_answered(client.tool_call(gw), client=client, tool=tool2)
    assert len(tool2.seen(rpc="initialize")) == 2, "one replay per replica"

    # gw-b restarts (same identity, a new process: nothing of it kept): its next call re-binds again.
    gw_b.kill()
    gw_b = gateways("gw-b")
    for gw in (gw_b, gw_a, gw_b):
        assert_answered(client.tool_call(gw), client=client, tool=tool2)
    assert len(tool2.seen(rpc="initialize")) == 3

    # Handoff 2 -> 3 (the annotation goes with it).
    tool3 = hand_off(rts, fleet, 3, template={"metadata": {"annotations": {NEVER_READY: None}}})
    for gw in (gw_b, gw_a, gw_b, gw_a):
        assert_answered(client.tool_call(gw), client=client, tool=tool3)
    assert len(tool3.seen(rpc="initialize")) == 2

    for tool in (tool1, tool2, tool3):
        assert_own_ids_only(tool)
    assert len(tool1.seen(rpc="initialize")) == 1, "g1 saw the client's own initialize only"
    # The calls each replica sent to g2 and g3 went under the session it replayed there.
    for tool in (tool2, tool3):
        per_session = {sid: [e["rpc"] for e in tool.seen() if e["session"] == sid] for sid in tool.issued}
        assert all(rpcs[0] == "notifications/initialized" and set(rpcs[1:]) <= {"tools/call"} and len(rpcs) >= 2
                   for rpcs in per_session.values()), per_session
    print(f"rebound: gw-a {rebound(gw_a)}, gw-b (restarted) {rebound(gw_b)}; initializes g1/g2/g3: "
          f"{[len(t.seen(rpc='initialize')) for t in (tool1, tool2, tool3)]}")
    assert (rebound(gw_a), rebound(gw_b)) == (2, 2), "one re-binding per replica and generation"
    assert rebound(gw_a, "failed") == rebound(gw_b, "failed") == 0


def test_expire_answers_unknown_session_after_a_handoff(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet) -> None:
    gw = gateways("gw-a")
    tool1 = start_runtime(operators, rts, fleet, namespace, sessions="Expire")
    client = Client(namespace)
    client.initialize(gw)
    assert_answered(client.tool_call(gw), client=client, tool=tool1)
    tool2 = hand_off(rts, fleet, 2)
    r = client.tool_call(gw)
    print(f"Expire after the handoff: {r.status} {r.headers.get('baton-reason')}: {r.body.decode()}")
    assert r.status == 404 and r.headers["baton-reason"] == "UnknownSession"
    doc = r.json()
    assert doc["id"] == client.calls and doc["error"]["data"]["reason"] == "UnknownSession"
    assert tool2.seen() == [], "nothing was replayed on g2, nor forwarded to it"
    assert rebound(gw) == rebound(gw, "failed") == 0


@pytest.mark.parametrize("failure,sse", [(InitializeFailure.HTTP_500, False), (InitializeFailure.JSONRPC_ERROR, True)],
                         ids=["http-500", "jsonrpc-error-sse"])
def test_a_failed_replay_answers_404_saying_why(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet, mode: McpSessions, failure: InitializeFailure, sse: bool) -> None:
    gw = gateways("gw-a")
    tool1 = start_runtime(operators, rts, fleet, namespace)
    client = Client(namespace)
    client.initialize(gw)
    assert_answered(client.tool_call(gw), client=client, tool=tool1)
    mode.sse, mode.fail_initialize = sse, failure  # every later initialize fails
    tool2 = hand_off(rts, fleet, 2)
    r = client.tool_call(gw)
    print(f"{failure.value}: {r.status} {r.headers.get('baton-reason')}: {r.body.decode()}")
    assert r.status == 404 and r.headers["baton-reason"] == "SessionReplayFailed"
    doc = r.json()
    assert doc["id"] == client.calls and doc["error"]["data"]["reason"] == "SessionReplayFailed"
    why = "HTTP 500" if failure is InitializeFailure.HTTP_500 else "unsupported protocol version"
    assert why in doc["error"]["message"], doc["error"]["message"]
    assert [e["rpc"] for e in tool2.seen()] == ["initialize"], "the call itself was not forwarded without a session"
    assert tool2.seen(rpc="initialize")[0]["body"] == INITIALIZE
    assert (rebound(gw), rebound(gw, "failed")) == (0, 1)


def test_delete_ends_the_backend_session_and_a_404_of_the_serving_pod_is_passed_on(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet) -> None:
    gw = gateways("gw-a")
    tool1 = start_runtime(operators, rts, fleet, namespace)
    ending, forgotten = Client(namespace), Client(namespace)
    for client in (ending, forgotten):
        client.initialize(gw)
        assert_answered(client.tool_call(gw), client=client, tool=tool1)
    tool2 = hand_off(rts, fleet, 2)
    backend: dict[str, str] = {}
    for name, client in (("ending", ending), ("forgotten", forgotten)):
        r = client.tool_call(gw)
        assert_answered(r, client=client, tool=tool2)
        backend[name] = r.json()["result"]["session"]
    assert rebound(gw) == 2 and len(tool2.issued) == 2

    # DELETE: the pod gets it under its own id and ends that session; the client's next call is a 404.
    ended = ending.send(gw, None, method="DELETE")
    print(f"DELETE: {ended.status} {ended.headers}")
    assert 200 <= ended.status < 300, (ended.status, ended.body)
    assert tool2.ended == [backend["ending"]]
    after = ending.tool_call(gw)
    assert after.status == 404, (after.status, after.body)

    # The serving pod forgets a live session: its 404 reaches the client, no replay follows (twice).
    tool2.forget(backend["forgotten"])
    for _ in range(2):
        r = forgotten.tool_call(gw)
        print(f"forgotten by g2: {r.status} {r.headers.get('baton-reason')}: {r.body.decode()}")
        assert r.status == 404 and r.generation == 2, (r.status, r.headers, r.body)
        assert r.json()["error"]["code"] == SESSION_NOT_FOUND, "the pod's own answer"
        assert "baton-reason" not in r.headers, "passed on from the pod, not the gateway's"
    assert len(tool2.seen(rpc="initialize")) == 2, "no second initialize: not re-bound in a loop"
    assert (rebound(gw), rebound(gw, "failed")) == (2, 0)
    assert_own_ids_only(tool2)
