"""The gateway across handoffs on the local plane (DESIGN.md, "Gateway"): a client loop through
the gateway fails no call while the template changes (calls held during the handoff are answered
by N+1, never by N); past budgets.admissionSeconds a held call gets 503 Transitioning with the
JSON-RPC error; a replica paused past its registration forwards only after re-registering; on
SIGTERM held calls get 503 GatewayShutdown at once while a call in flight finishes."""
from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")


def gw_runtime(name: str, *, port: int, admission: int | None = None, **kw: Any) -> dict[str, Any]:
    """A loopback runtime whose tool listens on `port` (a free one: kwok-loop IPs are shared
    by every test session on the machine)."""
    m = runtime_manifest(name, service=True, loopback=True, **kw)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    if admission is not None:
        m["spec"]["budgets"]["admissionSeconds"] = admission
    return m


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


class ClientLoop:
    """`workers` threads, each calling through the gateway one call after another until stopped
    (bounded: at most `max_calls` calls each and `max_seconds`)."""

    def __init__(self, port: int, host: str, *, workers: int = 3, max_calls: int = 3000, max_seconds: float = 180) -> None:
        self.port, self.host = port, host
        self.replies: list[list[tuple[float, Reply | Exception]]] = [[] for _ in range(workers)]
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self.max_calls = max_calls
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        for n in range(self.max_calls):
            if self._stop.is_set() or time.monotonic() > self._deadline:
                return
            t0 = time.monotonic()
            try:
                r: Reply | Exception = call(self.port, self.host, body=rpc(rid=f"{i}-{n}"), timeout=60)
            except Exception as exc:  # a failed call is what this test counts
                r = exc
            self.replies[i].append((t0, r))
            time.sleep(0.01)

    def stop(self) -> list[tuple[float, Reply | Exception]]:
        self._stop.set()
        for t in self.threads:
            t.join(90)
        return [x for worker in self.replies for x in worker]

    def generations_seen(self) -> set[int]:
        return {r.generation for w in self.replies for _, r in list(w) if isinstance(r, Reply) and r.generation}


@pytest.mark.parametrize("seal", [False, True], ids=["label-flip", "sealed"])
def test_a_client_loop_fails_no_call_across_a_handoff(operators: Callable[..., OperatorProcess],
                                                      gateways: Callable[..., GatewayProcess], rts: Runtimes,
                                                      namespace: str, fleet: ToolFleet, seal: bool) -> None:
    # label-flip: the operator does not see the gateway (its system namespace is another one):
    # admission stops by the serving label alone. sealed: it seals the gateway and counts its calls.
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace} if seal else None)
    gw = gateways("gw-a")
    rts.create(gw_runtime("tool", port=fleet.port, admission=60))
    rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    loop = ClientLoop(gw.port, f"tool.{namespace}")
    try:
        wait_for(lambda: sum(len(w) for w in loop.replies) >= 20, timeout=60, what="calls flowing")
        rts.set_image("tool", "example/tool:2")
        rts.wait_ready("tool", 2, timeout=120)
        wait_for(lambda: fleet.of(2), timeout=30, what="the tool of g2")
        since = sum(len(w) for w in loop.replies)
        wait_for(lambda: sum(len(w) for w in loop.replies) >= since + 20, timeout=60, what="calls after the handoff")
    finally:
        replies = loop.stop()
    failed = [(t, r) for t, r in replies if not isinstance(r, Reply) or r.status != 200]
    held = [r for _, r in replies if isinstance(r, Reply) and r.seconds > 0.5]
    print(f"{len(replies)} calls, {len(failed)} failed; {len(held)} took over 0.5 s (held), longest "
          f"{max(r.seconds for _, r in replies if isinstance(r, Reply)):.2f}s; held_then_forwarded="
          f"{gw.metric('baton_gateway_calls_total', outcome='held_then_forwarded')}")
    assert not failed, f"failed calls: {failed[:5]}"
    for worker in loop.replies:
        gens = [r.generation for _, r in worker if isinstance(r, Reply)]
        assert gens == sorted(gens), "a call was answered by N after one was answered by N+1"
        for _, r in worker:
            assert isinstance(r, Reply) and r.json()["result"]["gen"] == r.generation, "Baton-Generation names the pod that answered"
    assert loop.generations_seen() == {1, 2}
    if seal:
        uid1 = (rts.status("tool").get("history") or [{}])[-1].get("uid")
        assert uid1 and gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["sealed"], "the operator sealed g1 on the gateway"
    held_calls = gw.metric("baton_gateway_calls_total", outcome="held_then_forwarded")
    assert held_calls > 0, "no call was held: the handoff was not exercised"


