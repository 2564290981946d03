"""The gateway on the local plane (DESIGN.md, "Gateway"): operator and gateway as real
processes, each generation's tool a small HTTP server on its kwok-loop pod IP
(harness.gateway.ToolFleet). Steady-state forwarding with Baton-Generation, streaming both ways;
what names no runtime gets 404 and nothing is dialled; request smuggling 400; refusals at once
with the reason (a JSON-RPC error carrying the request's id); the registration Lease and the
admin API."""
from __future__ import annotations

import http.client
import json
import signal
import time
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client

from dev.ports import free_port
from dev.wait import wait_for
from harness import badprobe
from harness.gateway import GatewayProcess, ToolFleet, call, raw_call, rpc
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")


def gw_runtime(name: str, *, port: int, gateway: bool = True, admission: int | None = None, **kw: Any) -> dict[str, Any]:
    """A loopback runtime whose tool listens on `port` (a free one: kwok-loop IPs are shared
    by every test session on the machine)."""
    m = runtime_manifest(name, service=True, loopback=True, **kw)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": gateway}
    if admission is not None:
        m["spec"]["budgets"]["admissionSeconds"] = admission
    return m


@pytest.fixture
def fleets(cluster: Any, namespace: str) -> Iterator[Callable[[str], ToolFleet]]:
    started: list[ToolFleet] = []

    def start(runtime: str) -> ToolFleet:
        fleet = ToolFleet(cluster.api_client, namespace, runtime, port=free_port())
        started.append(fleet)
        return fleet

    yield start
    for f in started:
        f.stop()


def serving(fleet: ToolFleet, generation: int) -> Any:
    return wait_for(lambda: fleet.of(generation), timeout=30, what=f"the tool of generation {generation} listening")


def rpc_fields(tool: Any, field: str) -> list[Any]:
    """`field` of every JSON-RPC request the tool received (bodies that are not JSON-RPC skipped)."""
    out = []
    with tool.lock:
        bodies = [r["body"] for r in tool.requests]
    for body in bodies:
        try:
            msg = json.loads(body)
        except ValueError:
            continue
        if isinstance(msg, dict) and field in msg:
            out.append(msg[field])
    return out


def test_steady_state_forwarding_streams_both_ways(operators: Callable[..., OperatorProcess],
                                                   gateways: Callable[..., GatewayProcess], rts: Runtimes,
                                                   namespace: str, fleets: Callable[[str], ToolFleet]) -> None:
    operators("op-a")
    gw = gateways("gw-a")
    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port))
    rts.wait_ready("tool", 1)
    tool = serving(fleet, 1)
    for host in (f"tool.{namespace}", f"tool.{namespace}.svc", f"tool.{namespace}.svc.cluster.local",
                 f"tool.{namespace}:80", f"tool.{namespace}.svc.cluster.local:80", f"TOOL.{namespace}.SVC."):
        r = call(gw.port, host, body=rpc(rid=f"id-{host}"))
        assert r.status == 200, (host, r)
        assert r.generation == 1 and r.json() == {"jsonrpc": "2.0", "id": f"id-{host}", "result": {"gen": 1, "ip": tool.ip}}
    # Hop-by-hop headers stay on their hop: the tool never sees Connection-named fields or Proxy-*.
    call(gw.port, f"tool.{namespace}", body=rpc(rid=9),
         headers={"Connection": "X-Hop", "X-Hop": "1", "Proxy-Authorization": "x", "X-End": "2"})
    seen = tool.requests[-1]["headers"]
    assert seen.get("X-End") == "2" and "X-Hop" not in seen and "Proxy-Authorization" not in seen, seen
    assert seen.get("Host") == f"tool.{namespace}"
    # A chunked request body arrives whole.
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.putrequest("POST", "/mcp", skip_host=True)
    conn.putheader("Host", f"tool.{namespace}")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    payload = rpc(rid=77)
    for part in (payload[:10], payload[10:]):
        conn.send(b"%x\r\n%s\r\n" % (len(part), part))
    conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["id"] == 77
    conn.close()
    assert tool.requests[-1]["body"] == payload
    # Server-sent events are passed on as they come, not buffered to the end.
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.putrequest("GET", "/sse?count=4&gap=0.5", skip_host=True)
    conn.putheader("Host", f"tool.{namespace}")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Baton-Generation") == "1"
    arrivals = []
    while len(arrivals) < 4:
        line = resp.fp.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data: "):
            arrivals.append(time.monotonic())
    conn.close()
    print(f"SSE event arrival gaps: {[round(b - a, 2) for a, b in zip(arrivals, arrivals[1:])]}")
    assert arrivals[-1] - arrivals[0] >= 1.0, "the events arrived together: the stream was buffered"
    assert gw.metric("baton_gateway_calls_total", outcome="forwarded") >= 9
    # The SSE call ends in flight once the gateway has seen its client go.
    wait_for(lambda: gw.metric("baton_gateway_inflight") == 0, timeout=10, what="nothing in flight")
    assert gw.metric("baton_gateway_upstream_errors_total") == 0


