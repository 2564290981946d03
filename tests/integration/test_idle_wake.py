"""Idle and wake end to end on the local plane (issue 43's Proof; docs/gateway.md, "Idle runtimes
and wake"): the operator and the gateway as real processes, each generation's tool played by a
ToolFleet server on its kwok-loop pod IP.

spec.idle.afterSeconds has a CRD floor of 60 s and no setting shortens it, so every runtime of this
file is created at once by two module fixtures and they go idle together, once, in the first
~70 s: each test then finds its runtime idle (or, for the claim and the health checks, not / in
spite of them). The tests depend on their order (pytest's, the file's): each plane's later tests
start from what the earlier ones left. Plane A (one operator, one gateway) holds the runtimes of proofs 1 to 5; plane B
(two operator replicas, two gateway replicas) the runtime of proof 6, whose wakes run second (PAIR's
second afterSeconds, which a later test waits out, then passes during plane A's tests).

1. idle after afterSeconds, its pod gone (status.idle.since, Ready=False Idle, history Idled, an
   Idle event); one call wakes it, answered by the new generation with Baton-Held-Ms; status.idle
   cleared, lastWake Woken with its seconds;
2. 50 calls arriving together during a wake are all answered by the new generation;
3. a wake that never becomes Ready answers WakeTimeout at wakeSeconds, leaves no pod and backs
   off: status.retry.notBefore, 503 WakeFailed at once during it, no second pod during it;
4. a ToolRuntimeClaim keeps a runtime awake; GET health checks and ping do not;
5. a runtime idle for minutes, the operator restarted and the gateway replaced meanwhile, wakes on
   its first call;
6. two operators, two gateways, the gateway holding the call killed during the wake: one new
   generation, the held calls answered (and an operator replica killed during another wake: the
   other one finishes it).

Beyond the list: BUSY (a call that counts delays the idle by afterSeconds from it), RACE (a call
arriving during the Idle retire itself wakes the runtime), PAIR after its gateway replica died
(still goes idle: the dead replica's activity is asked again, not given up on), and a restarted
operator that does not wake an idle runtime from a dead replica's stale demand (it believes a
replica's demand only once it saw that replica write its Lease: sealing.demanding).

afterSeconds' floor (60 s, the CRD's; no setting lowers it) is paid once for all runtimes (PAIR's
second one mostly during plane A's tests): the whole file runs in about 2.7 minutes.
"""
from __future__ import annotations

import datetime
import json
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.ports import free_port
from dev.wait import wait_for
from harness.fixtures import OperatorSet
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
from harness.kwok import NEVER_READY, TERMINATE_AFTER
from harness.runtimes import GROUP, VERSION, Runtimes, runtime_manifest
from harness.watchlog import PodWatch

AFTER_SECONDS = 60  # the CRD's floor (crds/baton.dev_toolruntimes.yaml: spec.idle.afterSeconds)
WAKE_SECONDS = 20  # a wake that succeeds: far above a kwok pod's start, on a loaded machine too
NEVER_WAKE_SECONDS = 6  # the wake that never becomes Ready
BACKOFF_BASE_SECONDS = 10  # the first back-off after a failed wake: long enough to call during it
# Every runtime goes idle once afterSeconds passed since it became Ready (the gateway started
# before): this bounds the wait for all of them, with room for a loaded machine.
IDLE_BY_SECONDS = AFTER_SECONDS + 60

# Plane A's runtimes, one a proof.
ONE, MANY, NEVER, CLAIMED, PINGED, LONG, BUSY = "one", "many", "never", "claimed", "pinged", "long", "busy"
# RACE gets a call while its Idle retire runs (its pod takes RACE_TERMINATE to go: the window).
RACE, RACE_TERMINATE = "race", "3s"
# BUSY gets one tools/call this long after it became Ready: its idle counts from that call.
BUSY_CALL_AFTER_SECONDS = 30
# Plane B's: PAIR loses a gateway replica during its wake, PAIR2 an operator replica.
PAIR, PAIR2 = "pair", "pair2"