def test_past_admission_seconds_the_held_call_gets_transitioning(operators: Callable[..., OperatorProcess],
                                                                 gateways: Callable[..., GatewayProcess], rts: Runtimes,
                                                                 namespace: str, fleet: ToolFleet) -> None:
    operators("op-a")
    gw = gateways("gw-a")
    rts.create(gw_runtime("tool", port=fleet.port, admission=3, budgets={"connectSeconds": 90}))
    rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    # N+1 never becomes Ready: the handoff stays in Connecting for connectSeconds.
    rts.patch("tool", {"spec": {"template": {"metadata": {"annotations": {"baton.dev/test-never-ready": "true"}}}}})
    wait_for(lambda: ((rts.status("tool").get("transition") or {}).get("step") == "Connecting"), timeout=60,
             what="the handoff in Connecting")
    r = call(gw.port, f"tool.{namespace}", body=rpc(rid=123))
    print(f"held past admissionSeconds=3: {r.status} {r.headers.get('baton-reason')} after {r.seconds:.2f}s: {r.body.decode()}")
    assert r.status == 503 and r.headers["baton-reason"] == "Transitioning" and int(r.headers["retry-after"]) >= 1
    assert 2.9 <= r.seconds < 10
    doc = r.json()
    assert doc["id"] == 123 and doc["error"]["code"] == -32000
    assert doc["error"]["data"]["reason"] == "Transitioning" and doc["error"]["data"]["runtime"] == f"{namespace}/tool"
    assert gw.metric("baton_gateway_calls_total", outcome="refused", reason="Transitioning") == 1


def test_a_call_held_while_n_plus_1_connects_is_answered_by_it(operators: Callable[..., OperatorProcess],
                                                               gateways: Callable[..., GatewayProcess], rts: Runtimes,
                                                               namespace: str, fleet: ToolFleet) -> None:
    """N+1's pod exists (created serving=false) but is not Ready when a call arrives: the call is
    held and forwarded to N+1 once it serves. Found by make bench-gateway: such a call excluded
    N+1 for good (serving=false read as retiring) and waited out admissionSeconds."""
    operators("op-a")
    gw = gateways("gw-a")
    rts.create(gw_runtime("tool", port=fleet.port, admission=40, budgets={"connectSeconds": 120}))
    rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    rts.patch("tool", {"spec": {"template": {"metadata": {"annotations": {"baton.dev/test-never-ready": "true"}}}}})
    wait_for(lambda: ((rts.status("tool").get("transition") or {}).get("step") == "Connecting"), timeout=60,
             what="the handoff in Connecting")
    new = wait_for(lambda: next((p for p in rts.pods("tool") if (p.metadata.labels or {}).get("baton.dev/generation") == "2"
                                 and p.status and p.status.pod_ip), None), timeout=60, what="g2's pod with an IP")
    assert (new.metadata.labels or {}).get("baton.dev/serving") == "false"
    replies: list[Reply | Exception] = []

    def one() -> None:
        try:
            replies.append(call(gw.port, f"tool.{namespace}", body=rpc(rid=7), timeout=60))
        except Exception as exc:  # recorded, asserted below
            replies.append(exc)
    t = threading.Thread(target=one, daemon=True)
    t.start()
    wait_for(lambda: gw.metric("baton_gateway_held") >= 1, timeout=30, what="the call held")
    # g2 turns Ready (kwok's pod-ready stage once the annotation is gone): Baton promotes it.
    rts.core.patch_namespaced_pod(new.metadata.name, namespace,
                                  {"metadata": {"annotations": {"baton.dev/test-never-ready": None}}})
    rts.wait_ready("tool", 2, timeout=90)
    t.join(70)
    assert replies, "the held call did not return"
    r = replies[0]
    print(f"held while g2 connected: {r if isinstance(r, Exception) else (r.status, r.generation, round(r.seconds, 2))}")
    assert isinstance(r, Reply) and r.status == 200 and r.generation == 2, r
    assert r.seconds < 35, "answered once g2 served, not at admissionSeconds"