def test_a_host_naming_no_runtime_gets_404_and_nothing_is_dialled(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleets: Callable[[str], ToolFleet], cluster: Any) -> None:
    operators("op-a")
    gw = gateways("gw-a")
    tool_fleet, other_fleet = fleets("tool"), fleets("other")
    rts.create(gw_runtime("tool", port=tool_fleet.port))
    rts.create(gw_runtime("other", port=other_fleet.port, gateway=False))  # a Service the gateway does not serve
    rts.wait_ready("tool", 1)
    rts.wait_ready("other", 1)
    tool, other = serving(tool_fleet, 1), serving(other_fleet, 1)
    canary_ip = "127.0.100.250"
    canary_port = free_port()
    with badprobe.Canary(canary_ip, canary_port) as canary:
        hosts = [f"nothing.{namespace}", f"other.{namespace}", f"other.{namespace}.svc.cluster.local",
                 f"tool.{namespace}:{tool.port}",  # not a port of its Service
                 f"tool.{namespace}.svc.example.com", tool.ip, f"{tool.ip}:{tool.port}", f"{canary_ip}:{canary_port}",
                 "kubernetes.default.svc", "localhost", f"tool.{namespace}.{canary_ip}"]
        for host in hosts:
            r = call(gw.port, host, body=rpc(rid=3))
            assert r.status == 404 and r.headers.get("baton-reason") == "UnknownRuntime", (host, r)
            assert r.json()["id"] == 3 and r.json()["error"]["data"]["reason"] == "UnknownRuntime"
        assert canary.connections() == [], "the canary was dialled"
    assert tool.count() == 0 and other.count() == 0, "a tool was dialled for a Host that names no runtime"
    # Request smuggling: Content-Length beside Transfer-Encoding is refused, nothing forwarded.
    out = raw_call(gw.port, (f"POST /mcp HTTP/1.1\r\nHost: tool.{namespace}\r\nContent-Length: 4\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").encode())
    assert out.split(b"\r\n", 1)[0].split(b" ")[1] == b"400", out[:200]
    out = raw_call(gw.port, (f"POST /mcp HTTP/1.1\r\nHost: tool.{namespace}\r\nContent-Length: 4\r\n"
                             "Content-Length: 5\r\n\r\nabcde").encode())
    assert out.split(b"\r\n", 1)[0].split(b" ")[1] == b"400", out[:200]
    assert tool.count() == 0
    # The same gateway forwards a well-formed call: the 404s were not a gateway that forwards nothing.
    assert call(gw.port, f"tool.{namespace}", body=rpc()).status == 200 and tool.count() == 1


def test_suspended_runtime_is_refused_at_once_with_a_jsonrpc_error(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleets: Callable[[str], ToolFleet]) -> None:
    operators("op-a")
    gw = gateways("gw-a")
    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port))
    rts.wait_ready("tool", 1)
    serving(fleet, 1)
    rts.patch("tool", {"spec": {"suspend": True}})
    wait_for(lambda: (rts.condition("tool", "Suspended") or {}).get("status") == "True", timeout=60,
             what="Suspended=True")
    r = call(gw.port, f"tool.{namespace}", body=rpc(rid="req-42"))
    print(f"suspended: {r.status} {r.headers.get('baton-reason')} in {r.seconds:.3f}s: {r.body.decode()}")
    assert r.status == 503 and r.headers["baton-reason"] == "Suspended" and int(r.headers["retry-after"]) > 0
    assert r.seconds < 2.0, "refused at once, not held"
    doc = r.json()
    assert doc["jsonrpc"] == "2.0" and doc["id"] == "req-42" and doc["error"]["code"] == -32000
    assert doc["error"]["data"] == {"reason": "Suspended", "runtime": f"{namespace}/tool", "generation": None}
    # Not JSON-RPC: a plain JSON body, same reason.
    r = call(gw.port, f"tool.{namespace}", body=b"hello", headers={"Content-Type": "text/plain"})
    assert r.status == 503 and r.json()["reason"] == "Suspended"
    assert gw.metric("baton_gateway_calls_total", outcome="refused", reason="Suspended") == 2


