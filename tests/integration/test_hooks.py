"""Hooks around a handoff (issue 45) on the local plane: the operator as a real process POSTs to
the generation's pod IP (a kwok-loop 127.x address), where a relay hands the connection to the
external store dev/fencedstore.py (on 127.0.0.1) that plays the system outside the cluster.

- preRetire answering 500 (Fail) holds the handoff with CleanupFailed=True HookFailed, N+1 not
  created, until the retry verb; then N+1 starts, the run recorded with its attempts;
- a hook that hangs is ended at its timeoutSeconds (held; released by a force recovery);
- Ignore goes on and records the failure; a gate is released by another client's annotation;
- the operator SIGKILLed during a hook: the next holder calls it again for the same generation
  with a higher token, N+1 starts only after that call succeeded, and the store refuses a write
  carrying the older token;
- postReady failing keeps N+1 out of serving (Degraded HookFailed), and a call held at the
  gateway is refused with Baton-Reason HookFailed at admissionSeconds; the retry verb serves it.
Runtimes of one test run side by side under one operator: the file's wall time is its slowest.
"""
from __future__ import annotations

import json
import select
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Iterator

import pytest

from dev import fencedstore
from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, call, rpc
from harness.kwok import assert_loopback
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

pytestmark = pytest.mark.usefixtures("kwok_nodes")

Start = Callable[..., OperatorProcess]
NEVER_READY = "baton.dev/test-never-ready"
RETRY = "baton.dev/retry-hook"
FORCE = "baton.dev/force-recovery"
GATE = "example.com/released"