def idle_runtime(name: str, *, port: int, wake_seconds: int = WAKE_SECONDS,
                 pod_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A loopback runtime behind the gateway whose tool listens on `port`, idle after the floor."""
    m = runtime_manifest(name, service=True, loopback=True, budgets={"admissionSeconds": 60},
                         pod_annotations=pod_annotations)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    m["spec"]["idle"] = {"afterSeconds": AFTER_SECONDS, "wakeSeconds": wake_seconds}
    return m


@dataclass
class Plane:
    """One namespace's operators, gateways, runtimes and their tools, started for the module."""

    cluster: Any
    namespace: str
    log_dir: Path
    rts: Runtimes
    ops: OperatorSet
    gateways: list[GatewayProcess] = field(default_factory=list)
    fleets: dict[str, ToolFleet] = field(default_factory=dict)
    ready_at: dict[str, float] = field(default_factory=dict)  # monotonic: generation 1 Ready seen
    pods: PodWatch | None = None
    pinger: "Pinger | None" = None  # plane A: health checks for PINGED from the start
    busy_call: list[tuple[float, Reply | Exception]] = field(default_factory=list)  # BUSY's call: (answered at, reply)
    race_call: list[tuple[dict[str, Any], Reply | Exception]] = field(default_factory=list)  # (transition seen, reply)

    def gateway(self, identity: str) -> GatewayProcess:
        gw = GatewayProcess(self.cluster, self.log_dir, identity=identity, namespaces=[self.namespace],
                            system_namespace=self.namespace)
        self.gateways.append(gw)
        return gw.start()

    def runtime(self, name: str, **kw: Any) -> None:
        fleet = ToolFleet(self.cluster.api_client, self.namespace, name, port=free_port())
        self.fleets[name] = fleet
        self.rts.create(idle_runtime(name, port=fleet.port, **kw))

    def host(self, name: str) -> str:
        return f"{name}.{self.namespace}"

    def wait_idle(self, name: str) -> dict[str, Any]:
        """The status once the runtime is idle and its pod is gone."""
        def check() -> dict[str, Any] | None:
            st = self.rts.status(name)
            return st if (st.get("idle") or {}).get("since") and not self.rts.pods(name) else None
        left = max(30.0, self.ready_at[name] + IDLE_BY_SECONDS - time.monotonic())
        found: dict[str, Any] = wait_for(check, timeout=left, what=f"{name} idle with no pod", interval=0.5)
        return found

    def logs(self) -> str:
        out = [f"--- log of operator {p.identity} ---\n{p.log_tail(80)}" for p in self.ops.started]
        out += [f"--- log of gateway {g.identity} ---\n{g.log_tail(80)}" for g in self.gateways]
        return "\n".join(out)

    def close(self) -> None:
        for gw in self.gateways:
            gw.kill()
        for fleet in self.fleets.values():
            fleet.stop()
        if self.pods is not None:
            self.pods.stop()
        self.ops.close()
        core = client.CoreV1Api(self.cluster.api_client)
        try:
            for pod in core.list_namespaced_pod(self.namespace).items:
                core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
            core.delete_namespace(self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise


def _plane(cluster: Any, tmp_path_factory: pytest.TempPathFactory, label: str) -> Plane:
    if not cluster.has_kwok_nodes:
        pytest.skip(f"needs the kwok nodes of the local plane (backend {cluster.backend})")
    core = client.CoreV1Api(cluster.api_client)
    ns = f"t-idle-wake-{label}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {"baton.dev/test": "true"}}})
    log_dir = tmp_path_factory.mktemp(f"idle-{label}")
    return Plane(cluster=cluster, namespace=ns, log_dir=log_dir, rts=Runtimes(cluster.api_client, ns),
                 ops=OperatorSet(cluster, ns, log_dir))


def _ready_all(plane: Plane, names: list[str]) -> None:
    for name in names:
        plane.rts.wait_ready(name, 1, timeout=90)
        plane.ready_at[name] = time.monotonic()
        fleet = plane.fleets[name]
        wait_for(lambda: fleet.of(1), timeout=30, what=f"the tool of {name} g1")


def make_claim(plane: Plane, name: str, *, runtime: str, generation: int) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntimeClaim", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime}, "generation": generation, "fork": "plan-1", "branch": "b",
                     "state": "CommitEligible"}}
    client.CustomObjectsApi(plane.cluster.api_client).create_namespaced_custom_object(
        GROUP, VERSION, plane.namespace, "toolruntimeclaims", body)


class Pinger:
    """Health checks through the gateway for one runtime while it should go idle: a GET and a
    JSON-RPC ping every `every` seconds (bounded by count and time), every answer kept."""

    def __init__(self, port: int, host: str, *, every: float = 2.0, max_seconds: float = 200) -> None:
        self.port, self.host, self.every = port, host, every
        self.replies: list[Reply | Exception] = []
        self._stop = threading.Event()
        self._max_seconds = max_seconds
        self._deadline = time.monotonic() + max_seconds
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for _ in range(int(self._max_seconds / self.every) + 1):
            if self._stop.is_set() or time.monotonic() > self._deadline:
                return
            for kw in ({"method": "GET", "path": "/healthz", "body": None}, {"body": rpc("ping", rid="hc")}):
                try:
                    r: Reply | Exception = call(self.port, self.host, timeout=10, **kw)
                except Exception as exc:  # kept: asserted on below
                    r = exc
                self.replies.append(r)
            self._stop.wait(self.every)

    def stop(self) -> list[Reply | Exception]:
        self._stop.set()
        self.thread.join(30)
        return list(self.replies)


