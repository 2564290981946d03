"""stdio runtimes across handoffs on the local plane (issue 44, Proof): the operator (and, where
said, the gateway) as real processes; each pod's container is played by ToolFleet's stdio mode
(harness.gateway.StdioBridges): the REAL baton-bridge, with the command the operator put in the
pod, on the pod's kwok-loop IP, its child the test's stdio server (tests/unit/bridge/stdio_child.py,
which records what it received and when); the pod's deletion sends the bridge SIGTERM and waits
for it within the pod's grace, as a kubelet does.

- A handoff waits for a call in flight (the bridge's /baton/drain answers 503 while it runs, the
  operator's drain asks it: proved without the gateway, where nothing else counts the call, and
  with it), then the child gets EOF before any signal.
- A child ignoring EOF is SIGTERMed after eofSeconds and SIGKILLed after termSeconds, within the
  pod's grace.
- Two clients at once, one per protocol era, through the gateway, across a handoff: neither ever
  sees the other's answers, and the handshake client keeps its session."""
from __future__ import annotations

import datetime
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import NEVER_READY, BridgePod, GatewayProcess, Reply, StdioBridges, ToolFleet, call
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")

ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "unit" / "bridge" / "stdio_child.py"
IMAGE = "registry.invalid/baton:stdio-test"  # BATON_IMAGE: never pulled, kwok runs no containers
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="session")
def bridge_binary() -> Path:
    from unit.bridge import conftest as bridge_build  # the unit tests' cached static build

    return bridge_build.build_bridge()


@pytest.fixture
def fleet(cluster: Any, namespace: str, bridge_binary: Path, tmp_path: Path) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port(),
                  stdio=StdioBridges(binary=bridge_binary, work_dir=tmp_path))
    yield f
    f.stop()


def stdio_runtime(*, port: int, gateway: bool, eof: int, term: int, budgets: dict[str, int],
                  child_mode: str = "") -> dict[str, Any]:
    """Runtime `tool` whose container runs the test child behind the bridge on `port`; Ready once
    the bridge says so (NEVER_READY: the fleet removes it, as a readinessProbe would pass)."""
    m = runtime_manifest("tool", loopback=True, pod_annotations={NEVER_READY: "true"},
                         budgets={"connectSeconds": 30, "cleanupSeconds": 20, **budgets})
    [c] = m["spec"]["template"]["spec"]["containers"]
    del c["ports"]
    c["env"] = [{"name": "BATON_TEST_CHILD_MODE", "value": child_mode}]
    m["spec"]["stdio"] = {"command": [sys.executable, str(CHILD)], "port": port, "eofSeconds": eof, "termSeconds": term}
    if gateway:
        m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "mcp"}], "gateway": True}
        m["spec"]["budgets"]["admissionSeconds"] = 60
    return m


def hand_off(rts: Runtimes, n: int) -> None:
    """A change of spec.stdio hands off (its args: the test child ignores them)."""
    rts.patch("tool", {"spec": {"stdio": {"args": [f"--handoff-{n}"]}}})


STATELESS = "2026-07-28"


class Mcp:
    """An MCP client over HTTP at `address`:`port` with Host `host` (the gateway, or a bridge
    directly): of the handshake era (initialize, a session), or with `stateless` of the 2026-07-28
    era (no session; the envelope in every request's _meta and headers)."""

    def __init__(self, address: str, port: int, host: str, *, stateless: bool = False) -> None:
        self.address, self.port, self.host = address, port, host
        self.session = ""
        self.stateless = stateless

    def post(self, doc: dict[str, Any], *, timeout: float = 60) -> Reply:
        headers = {"Accept": ACCEPT, **({"Mcp-Session-Id": self.session} if self.session else {})}
        if self.stateless and "id" in doc:
            params = doc.setdefault("params", {})
            params["_meta"] = {**params.get("_meta", {}), "io.modelcontextprotocol/protocolVersion": STATELESS,
                               "io.modelcontextprotocol/clientCapabilities": {}}
            headers.update({"MCP-Protocol-Version": STATELESS, "Mcp-Method": doc["method"]})
            if doc["method"] == "tools/call":
                headers["Mcp-Name"] = params["name"]
        return call(self.port, self.host, body=json.dumps(doc).encode(), headers=headers, timeout=timeout,
                    address=self.address)

    def initialize(self) -> str:
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        assert r.status == 200, (r.status, r.body)
        self.session = r.headers["mcp-session-id"]
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
        return self.session

    def call_tool(self, request_id: int, tool: str, arguments: dict[str, Any], *, timeout: float = 60) -> Reply:
        return self.post({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}}, timeout=timeout)


