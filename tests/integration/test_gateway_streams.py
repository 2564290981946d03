"""Quiet streams at the seal (issue 41 deliverable 7; review item 7), operator and gateway as real
processes, the default drainSeconds, admissionSeconds left to its default: an MCP-style
GET event stream open on N and quiet (an idle client's server-to-client stream) used to count in
flight until drainSeconds ran out, so every handoff drained for 30 s with `DrainIncomplete`, and
calls held meanwhile were refused at admissionSeconds. Now the gateway ends it once N is sealed
and it has been quiet for BATON_GATEWAY_STREAM_IDLE_SECONDS (a clean end of the stream), the
drain ends at once, and the call held meanwhile is answered by N+1. The handoff's duration is
printed: it is the measurement behind admissionSeconds' default (docs/gateway.md, "Bounds")."""
from __future__ import annotations

import http.client
import threading
import time
from typing import Any, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")
# The CRD's default drainSeconds; the grace short, since kwok removes a pod only when its grace
# ends (a kubelet's tool exits at SIGTERM), which would measure kwok, not the handoff.
BUDGETS = {"drainSeconds": 30, "terminationGraceSeconds": 1, "cleanupSeconds": 10, "connectSeconds": 60}


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


def test_a_quiet_event_stream_ends_at_the_seal_and_the_handoff_does_not_wait_for_it(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet) -> None:
    gw: GatewayProcess = gateways("gw-a")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    m = runtime_manifest("tool", service=True, loopback=True, budgets=BUDGETS)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    rts.create(m)
    st = rts.wait_ready("tool", 1)
    uid1 = st["current"]["uid"]
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    ended_before = gw.metric("baton_gateway_streams_ended_total")
    # The stream: one event at once, then quiet for 5 s between events (20 of them: 95 s in all).
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    conn.putrequest("GET", "/sse?count=20&gap=5", skip_host=True)
    conn.putheader("Host", host)
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Baton-Generation") == "1"
    events: list[bytes] = []
    stream_end: dict[str, Any] = {}

    def read_stream() -> None:
        try:
            while True:
                line = resp.readline()  # chunked decoding: b"" at the body's clean end
                if not line:
                    break
                if line.startswith(b"data: "):
                    events.append(line)
            stream_end["clean"] = True
        except Exception as exc:  # an incomplete chunked body: the stream was cut, not ended
            stream_end["error"] = repr(exc)
        stream_end["at"] = time.monotonic()
    reader = threading.Thread(target=read_stream, daemon=True)
    reader.start()
    wait_for(lambda: len(events) >= 1, timeout=10, what="the stream's first event")
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["inflight"] == 1, timeout=10,
             what="the stream counted in flight")
    t_change = time.monotonic()
    rts.set_image("tool", "example/tool:2")
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["sealed"], timeout=30, what="g1 sealed")
    out: dict[str, Reply] = {}
    held = threading.Thread(target=lambda: out.setdefault("held", call(gw.port, host, body=rpc(rid="h"), timeout=120)))
    held.start()
    reader.join(30)
    assert "at" in stream_end, "the quiet stream was not ended at the seal"
    held.join(90)
    st = rts.wait_ready("tool", 2, timeout=90)
    handoff = time.monotonic() - t_change
    print(f"quiet stream ended {stream_end['at'] - t_change:.2f}s after the change ({len(events)} event(s)); "
          f"handoff (change to g2 Ready) {handoff:.2f}s with drainSeconds=30, terminationGraceSeconds=1; "
          f"held call {out['held'].status} from g{out['held'].generation} after {out['held'].seconds:.2f}s")
    assert stream_end.get("clean") is True, stream_end  # a clean end: the chunked body was terminated
    assert len(events) < 20
    assert gw.metric("baton_gateway_streams_ended_total") - ended_before >= 1
    assert out["held"].status == 200 and out["held"].generation == 2 and out["held"].json()["id"] == "h"
    history = st.get("history") or []
    assert history and history[-1]["generation"] == 1 and history[-1]["outcome"] == "Retired", history
    assert "drain" not in str(history[-1].get("message") or "").lower(), history[-1]
    # Far below drainSeconds: the drain did not wait for the stream.
    assert handoff < 25, handoff
    conn.close()