def _race_call(plane: Plane) -> None:
    """Watch RACE's status (every 0.1 s, bounded) from shortly before its afterSeconds; once its
    Idle retire is under way, one tools/call through the gateway."""
    start = plane.ready_at[RACE] + AFTER_SECONDS - 5
    time.sleep(max(0.0, start - time.monotonic()))
    deadline = plane.ready_at[RACE] + IDLE_BY_SECONDS
    while time.monotonic() < deadline:
        try:
            transition = plane.rts.status(RACE).get("transition") or {}
        except Exception:  # the next poll reads again
            transition = {}
        # Past StoppingAdmission: the pod no longer takes calls (a call before would be forwarded to it).
        if transition.get("trigger") == "Idle" and transition.get("step") in ("Draining", "Terminating", "AwaitingPodGone"):
            try:
                r: Reply | Exception = call(plane.gateways[0].port, plane.host(RACE), body=rpc(rid="race"),
                                            timeout=WAKE_SECONDS + 70)
            except Exception as exc:  # asserted on by the test
                r = exc
            plane.race_call.append((transition, r))
            return
        time.sleep(0.1)


def _busy_call(plane: Plane) -> None:
    """One call that counts (a tools/call) for BUSY, on the Timer's thread."""
    try:
        r: Reply | Exception = call(plane.gateways[0].port, plane.host(BUSY), body=rpc(rid="busy"), timeout=30)
    except Exception as exc:  # asserted on by the test
        r = exc
    plane.busy_call.append((time.monotonic(), r))


@pytest.fixture(scope="module")
def plane_a(cluster: Any, crd: None, tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator[Plane]:
    plane = _plane(cluster, tmp_path_factory, "a")
    busy: threading.Timer | None = None
    try:
        plane.ops.start("op-a", env={"BATON_BACKOFF_BASE_SECONDS": str(BACKOFF_BASE_SECONDS)})
        plane.gateway("gw-a")
        plane.pods = PodWatch(cluster.api_client, plane.namespace)
        for name in (ONE, MANY, CLAIMED, PINGED, LONG, BUSY):
            plane.runtime(name)
        plane.runtime(NEVER, wake_seconds=NEVER_WAKE_SECONDS)
        plane.runtime(RACE, pod_annotations={TERMINATE_AFTER: RACE_TERMINATE})
        _ready_all(plane, [ONE, MANY, NEVER, CLAIMED, PINGED, LONG, BUSY, RACE])
        threading.Thread(target=_race_call, args=(plane,), daemon=True).start()
        make_claim(plane, "keep-claimed", runtime=CLAIMED, generation=1)
        plane.pinger = Pinger(plane.gateways[0].port, plane.host(PINGED))
        busy = threading.Timer(plane.ready_at[BUSY] + BUSY_CALL_AFTER_SECONDS - time.monotonic(), _busy_call,
                               args=(plane,))
        busy.daemon = True
        busy.start()
        yield plane
    finally:
        if getattr(request.session, "testsfailed", 0):
            print(plane.logs())
        if busy is not None:
            busy.cancel()
        if plane.pinger is not None:
            plane.pinger.stop()
        plane.close()


@pytest.fixture(scope="module")
def plane_b(cluster: Any, crd: None, tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator[Plane]:
    plane = _plane(cluster, tmp_path_factory, "b")
    try:
        for identity in ("op-a", "op-b"):
            plane.ops.start(identity, wait=False).launch()
        for proc in plane.ops.started:
            proc.wait_healthy()
        plane.gateway("gw-a")
        plane.gateway("gw-b")
        plane.pods = PodWatch(cluster.api_client, plane.namespace)
        plane.runtime(PAIR)
        plane.runtime(PAIR2)
        _ready_all(plane, [PAIR, PAIR2])
        yield plane
    finally:
        if getattr(request.session, "testsfailed", 0):
            print(plane.logs())
        plane.close()


@pytest.fixture(scope="module", autouse=True)
def both_planes(plane_a: Plane, plane_b: Plane) -> None:
    """Both planes start before the first test: their runtimes go idle in the same minute."""


def _condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == kind), {})


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _calls(port: int, host: str, n: int, *, timeout: float, prefix: str = "c") -> tuple[list[threading.Thread], list[Reply | Exception]]:
    """`n` tools/call calls started together (one thread each, released by one barrier)."""
    out: list[Reply | Exception] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        try:
            barrier.wait(10)
            r: Reply | Exception = call(port, host, body=rpc(rid=f"{prefix}{i}"), timeout=timeout)
        except Exception as exc:  # counted by the test
            r = exc
        with lock:
            out.append(r)
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads, out