def message(r: Reply) -> dict[str, Any]:
    """The JSON-RPC message of an answer (JSON, or the last event of an SSE stream)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[len("data:"):] for line in r.body.decode().splitlines() if line.startswith("data:")]
        doc: dict[str, Any] = json.loads(data[-1])
        return doc
    parsed: dict[str, Any] = json.loads(r.body)
    return parsed


def tool_json(r: Reply) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(message(r)["result"]["content"][0]["text"])
    return doc


def events(bridge: BridgePod) -> list[dict[str, Any]]:
    return bridge.child_events()


def drain_answer(bridge: BridgePod) -> tuple[int, Any]:
    status, body = bridge.get("/baton/drain")
    return status, json.loads(body)


def first(evs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in evs if e["event"] == name)


def serving_bridge(fleet: ToolFleet, generation: int) -> BridgePod:
    def ready() -> BridgePod | None:
        b = fleet.bridge(generation)
        return b if b is not None and b.ready_at is not None else None
    bridge: BridgePod = wait_for(ready, timeout=30, what=f"g{generation}'s bridge ready")
    return bridge


@pytest.mark.parametrize("via", ["pod", "gateway"])
def test_a_handoff_waits_for_the_call_in_flight_then_the_child_gets_eof_before_any_signal(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet, via: str) -> None:
    # pod: the client calls the bridge directly, so only the bridge's /baton/drain (the runtime's
    # default drain probe) can tell the operator about the call. gateway: through the gateway,
    # whose count and the probe both hold the drain, and the client's session is re-bound after.
    operators("op-a", env={"BATON_IMAGE": IMAGE})
    gw = gateways("gw-a") if via == "gateway" else None
    rts.create(stdio_runtime(port=fleet.port, gateway=gw is not None, eof=2, term=2,
                             budgets={"drainSeconds": 30, "terminationGraceSeconds": 8}))
    rts.wait_ready("tool", 1)
    b1 = serving_bridge(fleet, 1)
    client = Mcp("127.0.0.1", gw.port, f"tool.{namespace}") if gw else Mcp(b1.ip, b1.port, f"{b1.ip}:{b1.port}")
    session = client.initialize()
    out: dict[str, Reply] = {}
    slow = threading.Thread(target=lambda: out.__setitem__("slow", client.call_tool(7, "slow", {"seconds": 8})), daemon=True)
    slow.start()
    wait_for(lambda: any(e["event"] == "received" and e["method"] == "tools/call" for e in events(b1)), timeout=10,
             what="the slow call at g1's child")
    busy = drain_answer(b1)
    hand_off(rts, 1)
    wait_for(lambda: (rts.status("tool").get("transition") or {}).get("step") == "Draining", timeout=30,
             what="the handoff draining g1")
    draining_seen = time.monotonic()
    during = drain_answer(b1)
    slow.join(30)
    st2 = rts.wait_ready("tool", 2, timeout=60)
    wait_for(lambda: b1.exited_at is not None, timeout=30, what="g1's bridge exited")
    evs = events(b1)
    kinds = [e["event"] for e in evs]
    answered, eof = first(evs, "slow-answered"), first(evs, "stdin-eof")
    print(f"via {via}: drain probe while the call ran {busy} / {during}; call {out['slow'].status} in "
          f"{out['slow'].seconds:.2f}s; child answered {answered['t'] - draining_seen:+.2f}s after Draining was seen, "
          f"SIGTERM to the bridge {b1.sigterm_at - answered['t']:+.2f}s after the answer, "
          f"EOF {eof['t'] - b1.sigterm_at:+.2f}s after SIGTERM; child events {kinds}; history {st2['history'][-1]}")
    assert busy == (503, {"inflight": 1}), busy
    assert during == (503, {"inflight": 1}), "the bridge counted the call while the operator drained"
    r = out["slow"]
    assert r.status == 200 and message(r)["id"] == 7 and "result" in message(r), (r.status, r.body)
    if gw is not None:
        assert r.generation == 1
    # The handoff waited: Draining was seen while the call ran, the pod was deleted (the bridge's
    # SIGTERM) only after the child answered, and then the child got EOF, and no signal at all.
    assert draining_seen < answered["t"] < b1.sigterm_at < eof["t"]
    assert "sigterm" not in kinds, kinds
    assert b1.proc.returncode == 0 and not b1.killed_at_grace
    msgs = [rec["msg"] for rec in b1.log_records()]
    steps = ["drain: admission stopped (new calls 503)", "drain: no call in flight", "closed the child's stdin (EOF)",
             "the child exited"]
    assert [m for m in msgs if m in steps] == steps, msgs
    assert not any("SIGTERM" in m or "SIGKILL" in m for m in msgs), msgs
    entry = st2["history"][-1]
    assert entry["generation"] == 1 and entry["outcome"] == "Retired", entry
    assert not str(entry.get("message") or "").startswith("not drained"), entry
    if gw is not None:
        # What the client sees at the handoff: its session, re-bound to g2's bridge, answers on.
        b2 = serving_bridge(fleet, 2)
        after = client.call_tool(8, "echo", {"after": True})
        assert after.status == 200 and after.generation == 2 and client.session == session, (after.status, after.body)
        assert tool_json(after)["arguments"] == {"after": True}
        # g2's child saw one initialize: the bridge's own; the gateway's replay was answered by the bridge.
        assert [e["method"] for e in events(b2) if e["event"] == "received"].count("initialize") == 1


def test_a_child_ignoring_eof_is_ended_at_the_grace(operators: Callable[..., OperatorProcess], rts: Runtimes,
                                                    fleet: ToolFleet) -> None:
    eof_seconds, term_seconds, grace = 1, 2, 6
    operators("op-a", env={"BATON_IMAGE": IMAGE})
    rts.create(stdio_runtime(port=fleet.port, gateway=False, eof=eof_seconds, term=term_seconds, child_mode="ignore-eof",
                             budgets={"drainSeconds": 5, "terminationGraceSeconds": grace}))
    rts.wait_ready("tool", 1)
    b1 = serving_bridge(fleet, 1)
    hand_off(rts, 1)
    rts.wait_ready("tool", 2, timeout=60)
    wait_for(lambda: b1.exited_at is not None, timeout=30, what="g1's bridge exited")
    assert b1.sigterm_at is not None and b1.exited_at is not None
    evs = events(b1)
    kinds = [e["event"] for e in evs]
    eof, sigterm = first(evs, "stdin-eof"), first(evs, "sigterm")
    took = b1.exited_at - b1.sigterm_at
    print(f"child events {kinds}; EOF {eof['t'] - b1.sigterm_at:.2f}s after the bridge's SIGTERM, the child's "
          f"SIGTERM {sigterm['t'] - eof['t']:.2f}s after EOF; the bridge exited {b1.proc.returncode} "
          f"{took:.2f}s after its SIGTERM (grace {grace}s); termination log {b1.termination_log.read_text()!r}")
    # EOF first, SIGTERM after eofSeconds, then nothing the child could record: SIGKILL after termSeconds.
    assert kinds[-2:] == ["stdin-eof", "sigterm"], kinds
    assert b1.sigterm_at < eof["t"]
    # eofSeconds is the bridge's wait from closing stdin to its SIGTERM, both in its own log (one
    # clock). The child's own times also hold its latency in reading the EOF (a loaded machine
    # makes that milliseconds), so they are bounded from above only.
    records = b1.log_records()
    closed = next(r for r in records if r["msg"] == "closed the child's stdin (EOF)")
    signalled = next(r for r in records if r["msg"] == "the child did not exit on EOF: sent SIGTERM")
    waited = (datetime.datetime.fromisoformat(signalled["ts"]) - datetime.datetime.fromisoformat(closed["ts"])).total_seconds()
    assert eof_seconds <= waited < eof_seconds + 1.5, waited
    assert 0 < sigterm["t"] - eof["t"] < eof_seconds + 1.5
    assert b1.proc.returncode == 128 + 9, "the bridge exits with its child's status: SIGKILL"
    assert eof_seconds + term_seconds <= took < grace and not b1.killed_at_grace, "ended by the bridge, within the grace"
    msgs = [rec["msg"] for rec in b1.log_records()]
    assert "the child did not exit on EOF: sent SIGTERM" in msgs and "the child did not exit on SIGTERM: sent SIGKILL" in msgs
    assert b1.termination_log.read_text().startswith("exit status 137")
    pid = int(first(evs, "started")["pid"])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), "the child is gone"


def test_two_clients_at_once_never_see_each_others_answers_across_a_handoff(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet) -> None:
    """Through the gateway (spec.service.gateway): two clients on the one child, one per protocol
    era (a handshake session, and a stateless 2026-07-28 client the bridge serves on the child's
    one session), the same request ids, calls at once, and a handoff in the middle (their calls
    held; the session re-bound to g2, the stateless calls simply sent there)."""
    operators("op-a", env={"BATON_IMAGE": IMAGE})
    gw = gateways("gw-a")
    rts.create(stdio_runtime(port=fleet.port, gateway=True, eof=1, term=1,
                             budgets={"drainSeconds": 10, "terminationGraceSeconds": 6}))
    rts.wait_ready("tool", 1)
    serving_bridge(fleet, 1)
    clients = {name: Mcp("127.0.0.1", gw.port, f"tool.{namespace}", stateless=name == "b") for name in ("a", "b")}
    sessions = {"a": clients["a"].initialize(), "b": ""}  # b: no session in its era
    answers: dict[str, list[tuple[int, Reply | Exception]]] = {name: [] for name in clients}
    stop = threading.Event()

    def run(name: str) -> None:
        deadline = time.monotonic() + 120
        for n in range(1, 2001):  # bounded in count and time
            if stop.is_set() or time.monotonic() > deadline:
                return
            try:
                r: Reply | Exception = clients[name].call_tool(n, "echo", {"client": name, "n": n})
            except Exception as exc:  # a failed call is what this test counts
                r = exc
            answers[name].append((n, r))

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in clients]
    for t in threads:
        t.start()

    def by(generation: int) -> bool:
        return all(sum(1 for _, r in got if isinstance(r, Reply) and r.generation == generation) >= 10
                   for got in list(answers.values()))
    try:
        wait_for(lambda: by(1), timeout=30, what="both clients answered by g1")
        hand_off(rts, 1)
        rts.wait_ready("tool", 2, timeout=60)
        wait_for(lambda: by(2), timeout=60, what="both clients answered by g2")
    finally:
        stop.set()
        for t in threads:
            t.join(70)
    child_ids: dict[int, set[Any]] = {1: set(), 2: set()}
    for name, got in answers.items():
        failed = [(n, r if isinstance(r, Exception) else (r.status, r.body)) for n, r in got
                  if not isinstance(r, Reply) or r.status != 200]
        assert not failed, f"client {name}: {failed[:5]}"
        gens = [r.generation or 0 for _, r in got if isinstance(r, Reply)]
        assert gens == sorted(gens) and set(gens) == {1, 2}, f"client {name}: generations {gens}"
        for n, r in got:
            assert isinstance(r, Reply) and r.generation is not None
            assert message(r)["id"] == n, f"client {name} call {n} got the answer to {message(r)['id']}"
            echoed = tool_json(r)
            assert echoed["arguments"] == {"client": name, "n": n}, f"client {name} got {echoed}"
            if clients[name].stateless:  # answered in its era (the bridge's translation)
                assert message(r)["result"]["resultType"] == "complete", message(r)
            child_ids[r.generation].add(echoed["received_id"])
        assert clients[name].session == sessions[name]
    total = sum(len(got) for got in answers.values())
    print(f"{total} calls ({', '.join(f'{k}: {len(v)}' for k, v in answers.items())}), none failed; "
          f"ids the children saw: g1 {len(child_ids[1])}, g2 {len(child_ids[2])}")
    # Both clients used the same ids 1, 2, ...: each child saw a distinct id for every call.
    assert len(child_ids[1]) + len(child_ids[2]) == total
