"""Stateless (2026-07-28) clients at a handoff (issue 42 item 3), operator and gateway as real
processes, the tool played on its pod's loop IP by harness.gateway.ToolServer in its Stateless
mode (as the official Python SDK's server answers `subscriptions/listen` and `tools/list`).

- A `subscriptions/listen` stream open on N (its answer stays open, pinged every 0.5 s) used to
  count in flight like any call: the drain waited drainSeconds for it. Now the gateway ends it at
  the seal the specification's way (the listen request's result, stamped with its subscription
  id, as the last SSE event, then a clean end of the chunked body), the drain does not wait, and
  the client's next listen is held and answered by N+1.
- `tools/list` answered while an update is pending (handoff policy Manual: UpdatePending=True,
  N still serving) carries `ttlMs` capped at listing.TRANSITION_TTL_MS (JSON and SSE answers);
  before the change, the pod's own value.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any, Iterator

import pytest

from baton.gateway import listing
from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import SUBSCRIPTION_ID, GatewayProcess, Stateless, ToolFleet, call, rpc
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")
# The CRD's default drainSeconds; the grace short (kwok removes a pod only when its grace ends).
BUDGETS = {"drainSeconds": 30, "terminationGraceSeconds": 1, "cleanupSeconds": 10, "connectSeconds": 60}
MODERN = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28"}
TTL_MS = 3_600_000


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    f.stateless = Stateless(ttl_ms=TTL_MS)
    yield f
    f.stop()


def _runtime(fleet: ToolFleet, *, policy: str | None = None) -> dict[str, Any]:
    m = runtime_manifest("tool", service=True, loopback=True, budgets=BUDGETS)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    if policy:
        m["spec"]["handoff"] = {"policy": policy}
    return m


class Listen:
    """One `subscriptions/listen` through the gateway, read in a thread: its SSE events' JSON."""

    def __init__(self, port: int, host: str, rid: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
        body = rpc("subscriptions/listen", rid=rid, notifications={"toolsListChanged": True})
        self.conn.putrequest("POST", "/mcp", skip_host=True, skip_accept_encoding=True)
        for k, v in {"Host": host, "Content-Type": "application/json", "Content-Length": str(len(body)), **MODERN}.items():
            self.conn.putheader(k, v)
        self.conn.endheaders(body)
        self.resp = self.conn.getresponse()
        self.events: list[dict[str, Any]] = []
        self.end: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                line = self.resp.readline()  # chunked decoding: b"" at the body's clean end
                if not line:
                    break
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[6:]))
            self.end["clean"] = True
        except Exception as exc:  # an incomplete chunked body: the stream was cut, not ended
            self.end["error"] = repr(exc)
        self.end["at"] = time.monotonic()

    def close(self) -> None:
        self.conn.close()
        self.thread.join(10)


def test_a_listen_stream_ends_at_the_seal_the_specifications_way_and_the_client_listens_again_on_n1(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet) -> None:
    gw: GatewayProcess = gateways("gw-a")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.create(_runtime(fleet))
    uid1 = rts.wait_ready("tool", 1)["current"]["uid"]
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    first = Listen(gw.port, host, "listen-1")
    try:
        assert first.resp.status == 200 and first.resp.getheader("Baton-Generation") == "1"
        wait_for(lambda: first.events, timeout=10, what="the listen's acknowledgement")
        ack = first.events[0]
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"] == {SUBSCRIPTION_ID: "listen-1"}
        wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["inflight"] == 1, timeout=10,
                 what="the listen counted in flight")
        t_change = time.monotonic()
        rts.set_image("tool", "example/tool:2")
        wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["sealed"], timeout=30, what="g1 sealed")
        t_sealed = time.monotonic()
        first.thread.join(20)
        assert "at" in first.end, "the listen stream was not ended at the seal"
        print(f"listen ended {first.end['at'] - t_sealed:.2f}s after the seal was seen")
        assert first.end.get("clean") is True, first.end  # the chunked body was terminated
        # The specification's graceful end: the listen request's own result, last.
        assert first.events[-1] == {"jsonrpc": "2.0", "id": "listen-1", "result": {
            "_meta": {SUBSCRIPTION_ID: "listen-1"}, "resultType": "complete"}}, first.events
        # The pod saw its client leave (the gateway closed its side): the call is over on N.
        tool1 = fleet.of(1)
        assert tool1 is not None
        wait_for(lambda: any(e.get("listen_end") == "client" for e in tool1.seen(method="POST")), timeout=10,
                 what="g1's tool saw the listen end")
        # The client listens again: held until N+1 serves, then answered by it.
        again = Listen(gw.port, host, "listen-2")
        try:
            assert again.resp.status == 200 and again.resp.getheader("Baton-Generation") == "2"
            wait_for(lambda: again.events, timeout=10, what="N+1's acknowledgement")
            assert again.events[0]["params"]["_meta"] == {SUBSCRIPTION_ID: "listen-2"}
        finally:
            again.close()
        st = rts.wait_ready("tool", 2, timeout=90)
        handoff = time.monotonic() - t_change
        print(f"handoff (change to g2 Ready) {handoff:.2f}s with drainSeconds=30")
        history = st.get("history") or []
        assert history and history[-1]["generation"] == 1 and history[-1]["outcome"] == "Retired", history
        assert "drain" not in str(history[-1].get("message") or "").lower(), history[-1]
        assert handoff < 25, handoff  # far below drainSeconds: the drain did not wait for the listen
    finally:
        first.close()


def _list(port: int, host: str) -> tuple[int | None, Any]:
    """(the answering generation, the result's ttlMs) of one tools/list, JSON or SSE."""
    reply = call(port, host, body=rpc("tools/list", rid="l"), headers=MODERN, timeout=30)
    assert reply.status == 200, reply
    text = reply.body
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[6:] for line in reply.body.splitlines() if line.startswith(b"data: "))
    return reply.generation, json.loads(text)["result"]["ttlMs"]


def test_list_ttl_is_capped_while_an_update_is_pending_and_not_before(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet) -> None:
    gw: GatewayProcess = gateways("gw-a")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.create(_runtime(fleet, policy="Manual"))
    rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    mode = fleet.stateless
    assert mode is not None
    for sse in (False, True):  # steady state: the pod's own ttlMs, JSON and SSE alike
        mode.list_sse = sse
        assert _list(gw.port, host) == (1, TTL_MS)
    rts.set_image("tool", "example/tool:2")  # Manual: UpdatePending=True, N keeps serving
    wait_for(lambda: (rts.condition("tool", "UpdatePending") or {}).get("status") == "True", timeout=30,
             what="UpdatePending=True")
    mode.list_sse = False
    wait_for(lambda: _list(gw.port, host) == (1, listing.TRANSITION_TTL_MS), timeout=15,
             what="tools/list's ttlMs capped while the update is pending (JSON)")
    mode.list_sse = True
    assert _list(gw.port, host) == (1, listing.TRANSITION_TTL_MS)  # SSE too