def test_an_idle_runtime_loses_its_pod_and_one_call_wakes_it(plane_a: Plane) -> None:
    rts, gw = plane_a.rts, plane_a.gateways[0]
    st = plane_a.wait_idle(ONE)
    idled_after = time.monotonic() - plane_a.ready_at[ONE]
    print(f"{ONE}: idle {idled_after:.1f}s after Ready (afterSeconds={AFTER_SECONDS}); status.idle={st['idle']}")
    assert idled_after >= AFTER_SECONDS - 1, "idled before afterSeconds"
    ready = _condition(st, "Ready")
    assert ready.get("status") == "False" and ready.get("reason") == "Idle", ready
    assert not st.get("transition")
    assert st["history"][-1]["generation"] == 1 and st["history"][-1]["outcome"] == "Idled", st["history"]
    assert rts.events_posted(ONE, "Idle")
    assert plane_a.pods is not None and plane_a.pods.deleted_gen(ONE, 1), "generation 1's pod was deleted"

    r = call(gw.port, plane_a.host(ONE), body=rpc(rid="wake-1"), timeout=WAKE_SECONDS + 30)
    print(f"the waking call: {r.status} gen {r.generation} after {r.seconds:.2f}s, "
          f"Baton-Held-Ms {r.headers.get('baton-held-ms')}: {r.body[:200]!r}")
    assert r.status == 200 and r.generation == 2 and r.json()["result"]["gen"] == 2 and r.json()["id"] == "wake-1"
    held_ms = int(r.headers["baton-held-ms"])
    assert 0 < held_ms <= r.seconds * 1000 + 1
    assert [e["body"] for e in plane_a.fleets[ONE].of(2).requests if e["method"] == "POST"] != []  # type: ignore[union-attr]

    st = rts.wait_ready(ONE, 2, timeout=30)
    last = (st.get("idle") or {}).get("lastWake") or {}
    print(f"{ONE}: status.idle after the wake: {st.get('idle')}")
    assert not (st.get("idle") or {}).get("since"), "status.idle.since cleared"
    assert last.get("outcome") == "Woken" and last.get("readyAt") and last.get("requestedAt")
    assert 0 < float(last["seconds"]) <= WAKE_SECONDS
    took = (_time(last["readyAt"]) - _time(last["requestedAt"])).total_seconds()
    assert abs(took - float(last["seconds"])) < 0.01
    assert rts.events_posted(ONE, "Woken")
    assert len([e for e in plane_a.pods.added() if e.of(ONE)]) == 2, "one pod a generation, two in all"


# Plane B's two wakes run here, right after the first test (by then every runtime is idle), not
# after plane A's tests: PAIR's second afterSeconds (test_a_runtime_still_goes_idle_after_a_
# gateway_replica_was_killed waits it out) then runs while plane A's tests do.
def test_an_operator_replica_killed_during_a_wake_the_other_one_finishes_it(plane_b: Plane) -> None:
    rts = plane_b.rts
    plane_b.wait_idle(PAIR2)
    # The wake's pod is Ready only once the test removes its annotation (changed while idle: starts nothing).
    rts.patch(PAIR2, {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: "true"}}}}})
    gw_b = plane_b.gateways[1]
    threads, out = _calls(gw_b.port, plane_b.host(PAIR2), 5, timeout=WAKE_SECONDS + 30, prefix="o")
    pod = wait_for(lambda: _gen_pod(plane_b, PAIR2, 2), timeout=10, what="the wake's pod (generation 2)")
    holder = wait_for(lambda: _lease_holder(plane_b, PAIR2), timeout=10, what="the wake's Lease holder")
    [victim] = [p for p in plane_b.ops.started if p.identity == holder]
    victim.kill()  # SIGKILL mid-wake: its Lease is taken over once it expires
    plane_b.ops.start("op-c")  # two replicas again, for the tests after
    taken = wait_for(lambda: _lease_holder(plane_b, PAIR2) not in ("", holder) and _lease_holder(plane_b, PAIR2),
                     timeout=WAKE_SECONDS, what="another replica holding the wake's Lease")
    print(f"{PAIR2}: {holder} killed during the wake, {taken} took it over; "
          f"transition {(rts.status(PAIR2).get('transition') or {}).get('step')}")
    assert not out, "the calls are still held"
    rts.core.patch_namespaced_pod(pod.metadata.name, plane_b.namespace, {"metadata": {"annotations": {NEVER_READY: None}}})
    for t in threads:
        t.join(WAKE_SECONDS + 40)
    print(f"held calls: {[(r.status, r.generation, round(r.seconds, 2)) if isinstance(r, Reply) else r for r in out]}")
    assert len(out) == 5 and all(isinstance(r, Reply) and r.status == 200 and r.generation == 2 for r in out), out
    st = rts.wait_ready(PAIR2, 2, timeout=30)
    assert ((st.get("idle") or {}).get("lastWake") or {}).get("outcome") == "Woken", st.get("idle")
    assert plane_b.pods is not None
    gens = sorted(e.generation or 0 for e in plane_b.pods.added() if e.of(PAIR2))
    assert gens == [1, 2], f"pods created: generations {gens}"


