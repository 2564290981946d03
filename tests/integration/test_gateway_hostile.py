"""The gateway's bounds against hostile or careless clients on the local plane (issue 41, the
"Proof"; ../shared/notes/gateway-review.md items 1-3): operator and gateway as real processes,
a real API server, each generation's tool a ToolServer that records every request it gets.

- The per-runtime hold cap is exact (12 calls into a cap of 2: 2 held, 10 refused Overloaded at
  once), and the held gauge returns to 0, never below.
- A held call whose client left reaches no tool (counted `cancelled`); a forwarded one is cut
  upstream, so it holds no handoff.
- A slow body counts against admissionSeconds.
- Held calls are bounded in all (BATON_GATEWAY_MAX_HELD_TOTAL) and connections per client
  address (BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT), while other addresses are served.
- Blank lines before a request head do not escape BATON_GATEWAY_HEADER_SECONDS.

A runtime "whose calls are held": its serving pod turned not Ready (the kwok stage pod-unready,
by the annotation baton.dev/test-never-ready; a status patch alone would be undone at once by
the pod-ready stage), so the runtime is Ready=False PodNotReady with no transition and the
gateway holds its calls. Every socket here has a timeout and is closed in a finally; clients
bind loopback source addresses (127.0.0.x) only.
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from dev import ports, wait
from harness import gateway, kwok, runtimes
from harness import operator as operator_harness

pytestmark = pytest.mark.usefixtures("kwok_nodes")


def gw_runtime(name: str, *, port: int, admission: int, budgets: dict[str, Any] | None = None) -> dict[str, Any]:
    """A loopback runtime behind the gateway whose tool listens on `port`."""
    m = runtimes.runtime_manifest(name, service=True, loopback=True, budgets=budgets)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    m["spec"]["budgets"]["admissionSeconds"] = admission
    return m


@pytest.fixture
def fleets(cluster: Any, namespace: str) -> Iterator[Callable[[str], gateway.ToolFleet]]:
    started: list[gateway.ToolFleet] = []

    def start(runtime: str) -> gateway.ToolFleet:
        fleet = gateway.ToolFleet(cluster.api_client, namespace, runtime, port=ports.free_port())
        started.append(fleet)
        return fleet

    yield start
    for f in started:
        f.stop()


def tool_of(fleet: gateway.ToolFleet, generation: int) -> gateway.ToolServer:
    """The tool of `generation`, once it listens."""
    tool = wait.wait_for(lambda: fleet.of(generation), timeout=30,
                         what=f"the tool of {fleet.runtime} g{generation} listening")
    assert tool is not None
    return tool


class Sockets:
    """Raw client connections to the gateway, each closed by `close_all` (a test's finally)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.open: list[socket.socket] = []

    def connect(self, *, source: str = "127.0.0.1") -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10,
                                     source_address=(kwok.assert_loopback(source), 0))
        self.open.append(s)
        return s

    def post(self, host: str, body: bytes, *, source: str = "127.0.0.1", length: int | None = None) -> socket.socket:
        """A connection that sent one POST head and `body` (of `length` bytes declared)."""
        s = self.connect(source=source)
        head = (f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode()
        s.sendall(head + body)
        return s

    def close_all(self) -> None:
        for s in self.open:
            s.close()
        self.open.clear()


def answer(s: socket.socket, within: float) -> bytes | None:
    """The response head (and what came with it) if one arrives within `within` seconds; None
    if nothing came; b"" if the gateway closed the connection."""
    out = b""
    deadline = time.monotonic() + within
    try:
        while b"\r\n\r\n" not in out and len(out) < 65536:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = s.recv(4096)
            if not chunk:
                return out
            out += chunk
    except socket.timeout:
        return out or None
    return out


def status_of(reply: bytes) -> tuple[str, str | None]:
    """(the status code, Baton-Reason) of a raw response head."""
    lines = reply.split(b"\r\n")
    code = lines[0].split(b" ")[1].decode() if len(lines[0].split(b" ")) > 1 else ""
    reason = next((ln.split(b":", 1)[1].strip().decode() for ln in lines[1:]
                   if ln.lower().startswith(b"baton-reason:")), None)
    return code, reason


def first_line(reply: bytes | None) -> bytes:
    return (reply or b"").split(b"\r\n", 1)[0]


def closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the gateway closes `s` within `seconds` (what it still sends is read and dropped)."""
    deadline = time.monotonic() + seconds
    for _ in range(1000):  # bounded: each read returns data, EOF, or times out by the deadline
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            return False
        except OSError:  # reset: closed as well
            return True
    return False


def make_held(rts: runtimes.Runtimes, name: str) -> None:
    """Turn the serving pod of `name` not Ready (kwok's pod-unready stage): its calls are held."""
    pod = rts.gen_pod(name, 1)
    assert pod is not None, f"no pod of generation 1 for {name}"
    rts.core.patch_namespaced_pod(pod.metadata.name, rts.ns, {"metadata": {"annotations": {kwok.NEVER_READY: "true"}}})
    wait.wait_for(lambda: (rts.condition(name, "Ready") or {}).get("reason") == "PodNotReady", timeout=60,
                  what=f"{name} Ready=False PodNotReady")


def until_held(gw: gateway.GatewayProcess, host: str, *, admission: int) -> None:
    """Wait until the gateway's own view holds calls for `host`: a probe call is held (no answer,
    the held gauge counts it), then closed, and so released: at once here (the gateway cancels
    it); within `admission` by a gateway that does not, so that the old gateway shows the defect
    each test is about rather than this one."""
    def probe() -> bool:
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        try:
            s.sendall(f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\r\nhi".encode())
            return answer(s, 1.0) is None and gw.metric("baton_gateway_held") >= 1
        finally:
            s.close()
    wait.wait_for(probe, timeout=30, what=f"calls for {host} held by the gateway")
    wait.wait_for(lambda: gw.metric("baton_gateway_held") == 0, timeout=admission + 10, what="the probe call released")


def rpc_ids(tool: gateway.ToolServer) -> list[Any]:
    """The JSON-RPC ids of every request the tool received."""
    with tool.lock:
        bodies = [r["body"] for r in tool.requests]
    out = []
    for body in bodies:
        try:
            msg = json.loads(body)
        except ValueError:
            continue
        if isinstance(msg, dict):
            out.append(msg.get("id"))
    return out


def call_from(source: str, port: int, host: str, *, rid: str) -> gateway.Reply:
    """One POST through the gateway from source address `source` (loopback)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(kwok.assert_loopback(source), 0))
    t0 = time.monotonic()
    try:
        conn.request("POST", "/mcp", body=gateway.rpc(rid=rid), headers={"Host": host, "Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return gateway.Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data, time.monotonic() - t0)
    finally:
        conn.close()


def test_twelve_calls_into_a_cap_of_two_hold_exactly_two(
        operators: Callable[..., operator_harness.OperatorProcess], gateways: Callable[..., gateway.GatewayProcess],
        rts: runtimes.Runtimes, namespace: str, fleets: Callable[[str], gateway.ToolFleet]) -> None:
    """Review item 1: an Overloaded refusal gave back a hold it never took: every second call
    was held past the cap, and the held gauge ended negative."""
    admission = 20
    operators("op-a")
    gw = gateways("gw-a", env={"BATON_GATEWAY_MAX_HELD": "2"})
    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port, admission=admission))
    rts.wait_ready("tool", 1)
    tool = tool_of(fleet, 1)
    host = f"tool.{namespace}"
    make_held(rts, "tool")
    until_held(gw, host, admission=admission)
    before = tool.count()
    conns = Sockets(gw.port)
    try:
        answers: list[bytes | None] = []
        sent_at = time.monotonic()
        for _ in range(12):
            s = conns.post(host, b"hi")
            # A refusal comes at once; a held call gets nothing (for admissionSeconds).
            answers.append(answer(s, 2.0))
        sent_in = time.monotonic() - sent_at
        held_now = gw.metric("baton_gateway_held")
        shape = ["held" if a is None else "/".join(str(x) for x in status_of(a)) for a in answers]
        print(f"12 calls into a cap of 2 (sent in {sent_in:.1f}s): {shape}; baton_gateway_held={held_now}")
        assert sent_in < admission - 5, "the calls were not all sent while the first were held"
        assert shape == ["held", "held"] + ["503/Overloaded"] * 10, shape
        assert held_now == 2
        # The held calls end (past admissionSeconds, 503 Transitioning): the gauge is 0, not below.
        for s in conns.open[:2]:
            done = answer(s, admission + 20)
            assert done is not None and status_of(done) == ("503", "Transitioning"), done
        wait.wait_for(lambda: gw.metric("baton_gateway_held") == 0, timeout=10, what="baton_gateway_held back to 0")
        wait.stays(lambda: gw.metric("baton_gateway_held") == 0, duration=1.0, what="baton_gateway_held at 0")
        assert gw.metric("baton_gateway_calls_total", outcome="refused", reason="Overloaded") == 10
    finally:
        conns.close_all()
    assert tool.count() == before, "a call reached a pod that was not Ready"


def test_a_held_call_whose_client_left_reaches_no_tool(
        operators: Callable[..., operator_harness.OperatorProcess], gateways: Callable[..., gateway.GatewayProcess],
        rts: runtimes.Runtimes, namespace: str, fleets: Callable[[str], gateway.ToolFleet]) -> None:
    """Review item 3: a held call whose client had closed its socket was forwarded to N+1 once
    it served: the tool ran a call nobody waited for."""
    gw = gateways("gw-a")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})  # sees the gateway: seals it, reads its counts
    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port, admission=60, budgets={"drainSeconds": 60}))
    st = rts.wait_ready("tool", 1)
    uid1 = st["current"]["uid"]
    g1 = tool_of(fleet, 1)
    host = f"tool.{namespace}"
    slow: dict[str, gateway.Reply] = {}
    slow_call = threading.Thread(target=lambda: slow.__setitem__(
        "reply", gateway.call(gw.port, host, body=gateway.rpc("slow", rid="slow-1", seconds=10), timeout=60)), daemon=True)
    slow_call.start()
    conns = Sockets(gw.port)
    try:
        wait.wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["inflight"] == 1, timeout=10,
                      what="the slow call in flight on g1")
        rts.set_image("tool", "example/tool:2")
        wait.wait_for(lambda: (rts.status("tool").get("transition") or {}).get("step") == "Draining", timeout=30,
                      what="the handoff in Draining")
        cancelled = gw.metric("baton_gateway_calls_total", outcome="cancelled")
        ghost = conns.post(host, gateway.rpc("send_email", rid="ghost-1"))
        wait.wait_for(lambda: gw.metric("baton_gateway_held") == 1, timeout=10, what="the ghost call held")
        time.sleep(1.0)
        assert answer(ghost, 0.1) is None, "the ghost call was answered while the handoff drained"
        ghost.close()
        # What the tools saw first (the defect's effect), then the gateway's own account of it.
        slow_call.join(60)
        rts.wait_ready("tool", 2, timeout=90)
        g2 = tool_of(fleet, 2)
        r = gateway.call(gw.port, host, body=gateway.rpc(rid="after-1"), timeout=30)
        print(f"slow on g1: {slow['reply'].status} g{slow['reply'].generation}; after the handoff: {r.status} "
              f"g{r.generation}; g1 got {rpc_ids(g1)}, g2 got {rpc_ids(g2)}")
        assert slow["reply"].status == 200 and slow["reply"].generation == 1
        assert r.status == 200 and r.generation == 2 and r.json()["id"] == "after-1"
        assert "after-1" in rpc_ids(g2)
        assert "ghost-1" not in rpc_ids(g2), "the call whose client left was run by g2"
        assert "ghost-1" not in rpc_ids(g1), "the held call reached g1"
        assert gw.metric("baton_gateway_calls_total", outcome="cancelled") == cancelled + 1, "the ghost counted cancelled"
        assert gw.metric("baton_gateway_held") == 0
    finally:
        conns.close_all()
        slow_call.join(60)


def test_a_forwarded_call_whose_client_left_is_cut_and_holds_no_handoff(
        operators: Callable[..., operator_harness.OperatorProcess], gateways: Callable[..., gateway.GatewayProcess],
        rts: runtimes.Runtimes, namespace: str, fleets: Callable[[str], gateway.ToolFleet]) -> None:
    slow_seconds = 30  # ToolServer's longest
    gw = gateways("gw-a")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port, admission=60, budgets={"drainSeconds": 120}))
    st = rts.wait_ready("tool", 1)
    uid1 = st["current"]["uid"]
    g1 = tool_of(fleet, 1)
    host = f"tool.{namespace}"
    conns = Sockets(gw.port)
    try:
        s = conns.post(host, gateway.rpc("slow", rid="left-1", seconds=slow_seconds))
        sent_at = time.monotonic()
        wait.wait_for(lambda: "left-1" in rpc_ids(g1), timeout=10, what="g1 received the slow call")
        assert gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["inflight"] == 1
        assert gw.metric("baton_gateway_inflight") == 1
        time.sleep(1.0)
        s.close()
        closed_at = time.monotonic()
        wait.wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["inflight"] == 0, timeout=8,
                      what="the gateway's in-flight count for g1 back to 0 (the call cut upstream)")
        cut_after = time.monotonic() - closed_at
        assert gw.metric("baton_gateway_inflight") == 0
        # A handoff started now is not held by the call nobody waits for.
        changed_at = time.monotonic()
        rts.set_image("tool", "example/tool:2")
        rts.wait_ready("tool", 2, timeout=90)
        ready_at = time.monotonic()
        print(f"client left 1 s into a {slow_seconds}s call: in flight 0 after {cut_after:.2f}s; the handoff took "
              f"{ready_at - changed_at:.1f}s, ending {ready_at - sent_at:.1f}s after the call was sent")
        assert ready_at - sent_at < slow_seconds - 2, "the handoff waited for the call whose client had left"
        history = rts.status("tool").get("history") or []
        assert history and history[-1]["generation"] == 1 and history[-1]["outcome"] == "Retired", history
        # Counted as cut (it had been sent), not as a held call cancelled before it was sent.
        assert gw.metric("baton_gateway_calls_cut_total") == 1
        assert gw.metric("baton_gateway_calls_total", outcome="cancelled") == 0
    finally:
        conns.close_all()


def test_a_slow_body_counts_against_admission_seconds(
        operators: Callable[..., operator_harness.OperatorProcess], gateways: Callable[..., gateway.GatewayProcess],
        rts: runtimes.Runtimes, namespace: str, fleets: Callable[[str], gateway.ToolFleet]) -> None:
    """Review item 2: a held call's body dribbled in kept its held place far past admissionSeconds
    (an idle timer per chunk, no total deadline)."""
    admission = 2
    operators("op-a")
    gw = gateways("gw-a")
    fleet = fleets("tool")
    rts.create(gw_runtime("tool", port=fleet.port, admission=admission))
    rts.wait_ready("tool", 1)
    tool = tool_of(fleet, 1)
    host = f"tool.{namespace}"
    make_held(rts, "tool")
    until_held(gw, host, admission=admission)
    before = tool.count()  # a probe may have been forwarded before the gateway saw the pod not Ready
    conns = Sockets(gw.port)
    try:
        declared, piece = 200_000, b"x" * 1024
        t0 = time.monotonic()
        s = conns.post(host, piece, length=declared)
        sent = len(piece)
        got: bytes | None = None
        while sent < declared:  # at most ~200 pieces, 0.25 s apart (~50 s): bounded
            got = answer(s, 0.25)
            if got is not None:
                break
            try:
                s.sendall(piece)
            except OSError:
                got = answer(s, 1.0) or b""
                break
            sent += len(piece)
        took = time.monotonic() - t0
        print(f"a body dribbled 1 KB / 0.25 s, admissionSeconds={admission}: answered after {took:.2f}s "
              f"({sent} of {declared} bytes sent): {first_line(got)!r}")
        assert got, "no answer before the whole body was sent"
        assert status_of(got) == ("503", "Transitioning"), got
        assert took < admission + 3, took
        wait.wait_for(lambda: gw.metric("baton_gateway_held") == 0, timeout=10, what="the held place given back")
        assert gw.metric("baton_gateway_buffered_bytes") == 0
    finally:
        conns.close_all()
    assert tool.count() == before, "the held call reached a pod that was not Ready"


def test_held_calls_in_all_and_connections_per_client_are_bounded(
        operators: Callable[..., operator_harness.OperatorProcess], gateways: Callable[..., gateway.GatewayProcess],
        rts: runtimes.Runtimes, namespace: str, fleets: Callable[[str], gateway.ToolFleet]) -> None:
    operators("op-a")
    gw = gateways("gw-a", env={"BATON_GATEWAY_MAX_HELD_TOTAL": "3", "BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT": "2",
                               "BATON_GATEWAY_HEADER_SECONDS": "60"})
    tools: dict[str, gateway.ToolServer] = {}
    for name in ("tool", "other", "live"):
        fleet = fleets(name)
        rts.create(gw_runtime(name, port=fleet.port, admission=60))
        rts.wait_ready(name, 1)
        tools[name] = tool_of(fleet, 1)
    for name in ("tool", "other"):
        make_held(rts, name)
        until_held(gw, f"{name}.{namespace}", admission=60)
    before = {name: tool.count() for name, tool in tools.items()}  # probes forwarded before the pod was not Ready
    conns = Sockets(gw.port)
    try:
        # Held calls in all: 3 over two runtimes are held, the 4th is refused (each from its own
        # address, so the per-address bound plays no part here).
        answers = []
        for name, source in (("tool", "127.0.0.3"), ("tool", "127.0.0.4"), ("other", "127.0.0.5"), ("other", "127.0.0.6")):
            s = conns.post(f"{name}.{namespace}", gateway.rpc(rid=f"held-{source}"), source=source)
            answers.append(answer(s, 2.0))
        print(f"4 held calls into a total of 3: {[None if a is None else status_of(a) for a in answers]}")
        assert answers[:3] == [None, None, None], answers
        last = answers[3]
        assert last is not None and status_of(last) == ("503", "Overloaded"), last
        assert gw.metric("baton_gateway_held") == 3
        assert gw.metric("baton_gateway_calls_total", outcome="refused", reason="Overloaded") == 1
        # Connections per client address: the third from 127.0.0.1 is answered 503 at once and
        # closed; another address is still served.
        wait.wait_for(lambda: gw.metric("baton_gateway_connections") == 4, timeout=10,
                      what="only the 4 held-call connections open (the probes gone)")
        first, second = conns.connect(), conns.connect()
        wait.wait_for(lambda: gw.metric("baton_gateway_connections") == 6, timeout=10, what="2 more connections open")
        third = conns.connect()
        refused = answer(third, 5.0)
        print(f"third connection from 127.0.0.1: {first_line(refused)!r}")
        assert refused is not None and refused.startswith(b"HTTP/1.1 503") and status_of(refused)[1] == "Overloaded", refused
        assert closed_within(third, 5.0), "the refused connection was not closed"
        assert answer(first, 0.2) is None and answer(second, 0.2) is None, "the accepted connections were touched"
        served = call_from("127.0.0.2", gw.port, f"live.{namespace}", rid="other-address")
        assert served.status == 200 and served.generation == 1 and served.json()["id"] == "other-address", served
        assert gw.metric("baton_gateway_connections_refused_total", bound="per_client") >= 1
    finally:
        conns.close_all()
    assert all(tools[n].count() == before[n] for n in ("tool", "other")), "a held call reached a pod that was not Ready"
    wait.wait_for(lambda: gw.metric("baton_gateway_held") == 0, timeout=10, what="the held places given back")


def test_blank_lines_before_the_head_do_not_escape_the_header_deadline(
        gateways: Callable[..., gateway.GatewayProcess]) -> None:
    """Review item 2: llhttp skips blank lines before a request line, and the deadline took them
    for the end of a head: the connection then lived for aiohttp's keep-alive (75 s)."""
    gw = gateways("gw-a", env={"BATON_GATEWAY_HEADER_SECONDS": "1"})
    head = b"POST /mcp HTTP/1.1\r\nHost: nothing.here\r\nX-Pad: aaaaaaaaaaaaaaaa\r\n"  # never ended
    closed_after: float | None = None
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    try:
        t0 = time.monotonic()
        s.sendall(b"\r\n\r\n")
        s.settimeout(0.2)
        for i in range(len(head)):  # ~12 s of dribble at most
            try:
                s.sendall(head[i:i + 1])
                if s.recv(4096) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except socket.timeout:
                continue
            except OSError:
                closed_after = time.monotonic() - t0
                break
        if closed_after is None:
            s.settimeout(10)
            try:
                if s.recv(4096) == b"":
                    closed_after = time.monotonic() - t0
            except socket.timeout:
                pass  # still open: left None
            except OSError:
                closed_after = time.monotonic() - t0
    finally:
        s.close()
    print(f"a head after blank lines, dribbled: closed after {closed_after}s (header bound 1 s)")
    assert closed_after is not None, "the connection outlived the dribble: the header deadline did not apply"
    assert closed_after < 3.5, closed_after
    assert gw.metric("baton_gateway_header_timeouts_total") >= 1