def test_registration_lease_admin_api_and_seal(operators: Callable[..., OperatorProcess],
                                                gateways: Callable[..., GatewayProcess], rts: Runtimes,
                                                namespace: str, fleets: Callable[[str], ToolFleet],
                                                cluster: Any) -> None:
    coord = client.CoordinationV1Api(cluster.api_client)
    operators("op-a")
    gw = gateways("gw-a")
    lease = coord.read_namespaced_lease("baton-gateway.gw-a", namespace)
    assert lease.metadata.labels == {"baton.dev/component": "gateway"}
    assert lease.metadata.annotations["baton.dev/gateway-admin"] == f"127.0.0.1:{gw.admin_port}"
    assert lease.spec.holder_identity == "gw-a" and lease.spec.lease_duration_seconds == 6
    first = lease.spec.renew_time
    wait_for(lambda: coord.read_namespaced_lease("baton-gateway.gw-a", namespace).spec.renew_time > first,
             timeout=20, what="the gateway Lease renewed")
    # The admin API: exactly two endpoints; bad input names the field.
    assert gw.admin("GET", "/v1/nothing")[0] == 404
    assert gw.admin("GET", "/v1/seal")[0] == 404
    status, doc = gw.admin("POST", "/v1/seal", {"namespace": namespace, "runtime": "tool"})
    assert status == 400 and "uid" in doc["error"]
    assert gw.admin("POST", "/v1/seal", b"{not json")[0] == 400
    assert gw.admin("GET", "/v1/inflight")[0] == 400

    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port, admission=3))
    st = rts.wait_ready("tool", 1)
    tool = serving(fleet, 1)
    uid = st["current"]["uid"]
    assert call(gw.port, f"tool.{namespace}", body=rpc()).status == 200
    assert gw.admin("GET", f"/v1/inflight?uid={uid}") == (200, {"uid": uid, "inflight": 0, "sealed": False,
                                                                "sessions": [], "sessionsTruncated": False})
    # A slow call in flight is counted, and a seal reports it.
    import threading
    slow: list[Any] = []
    t = threading.Thread(target=lambda: slow.append(call(gw.port, f"tool.{namespace}", body=rpc("slow", seconds=3))))
    t.start()
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid}")[1]["inflight"] == 1, timeout=10, what="one call in flight")
    # The gateway counts the call before the pod has read it (CI once took `before` in between).
    wait_for(lambda: "slow" in rpc_fields(tool, "method"), timeout=10, what="the pod received the slow call")
    assert gw.admin("POST", "/v1/seal", {"namespace": namespace, "runtime": "tool", "uid": uid}) == (200, {"sealed": True, "inflight": 1, "held": 0})
    before = tool.count()
    # Sealed: no new call reaches the pod; with no transition coming it is held for admissionSeconds, then Transitioning.
    r = call(gw.port, f"tool.{namespace}", body=rpc(rid=11))
    print(f"sealed pod: {r.status} {r.headers.get('baton-reason')} after {r.seconds:.2f}s")
    assert r.status == 503 and r.headers["baton-reason"] == "Transitioning" and r.json()["id"] == 11
    assert 2.5 <= r.seconds < 10
    t.join(30)
    assert slow and slow[0].status == 200 and slow[0].generation == 1, "the call in flight finished on its pod"
    assert tool.count() == before, "a call reached a sealed pod"
    assert 11 not in rpc_fields(tool, "id"), "the sealed call reached its pod"
    assert gw.admin("GET", f"/v1/inflight?uid={uid}") == (200, {"uid": uid, "inflight": 0, "sealed": True,
                                                                "sessions": [], "sessionsTruncated": False})
    assert gw.admin("POST", "/v1/seal", {"namespace": namespace, "runtime": "tool", "uid": uid})[0] == 200  # idempotent
    assert gw.metric("baton_gateway_hold_seconds_count") >= 1
    # A clean exit deletes the Lease.
    gw.signal(signal.SIGTERM)
    assert gw.wait_exit(30) == 0
    wait_for(lambda: not [x for x in coord.list_namespaced_lease(namespace, label_selector="baton.dev/component=gateway").items],
             timeout=10, what="the gateway Lease deleted")