def test_two_replicas_each_one_gateway_killed_during_a_wake_one_generation_held_calls_answered(plane_b: Plane) -> None:
    rts = plane_b.rts
    plane_b.wait_idle(PAIR)
    gw_a, gw_b = plane_b.gateways
    # The wake's pod is Ready only once the test says so (kwok's stage: the pod's annotation
    # removed): gw-a is killed while the wake is under way, not after. Changed while idle: starts nothing.
    rts.patch(PAIR, {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: "true"}}}}})
    doomed, doomed_out = _calls(gw_a.port, plane_b.host(PAIR), 5, timeout=WAKE_SECONDS + 30, prefix="a")
    kept, kept_out = _calls(gw_b.port, plane_b.host(PAIR), 5, timeout=WAKE_SECONDS + 30, prefix="b")
    wait_for(lambda: _demand(plane_b, gw_a) == [f"{plane_b.namespace}/{PAIR}"], timeout=5, what="gw-a's demand on its Lease")
    pod = wait_for(lambda: next((p for p in rts.pods(PAIR) if (p.metadata.labels or {}).get("baton.dev/generation") == "2"), None),
                   timeout=10, what="the wake's pod (generation 2)")
    transition = rts.status(PAIR).get("transition") or {}
    assert transition.get("trigger") == "Wake" and transition.get("to") == 2, transition
    gw_a.kill()  # SIGKILL: its held calls' connections are reset, its Lease stays (never renewed again)
    for t in doomed:
        t.join(10)
    print(f"gw-a killed during the wake ({transition.get('step')}); its calls: "
          f"{[type(r).__name__ if not isinstance(r, Reply) else r.status for r in doomed_out]}")
    assert not kept_out, "gw-b's calls are still held"
    rts.core.patch_namespaced_pod(pod.metadata.name, plane_b.namespace,
                                  {"metadata": {"annotations": {NEVER_READY: None}}})
    for t in kept:
        t.join(WAKE_SECONDS + 40)
    # The clients of the killed replica retry through the other one, once.
    retried = [call(gw_b.port, plane_b.host(PAIR), body=rpc(rid=f"retry{i}"), timeout=WAKE_SECONDS + 30)
               for i, r in enumerate(doomed_out) if not isinstance(r, Reply)]
    answered = [r for r in kept_out + retried + doomed_out if isinstance(r, Reply)]
    print(f"killed replica: {sum(not isinstance(r, Reply) for r in doomed_out)} calls cut, "
          f"{len(retried)} retried; answers {[(r.status, r.generation) for r in answered]}")
    assert len(kept_out) == 5 and len(answered) == 10
    assert all(r.status == 200 and r.generation == 2 for r in answered), answered
    rts.wait_ready(PAIR, 2, timeout=30)
    assert plane_b.pods is not None
    # Both operators saw the demand (gw-a's stays on its dead Lease): one generation all the same.
    time.sleep(3)
    gens = sorted(e.generation or 0 for e in plane_b.pods.added() if e.of(PAIR))
    assert gens == [1, 2], f"pods created: generations {gens}"
    assert (rts.status(PAIR).get("current") or {}).get("generation") == 2
    plane_b.ready_at[PAIR] = time.monotonic()