def test_sigterm_answers_held_calls_and_finishes_the_call_in_flight(operators: Callable[..., OperatorProcess],
                                                                    gateways: Callable[..., GatewayProcess], rts: Runtimes,
                                                                    namespace: str, fleet: ToolFleet) -> None:
    operators("op-a")
    gw = gateways("gw-a")
    rts.create(gw_runtime("tool", port=fleet.port, admission=60))
    st = rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    out: dict[str, Reply] = {}
    slow = threading.Thread(target=lambda: out.__setitem__("slow", call(gw.port, host, body=rpc("slow", seconds=3))))
    slow.start()
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={st['current']['uid']}")[1]["inflight"] == 1, timeout=10,
             what="the slow call in flight")
    # Seal the pod by hand so that the next call is held (no transition: it would wait admissionSeconds).
    gw.admin("POST", "/v1/seal", {"namespace": namespace, "runtime": "tool", "uid": st["current"]["uid"]})
    ended: dict[str, float] = {}

    def held_call() -> None:
        out["held"] = call(gw.port, host, body=rpc(rid=5))
        ended["held"] = time.monotonic()
    held = threading.Thread(target=held_call)
    held.start()
    wait_for(lambda: gw.metric("baton_gateway_held") == 1, timeout=10, what="a call held")
    t0 = time.monotonic()
    gw.signal(signal.SIGTERM)
    held.join(30)
    slow.join(30)
    print(f"held: {out['held'].status} {out['held'].headers.get('baton-reason')} {ended['held'] - t0:.2f}s after SIGTERM; "
          f"slow: {out['slow'].status} {out['slow'].seconds:.2f}s")
    assert ended["held"] - t0 < 2.5, "held calls are answered at once, not after the grace"
    assert out["held"].status == 503 and out["held"].headers["baton-reason"] == "GatewayShutdown"
    assert out["held"].json()["id"] == 5 and "retry-after" in out["held"].headers
    assert out["slow"].status == 200 and out["slow"].generation == 1, "the call in flight finished"
    assert gw.wait_exit(30) == 0


def test_a_replica_paused_past_its_registration_reregisters_before_forwarding(
        operators: Callable[..., OperatorProcess], gateways: Callable[..., GatewayProcess], rts: Runtimes,
        namespace: str, fleet: ToolFleet) -> None:
    operators("op-a")
    gw = gateways("gw-a")  # Lease 6 s: the margin is 1.2 s
    rts.create(gw_runtime("tool", port=fleet.port, admission=60))
    rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    assert call(gw.port, f"tool.{namespace}", body=rpc()).status == 200
    gw.signal(signal.SIGSTOP)
    try:
        time.sleep(8)
    finally:
        gw.signal(signal.SIGCONT)
    r = call(gw.port, f"tool.{namespace}", body=rpc(rid=2))
    assert r.status == 200 and r.generation == 1
    log = gw.log_text()
    assert "older than its margin" in log, log[-2000:]
    # Forwarding resumed only after the Lease was written again and the views listed again.
    assert log.count("views listed: forwarding") >= 2, log[-2000:]