class Relay:
    """A pod's hook port: accepts on (pod IP, port) and pipes each connection to the store on
    127.0.0.1. Bounded: loopback only, at most `max_connections`, each at most `max_seconds`.
    `arrivals`: time.monotonic() of each connection accepted."""

    def __init__(self, listen: tuple[str, int], to: tuple[str, int], *, max_connections: int = 32,
                 max_seconds: float = 120.0) -> None:
        self.listen, self.to = (assert_loopback(listen[0]), listen[1]), (assert_loopback(to[0]), to[1])
        self.max_connections, self.max_seconds = max_connections, max_seconds
        self.arrivals: list[float] = []
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(self.listen)
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set() and len(self.arrivals) < self.max_connections:
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            self.arrivals.append(time.monotonic())
            t = threading.Thread(target=self._pipe, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _pipe(self, conn: socket.socket) -> None:
        end = time.monotonic() + self.max_seconds
        try:
            up = socket.create_connection(self.to, timeout=5)
        except OSError:
            conn.close()
            return
        pair = {conn: up, up: conn}
        try:
            while not self._stop.is_set() and time.monotonic() < end:
                ready, _, _ = select.select(list(pair), [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            return
        finally:
            conn.close()
            up.close()

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        for t in self._threads:
            t.join(timeout=5)


@pytest.fixture
def store() -> Iterator[fencedstore.FencedStore]:
    with fencedstore.FencedStore(hang_seconds=60) as s:
        yield s


@pytest.fixture
def relays() -> Iterator[list[Relay]]:
    started: list[Relay] = []
    yield started
    for r in started:
        r.stop()


def hooked(name: str, *, port: int, pre: dict[str, Any] | None = None, post: dict[str, Any] | None = None,
           never_ready: bool = False, **budgets: int) -> dict[str, Any]:
    """A loopback runtime with hooks; each hook's httpPost (when it has one) goes to `port` at
    the path `/<name>`."""
    m = runtime_manifest(name, loopback=True, budgets={"cleanupSeconds": 30, "connectSeconds": 30, **budgets},
                         pod_annotations={NEVER_READY: "true"} if never_ready else None)
    hooks: dict[str, Any] = {}
    for key, hook in (("preRetire", pre), ("postReady", post)):
        if hook is not None:
            call_it = hook.pop("call", True)
            hooks[key] = {**({"httpPost": {"path": f"/{name}", "port": port}} if call_it else {}), **hook}
    m["spec"]["hooks"] = hooks
    return m


def pod_ip(rts: Runtimes, name: str) -> str:
    def ip() -> str | None:
        pod = rts.pod(name)
        return pod.status.pod_ip if pod is not None and pod.status is not None else None
    got = wait_for(ip, timeout=30, what=f"{name}'s pod IP")
    return assert_loopback(got)


def relay(relays: list[Relay], store: fencedstore.FencedStore, ip: str, port: int) -> Relay:
    r = Relay((ip, port), ("127.0.0.1", store.port))
    relays.append(r)
    return r


def handoff(rts: Runtimes, name: str) -> None:
    rts.patch(name, {"spec": {"template": {"metadata": {"annotations": {"example.com/rev": "2"}}}}})


def held_by_hook(rts: Runtimes, name: str, *, timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        c = rts.condition(name, "CleanupFailed")
        return c if c is not None and c["status"] == "True" and c["reason"] == "HookFailed" else None
    return wait_for(check, timeout=timeout, what=f"{name}: CleanupFailed=True HookFailed")


def fence_of(r: fencedstore.Request) -> tuple[str | None, int, int, str | None]:
    return (r.header("Baton-Runtime"), int(r.header("Baton-Generation") or 0), int(r.header("Baton-Fencing-Token") or 0),
            r.header("Baton-Hook"))


def test_pre_retire_hooks_hold_time_out_go_on_and_wait_for_a_gate(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, store: fencedstore.FencedStore, relays: list[Relay],
        namespace: str) -> None:
    port = free_port()
    rts.create(hooked("fail", port=port, pre={}))
    rts.create(hooked("hang", port=port, pre={"timeoutSeconds": 3}))
    rts.create(hooked("ignore", port=port, pre={"failurePolicy": "Ignore"}))
    rts.create(hooked("gate", port=port, pre={"call": False, "gate": {"annotation": GATE, "timeoutSeconds": 300}}))
    op = operators("op-a")
    names = ("fail", "hang", "ignore", "gate")
    for name in names:
        rts.wait_ready(name, 1)
    for name in ("fail", "hang", "ignore"):
        relay(relays, store, pod_ip(rts, name), port)
    store.answer(500, path="/fail")
    store.hang(path="/hang")
    store.answer(500, path="/ignore")
    for name in names:
        handoff(rts, name)

    # Ignore: the failure is recorded and the retire goes on.
    st = rts.wait_ready("ignore", 2, timeout=60)
    [ignored] = st["history"][0]["hooks"]
    assert ignored["hook"] == "preRetire" and ignored["outcome"] == "Ignored", ignored
    assert ignored["message"].startswith("answered 500"), ignored
    assert rts.events_posted("ignore", "HookIgnored")

    # Fail, answered 500: held like a cleanup failure, the old pod kept, no N+1.
    cond = held_by_hook(rts, "fail")
    assert "answered 500" in cond["message"] and f'{RETRY}="1"' in cond["message"], cond
    st = rts.status("fail")
    assert st["lastCleanupFailure"]["reason"] == "HookFailed" and st["lastCleanupFailure"]["generation"] == 1, st
    assert st["transition"]["step"] == "CleanupFailed" and st["transition"]["hook"]["outcome"] == "Failed", st
    [event] = rts.events_posted("fail", "HookFailed")
    assert event.type == "Warning" and "answered 500" in event.message, event.message
    assert op.metric("baton_hook_runs_total", hook="preRetire", outcome="Failed") >= 1

    # Hanging: ended at timeoutSeconds (3), held the same way.
    cond = held_by_hook(rts, "hang")
    assert "no answer within timeoutSeconds=3" in cond["message"], cond
    [hung] = store.requests(path="/hang")
    assert hung.status is None, "the hook was answered: nothing hung"

    # The gate waits for another client: a value naming another generation does not release it.
    rts.annotate("gate", GATE, "2")
    assert rts.status("gate")["transition"]["step"] == "PreRetireHook"
    for name in ("fail", "hang", "gate"):
        assert pod_watch.added_gen(name, 2) == [], f"{name}: N+1 created while its preRetire hook held the retire"
        assert rts.gen_pod(name, 1) is not None

    # Kept across a restart: another operator finds both held, from status alone.
    op.signal(signal.SIGKILL)
    op.wait_exit(10)
    operators("op-b")
    until = time.monotonic() + 3  # op-b's first passes over every runtime: nothing released
    while time.monotonic() < until:
        for name in ("fail", "hang"):
            held_by_hook(rts, name, timeout=5)
            assert rts.status(name)["transition"]["step"] == "CleanupFailed"
        time.sleep(0.5)

    # Released: the retry verb (the store now judges the fence and accepts), the force recovery,
    # the gate's annotation set to the retiring generation by another client.
    store.heal(path="/fail")
    store.heal(path="/hang")
    rts.annotate("fail", RETRY, "1")
    rts.annotate("hang", FORCE, "1")
    rts.annotate("gate", GATE, "1")
    st = rts.wait_ready("fail", 2, timeout=60)
    [done] = st["history"][0]["hooks"]
    assert done["outcome"] == "Succeeded" and done["attempts"] == 2, done
    assert RETRY not in (rts.get("fail")["metadata"].get("annotations") or {})
    assert rts.condition("fail", "CleanupFailed")["status"] == "False"
    ok = [r for r in store.requests(path="/fail") if r.status == 200]
    assert len(ok) == 1, store.requests(path="/fail")
    runtime, generation, token, hook = fence_of(ok[0])
    assert (runtime, generation, hook) == (f"{namespace}/fail", 1, "preRetire")
    assert 0 < token <= rts.status("fail")["fencingToken"]
    assert ok[0].json() == {"runtime": "fail", "namespace": namespace, "generation": 1, "fencingToken": token,
                            "hook": "preRetire", "pod": "fail"}

    st = rts.wait_ready("hang", 2, timeout=60)
    [forced] = st["history"][0]["hooks"]
    assert forced["outcome"] == "ForceRecovered", forced
    st = rts.wait_ready("gate", 2, timeout=60)
    [gated] = st["history"][0]["hooks"]
    assert gated["outcome"] == "Succeeded" and GATE in gated["message"], gated
    for name in names:
        assert pod_watch.assert_one_at_a_time(name) == [1, 2]


def test_a_hook_resumed_after_the_operator_was_killed_runs_again_with_a_higher_token(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, store: fencedstore.FencedStore, relays: list[Relay],
        namespace: str) -> None:
    port = free_port()
    rts.create(hooked("resumed", port=port, pre={"timeoutSeconds": 30}))
    op_a = operators("op-a")
    rts.wait_ready("resumed", 1)
    relay(relays, store, pod_ip(rts, "resumed"), port)
    store.hang(path="/resumed")  # the first call is in flight when its caller dies
    handoff(rts, "resumed")
    [first] = wait_for(lambda: store.requests(path="/resumed") or None, timeout=60, what="the first hook call")
    op_a.signal(signal.SIGKILL)
    op_a.wait_exit(10)
    store.heal(path="/resumed")  # from now on the store judges the fence
    assert pod_watch.added_gen("resumed", 2) == []
    operators("op-b")
    st = rts.wait_ready("resumed", 2, timeout=90)
    calls = store.requests(path="/resumed")
    answered = [r for r in calls if r.status == 200]
    assert len(answered) == 1, calls
    _, gen1, token1, _ = fence_of(first)
    _, gen2, token2, hook = fence_of(answered[0])
    assert gen1 == gen2 == 1 and hook == "preRetire"
    assert token2 > token1, f"resumed under token {token2}, first called under {token1}"
    [record] = st["history"][0]["hooks"]
    assert record["outcome"] == "Succeeded" and record["attempts"] == 2, record
    # N+1 was created only after the resumed call was answered (relay arrival times, monotonic).
    [added] = pod_watch.added_gen("resumed", 2)
    assert added.received > relays[0].arrivals[-1], "N+1 created before the resumed hook's call"
    # The store refuses the killed holder's token for that generation now.
    request = urllib.request.Request(store.url + "/resumed", method="POST", data=b"{}", headers={
        "Baton-Runtime": f"{namespace}/resumed", "Baton-Generation": "1", "Baton-Fencing-Token": str(token1),
        "Baton-Hook": "preRetire", "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 409
    body = json.loads(refused.value.read())
    assert body["refused"] == "fencingToken" and str(token1) in body["reason"], body
    assert pod_watch.assert_one_at_a_time("resumed") == [1, 2]


def test_post_ready_failing_keeps_n_plus_1_out_of_serving_and_calls_are_refused_hook_failed(
        operators: Start, gateways: Callable[..., GatewayProcess], rts: Runtimes, store: fencedstore.FencedStore,
        relays: list[Relay], namespace: str) -> None:
    port = free_port()
    m = hooked("warm", port=port, post={"timeoutSeconds": 5}, never_ready=True, admissionSeconds=3)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": free_port()}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    rts.create(m)
    operators("op-a")
    gw = gateways("gw-a")
    ip = pod_ip(rts, "warm")
    relay(relays, store, ip, port)
    store.answer(503, path="/warm")
    rts.core.patch_namespaced_pod("warm", rts.ns, {"metadata": {"annotations": {NEVER_READY: None}}})

    def degraded() -> dict[str, Any] | None:
        c = rts.condition("warm", "Degraded")
        return c if c is not None and c["status"] == "True" and c["reason"] == "HookFailed" else None
    cond = wait_for(degraded, timeout=60, what="Degraded=True HookFailed")
    assert "answered 503" in cond["message"], cond
    pod = rts.pod("warm")
    assert pod is not None and pod.metadata.labels["baton.dev/serving"] == "false", pod.metadata.labels
    assert rts.status("warm").get("current") is None
    r = call(gw.port, f"warm.{namespace}", body=rpc(rid=9), timeout=30)
    print(f"held past admissionSeconds=3: {r.status} {r.headers.get('baton-reason')} after {r.seconds:.2f}s")
    assert r.status == 503 and r.headers["baton-reason"] == "HookFailed", (r.status, r.headers, r.body)
    assert 2.9 <= r.seconds < 20
    assert r.json()["error"]["data"]["reason"] == "HookFailed", r.body
    store.heal(path="/warm")
    rts.annotate("warm", RETRY, "1")
    st = rts.wait_ready("warm", 1, timeout=60)
    [record] = st["current"]["hooks"]
    assert record["hook"] == "postReady" and record["outcome"] == "Succeeded" and record["attempts"] == 2, record
    assert rts.condition("warm", "Degraded")["status"] == "False"
    ok = [q for q in store.requests(path="/warm") if q.status == 200]
    assert len(ok) == 1, store.requests(path="/warm")
    assert fence_of(ok[0])[0::3] == (f"{namespace}/warm", "postReady") and fence_of(ok[0])[1] == 1, ok[0].headers