def test_a_wake_that_never_becomes_ready_times_out_leaves_no_pod_and_backs_off(plane_a: Plane) -> None:
    rts, gw = plane_a.rts, plane_a.gateways[0]
    plane_a.wait_idle(NEVER)
    # While idle (no pod) the template changes: the wake's pod is never Ready (kwok's stage).
    rts.patch(NEVER, {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: "true"}}}}})
    time.sleep(2)
    assert not rts.pods(NEVER), "a template change of an idle runtime starts nothing"

    r = call(gw.port, plane_a.host(NEVER), body=rpc(rid="w"), timeout=NEVER_WAKE_SECONDS + 30)
    print(f"the held call: {r.status} {r.headers.get('baton-reason')} after {r.seconds:.2f}s, "
          f"Retry-After {r.headers.get('retry-after')}, Baton-Held-Ms {r.headers.get('baton-held-ms')}")
    assert r.status == 503 and r.headers["baton-reason"] == "WakeTimeout" and r.json()["id"] == "w"
    assert NEVER_WAKE_SECONDS - 0.5 <= r.seconds < NEVER_WAKE_SECONDS + 5
    assert int(r.headers["retry-after"]) >= 1
    assert (NEVER_WAKE_SECONDS - 0.5) * 1000 <= int(r.headers["baton-held-ms"]) <= r.seconds * 1000 + 1
    assert plane_a.pods is not None
    wake_pods = [e for e in plane_a.pods.added() if e.of(NEVER) and e.generation == 2]
    assert wake_pods, "the wake created generation 2's pod"

    def failed() -> dict[str, Any] | None:
        st = rts.status(NEVER)
        last = (st.get("idle") or {}).get("lastWake") or {}
        done = last.get("outcome") == "Failed" and not st.get("transition") and not rts.pods(NEVER)
        return st if done else None
    st = wait_for(failed, timeout=NEVER_WAKE_SECONDS + 30, what="the failed wake recorded, its pod gone")
    print(f"after the failed wake: idle={st.get('idle')} retry={st.get('retry')} Ready={_condition(st, 'Ready')}")
    assert (st.get("idle") or {}).get("since"), "still idle"
    ready, degraded = _condition(st, "Ready"), _condition(st, "Degraded")
    assert ready.get("status") == "False" and ready.get("reason") == "WakeFailed", ready
    assert degraded.get("status") == "True" and degraded.get("reason") == "WakeFailed", degraded
    assert rts.events_posted(NEVER, "WakeFailed")
    not_before = _time((st.get("retry") or {})["notBefore"])
    left = (not_before - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    print(f"back-off: {left:.1f}s left")
    assert left > 2, f"a back-off to call during (BATON_BACKOFF_BASE_SECONDS={BACKOFF_BASE_SECONDS}): {left:.1f}s left"

    during = call(gw.port, plane_a.host(NEVER), body=rpc(rid="b"), timeout=10)
    print(f"during the back-off: {during.status} {during.headers.get('baton-reason')} in {during.seconds:.3f}s, "
          f"Retry-After {during.headers.get('retry-after')}")
    assert during.status == 503 and during.headers["baton-reason"] == "WakeFailed" and during.seconds < 1.5
    assert 1 <= int(during.headers["retry-after"]) <= int(left) + 2
    # No second pod during the back-off (watched until it ended).
    remaining = (not_before - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    time.sleep(max(0.0, remaining))
    gens = sorted({e.generation for e in plane_a.pods.added() if e.of(NEVER)}, key=lambda g: g or 0)
    assert gens == [1, 2], f"pods created: generations {gens}"
    assert not rts.pods(NEVER)

    # The back-off over and the cause gone (the template fixed while idle): the next call wakes it.
    rts.patch(NEVER, {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: None}}}}})
    r = call(gw.port, plane_a.host(NEVER), body=rpc(rid="again"), timeout=WAKE_SECONDS + 30)
    print(f"after the back-off: {r.status} {r.headers.get('baton-reason')} gen {r.generation} after {r.seconds:.2f}s")
    assert r.status == 200 and r.generation == 3 and r.json()["id"] == "again"
    st = rts.wait_ready(NEVER, 3, timeout=30)
    assert not st.get("retry") and (st["idle"].get("lastWake") or {}).get("outcome") == "Woken", st
    assert _condition(st, "Degraded").get("status") == "False", _condition(st, "Degraded")


def test_fifty_calls_arriving_together_during_a_wake_are_all_answered(plane_a: Plane) -> None:
    rts, gw = plane_a.rts, plane_a.gateways[0]
    plane_a.wait_idle(MANY)
    threads, out = _calls(gw.port, plane_a.host(MANY), 50, timeout=WAKE_SECONDS + 30)
    for t in threads:
        t.join(WAKE_SECONDS + 40)
    failed = [r for r in out if not isinstance(r, Reply) or r.status != 200 or r.generation != 2]
    seconds = sorted(r.seconds for r in out if isinstance(r, Reply))
    held_ms = sorted(int(r.headers.get("baton-held-ms", -1)) for r in out if isinstance(r, Reply))
    print(f"{len(out)} answers, {len(failed)} not 200 from g2; seconds min {seconds[0]:.2f} "
          f"p50 {seconds[len(seconds) // 2]:.2f} max {seconds[-1]:.2f}; Baton-Held-Ms min {held_ms[0]} "
          f"p50 {held_ms[len(held_ms) // 2]} max {held_ms[-1]}; lastWake {rts.status(MANY).get('idle')}")
    assert len(out) == 50 and not failed, failed[:5]
    assert all("baton-held-ms" in r.headers for r in out if isinstance(r, Reply)), "every held call says how long"
    assert sorted(str(r.json()["id"]) for r in out if isinstance(r, Reply)) == sorted(f"c{i}" for i in range(50))
    assert plane_a.fleets[MANY].of(3) is None and rts.wait_ready(MANY, 2, timeout=30)
    assert plane_a.pods is not None and len([e for e in plane_a.pods.added() if e.of(MANY)]) == 2


def test_a_call_arriving_while_the_runtime_goes_idle_wakes_it(plane_a: Plane) -> None:
    """A call that arrives during the Idle retire (admission stopped, the pod going) is held as for
    any transition; once the runtime is idle it is demand: it wakes the runtime and is answered by
    the next generation, not left to wait out admissionSeconds."""
    [(transition, r)] = wait_for(lambda: plane_a.race_call, timeout=IDLE_BY_SECONDS + WAKE_SECONDS + 80,
                                 what="the call sent during the Idle retire answered")
    print(f"{RACE}: called during {transition.get('kind')} ({transition.get('trigger')}, {transition.get('step')}): "
          f"{r if isinstance(r, Exception) else (r.status, r.headers.get('baton-reason'), r.generation, round(r.seconds, 2), r.headers.get('baton-held-ms'))}")
    assert isinstance(r, Reply) and r.status == 200 and r.generation == 2 and r.json()["id"] == "race", r
    assert "baton-held-ms" in r.headers and r.seconds < WAKE_SECONDS + 5
    st = plane_a.rts.wait_ready(RACE, 2, timeout=30)
    assert ((st.get("idle") or {}).get("lastWake") or {}).get("outcome") == "Woken", st.get("idle")


def test_a_call_and_a_claim_keep_a_runtime_awake_and_health_checks_do_not(plane_a: Plane) -> None:
    rts = plane_a.rts
    # A call that counts, BUSY_CALL_AFTER_SECONDS after Ready: the idle counts from it.
    plane_a.wait_idle(BUSY)
    idle_seen = time.monotonic()
    [(answered_at, busy)] = plane_a.busy_call
    assert isinstance(busy, Reply) and busy.status == 200 and busy.generation == 1, busy
    print(f"{BUSY}: idle {idle_seen - answered_at:.1f}s after its call, {idle_seen - plane_a.ready_at[BUSY]:.1f}s after Ready")
    assert idle_seen - answered_at >= AFTER_SECONDS - 1, "idled before afterSeconds passed since its last call"
    plane_a.wait_idle(PINGED)
    assert plane_a.pinger is not None
    pinger = plane_a.pinger
    # The health checks go on once it is idle, until a few were answered (bounded): how many came
    # after the idle before this line is the machine's timing, not the gateway's behaviour.
    wait_for(lambda: len([r for r in list(pinger.replies) if isinstance(r, Reply) and r.status == 503]) >= 6,
             timeout=60, interval=0.5, what=f"{PINGED}'s health checks answered while idle")
    replies = pinger.stop()
    answered = [r for r in replies if isinstance(r, Reply)]
    print(f"{PINGED}: idle in spite of {len(answered)} health checks (GET and ping) through the gateway")
    assert len(answered) >= AFTER_SECONDS // 2, "health checks were sent all along"
    assert any(r.status == 200 for r in answered), "the health checks reached the tool before the idle"
    # Once idle, they are answered 503 Idle at once and wake nothing.
    idle_answers = [r for r in answered if r.status == 503]
    assert all(r.headers.get("baton-reason") == "Idle" for r in idle_answers), \
        [(r.status, r.headers.get("baton-reason")) for r in idle_answers]
    # At once: not held (no Baton-Held-Ms), but for one sent during the idle retire itself, held
    # for the transition, then refused so.
    assert len([r for r in idle_answers if "baton-held-ms" not in r.headers]) >= 5, \
        [(round(r.seconds, 2), r.headers.get("baton-held-ms")) for r in idle_answers]
    assert plane_a.pods is not None and {e.generation for e in plane_a.pods.added() if e.of(PINGED)} == {1}
    assert (rts.status(PINGED).get("idle") or {}).get("since"), "still idle"
    # The claimed runtime: its afterSeconds passed long ago, it still serves generation 1.
    assert time.monotonic() - plane_a.ready_at[CLAIMED] > AFTER_SECONDS + 5
    st = rts.status(CLAIMED)
    assert not (st.get("idle") or {}).get("since") and (st.get("current") or {}).get("generation") == 1, st
    assert _condition(st, "Ready").get("status") == "True" and rts.pods(CLAIMED)
    # Its claim released: it goes idle (nothing else kept it awake).
    client.CustomObjectsApi(plane_a.cluster.api_client).delete_namespaced_custom_object(
        GROUP, VERSION, plane_a.namespace, "toolruntimeclaims", "keep-claimed")
    t0 = time.monotonic()
    plane_a.ready_at[CLAIMED] = t0 - IDLE_BY_SECONDS + 45  # wait_idle's bound: 45 s from now
    plane_a.wait_idle(CLAIMED)
    print(f"{CLAIMED}: idle {time.monotonic() - t0:.1f}s after its claim was deleted")


def test_a_long_idle_runtime_wakes_after_the_operator_restarted_and_the_gateway_was_replaced(plane_a: Plane) -> None:
    rts = plane_a.rts
    st = plane_a.wait_idle(LONG)
    [op] = plane_a.ops.started
    op.kill()
    old = plane_a.gateways[0]
    old.signal(signal.SIGTERM)
    assert old.wait_exit(30) == 0
    plane_a.ops.start("op-a2", env={"BATON_BACKOFF_BASE_SECONDS": str(BACKOFF_BASE_SECONDS)})
    gw = plane_a.gateway("gw-a2")
    idle_for = (datetime.datetime.now(datetime.timezone.utc) - _time(st["idle"]["since"])).total_seconds()
    print(f"{LONG}: idle for {idle_for:.0f}s; operator and gateway replaced")
    r = call(gw.port, plane_a.host(LONG), body=rpc(rid="first"), timeout=WAKE_SECONDS + 30)
    print(f"first call: {r.status} {r.headers.get('baton-reason')} gen {r.generation} after {r.seconds:.2f}s")
    assert r.status == 200 and r.generation == 2 and r.json()["id"] == "first"
    assert "baton-held-ms" in r.headers
    rts.wait_ready(LONG, 2, timeout=30)


def _demand(plane: Plane, gw: GatewayProcess) -> list[str] | None:
    """What gateway `gw`'s registration Lease lists in baton.dev/wake-demand (None: nothing)."""
    lease = client.CoordinationV1Api(plane.cluster.api_client).read_namespaced_lease(
        f"baton-gateway.{gw.identity}", gw.system_namespace)
    text = (lease.metadata.annotations or {}).get("baton.dev/wake-demand")
    return json.loads(text) if text is not None else None


def _lease_holder(plane: Plane, runtime: str) -> str:
    """The holder of the runtime's lifecycle Lease ("" when none)."""
    lease = client.CoordinationV1Api(plane.cluster.api_client).read_namespaced_lease(f"baton-{runtime}", plane.namespace)
    return str((lease.spec.holder_identity if lease.spec else None) or "")


def _gen_pod(plane: Plane, runtime: str, generation: int) -> Any:
    return next((p for p in plane.rts.pods(runtime)
                 if (p.metadata.labels or {}).get("baton.dev/generation") == str(generation)), None)


def test_a_runtime_still_goes_idle_after_a_gateway_replica_was_killed(plane_b: Plane) -> None:
    """After the previous test: gw-a is dead (SIGKILL) and its Lease stays. The operators could not
    read its activity at the moment it died (unknown: never idled on a guess), then its Lease
    lapses and its refused answers count it gone: PAIR goes idle on gw-b's count alone.

    (gw-a's Lease keeps the demand it had when it was killed: the next test proves it wakes
    nothing.)"""
    t0 = time.monotonic()
    plane_b.wait_idle(PAIR)
    print(f"{PAIR}: idle again {time.monotonic() - plane_b.ready_at[PAIR]:.1f}s after generation 2 was Ready "
          f"(waited {time.monotonic() - t0:.1f}s)")


class StaleDemandWoke(AssertionError):
    """An idle runtime woken by a dead replica's demand (it failed so before sealing.demanding
    believed only replicas seen writing)."""


def test_a_killed_replicas_demand_left_on_its_lease_does_not_wake_an_idle_runtime_after_an_operator_restart(
        plane_b: Plane) -> None:
    """After the previous tests: gw-a was killed while it held calls, so its Lease (never deleted,
    never renewed) still lists PAIR in baton.dev/wake-demand, and PAIR is idle again. An operator
    that starts afresh must not read that stale demand as a call held now."""
    rts, lease_api = plane_b.rts, client.CoordinationV1Api(plane_b.cluster.api_client)
    gw_a = plane_b.gateways[0]
    lease = lease_api.read_namespaced_lease(f"baton-gateway.{gw_a.identity}", gw_a.system_namespace)
    print(f"gw-a's Lease (its process dead): wake-demand {_demand(plane_b, gw_a)}, renewed {lease.spec.renew_time}")
    assert _demand(plane_b, gw_a) == [f"{plane_b.namespace}/{PAIR}"]
    plane_b.wait_idle(PAIR)
    # Changed while idle (starts nothing): a wake's pod would be Ready, so a wake shows at once.
    rts.patch(PAIR, {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: None}}}}})
    assert plane_b.pods is not None
    before = len([e for e in plane_b.pods.added() if e.of(PAIR)])
    for proc in plane_b.ops.started:
        proc.kill()
    op = plane_b.ops.start("op-d")
    time.sleep(10)  # the new operator lists everything and passes over PAIR within moments
    created = [e.generation for e in plane_b.pods.added() if e.of(PAIR)][before:]
    st = rts.status(PAIR)
    print(f"after the restart: pods created {created}; status.idle {st.get('idle')}")
    if created or not (st.get("idle") or {}).get("since"):
        raise StaleDemandWoke(f"woken by the dead replica's stale demand: {(st.get('idle') or {}).get('lastWake')}\n"
                              f"{op.log_tail(12)}")
