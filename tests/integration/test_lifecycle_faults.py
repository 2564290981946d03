"""Baton under faults: killed and frozen operators, two replicas, slow and stuck pods, deletes.

Each test names the DESIGN.md invariant it proves; the operator always runs as a real process.
"""
from __future__ import annotations

import datetime
import http.server
import signal
import threading
import time
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.ports import free_port
from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]


def _step(rts: Runtimes, name: str) -> str | None:
    t = rts.status(name).get("transition") or {}
    return t.get("step")


def test_sigkill_mid_handoff_is_finished_by_the_next_holder(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """Invariants 2, 6: killed while Draining and again while AwaitingPodGone, the handoff is
    finished by the restarted operator with the same target generation; exactly one g2."""
    # The drain probe points at a kwok-a pod IP the operator may not dial (tests allow only
    # loopback), so Draining lasts its whole budget; pods take 6 s to terminate.
    rts.create(runtime_manifest(
        "resume", budgets={"drainSeconds": 8, "cleanupSeconds": 30},
        drain_probe={"httpGet": {"path": "/idle", "port": 8080}, "periodSeconds": 1},
        pod_annotations={"baton.dev/test-terminate-after": "6s"}))
    op = operators("op-a")
    rts.wait_ready("resume", 1)
    rts.set_image("resume", "example/tool:2")
    wait_for(lambda: _step(rts, "resume") == "Draining", timeout=15, what="step Draining")
    target = rts.status("resume")["transition"]["to"]
    op.signal(signal.SIGKILL)
    op.wait_exit(10)

    op2 = operators("op-b")
    wait_for(lambda: _step(rts, "resume") == "AwaitingPodGone", timeout=30, what="step AwaitingPodGone")
    st = rts.status("resume")
    assert st["transition"]["to"] == target
    assert st["holder"] == "op-b"
    op2.signal(signal.SIGKILL)
    op2.wait_exit(10)

    operators("op-c")
    st2 = rts.wait_ready("resume", target, timeout=60)
    assert target == 2
    assert pod_watch.assert_one_at_a_time("resume") == [1, 2]
    assert len(pod_watch.added_gen("resume", 2)) == 1
    [entry] = st2["history"]
    assert entry["generation"] == 1 and entry["outcome"] == "Retired" and entry["message"] == "drain incomplete"
    assert st2["latestGeneration"] == 2
    assert st2["holder"] == "op-c"


def test_two_replicas_ten_runtimes_three_rounds(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """Invariants 1-3 with two operator processes acting at once: every generation exists once
    and never overlaps its predecessor."""
    names = [f"rt{i}" for i in range(10)]
    for n in names:
        rts.create(runtime_manifest(n))
    a = operators("op-a")
    b = operators("op-b")
    for n in names:
        rts.wait_ready(n, 1, timeout=90)
    for round_ in range(2, 5):
        for n in names:
            rts.set_image(n, f"example/tool:{round_}")
        for n in names:
            rts.wait_ready(n, round_, timeout=120)
    for n in names:
        assert pod_watch.assert_one_at_a_time(n) == list(range(1, 5))
        st = rts.status(n)
        assert [h["generation"] for h in st["history"]] == [1, 2, 3]
        assert st["latestGeneration"] == 4
    per_replica = (a.metric("baton_transitions_total"),
                   b.metric("baton_transitions_total"))
    assert sum(per_replica) == 40, per_replica
    print(f"transitions per replica: op-a={per_replica[0]:.0f} op-b={per_replica[1]:.0f}")


@pytest.mark.parametrize("fresh_rv", [True, False], ids=["cel-fence", "rv-precondition"])
def test_frozen_holder_is_fenced_by_the_api_server(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, fresh_rv: bool) -> None:
    """Invariant 3: a holder SIGSTOPped past its Lease, then SIGCONTed after another took over,
    has its status write refused by the API server and creates no pod.

    cel-fence: the stale write carries the runtime's *current* resourceVersion (fault injection
    BATON_FAULT_STATUS_WRITE_FRESH_RV), so the resourceVersion precondition lets it through and
    only the CRD's CEL rule on fencingToken can refuse it: it does ("must not decrease").
    rv-precondition: the write carries the version it was decided on, as Baton sends it; the API
    server refuses it as a Conflict before CEL is asked, and op-a reads again and stands down."""
    rts.create(runtime_manifest("fence"))
    env = {"BATON_FAULT_DELAY_STATUS_WRITE": "Creating=3"}
    if fresh_rv:
        env["BATON_FAULT_STATUS_WRITE_FRESH_RV"] = "1"
    a = operators("op-a", env=env)
    rts.wait_ready("fence", 1)
    hook = "fault injection: delaying the status write to step Creating"
    seen = a.log_text().count(hook)  # the initial Create wrote step Creating too
    rts.set_image("fence", "example/tool:2")
    wait_for(lambda: a.log_text().count(hook) > seen, timeout=30,
             what="op-a about to write step Creating of the handoff")
    a.signal(signal.SIGSTOP)
    try:
        token_a = int(rts.get("fence")["status"]["fencingToken"])
        b = operators("op-b")
        # op-b takes over once op-a's Lease (5 s) expired, and writes a newer token.
        wait_for(lambda: rts.status("fence")["fencingToken"] > token_a, timeout=20,
                 what="op-b's newer fencing token in status")
        rts.wait_ready("fence", 2, timeout=30)
    finally:
        a.signal(signal.SIGCONT)
    rejected_by_cel = "status write rejected by the API server"
    refused_by_rv = "status write refused: the runtime changed since this pass read it"
    if fresh_rv:
        wait_for(lambda: rejected_by_cel in a.log_text(), timeout=15, what="op-a's stale write rejected by CEL")
        assert "must not decrease" in a.log_text()
        assert "the delayed status write carries the current resourceVersion" in a.log_text()
        assert a.metric("baton_fencing_rejections_total") >= 1
    else:
        wait_for(lambda: refused_by_rv in a.log_text(), timeout=15, what="op-a's stale write refused (409)")
        assert rejected_by_cel not in a.log_text()
    pods = [e for e in pod_watch.added() if e.of("fence")]
    assert all(e.annotations["baton.dev/fencing-token"] != str(token_a) or e.generation == 1
               for e in pods), [(e.generation, e.annotations["baton.dev/fencing-token"]) for e in pods]
    assert pod_watch.assert_one_at_a_time("fence") == [1, 2]
    st = rts.status("fence")
    assert st["current"]["generation"] == 2 and st["holder"] == "op-b"
    assert st["fencingToken"] > token_a
    assert "resuming Handoff" in b.log_text()


class _DrainServer:
    """An HTTP listener on a kwok-loop pod's IP (loopback): 503 until told, then 200."""

    def __init__(self, ip: str, port: int) -> None:
        self.idle = threading.Event()
        self.first_200: float | None = None
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.requests += 1
                if outer.idle.is_set():
                    if outer.first_200 is None:
                        outer.first_200 = time.monotonic()
                    self.send_response(200)
                else:
                    self.send_response(503)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((ip, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.usefixtures("kwok_nodes")
@pytest.mark.parametrize("answers_200", [True, False], ids=["idle-after-503s", "never-idle"])
def test_drain_probe_gates_the_delete(operators: Start, rts: Runtimes,
                                      pod_watch: PodWatch, answers_200: bool) -> None:
    """The old pod is deleted only after its drain probe answers 200, or after drainSeconds
    with DrainIncomplete recorded."""
    port = free_port()
    drain_seconds = 6
    rts.create(runtime_manifest(
        "drain", loopback=True, budgets={"drainSeconds": drain_seconds},
        drain_probe={"httpGet": {"path": "/idle", "port": port}, "periodSeconds": 1}))
    op = operators("op-a")
    rts.wait_ready("drain", 1)
    ip = rts.gen_pod("drain", 1).status.pod_ip
    assert ip.startswith("127."), ip
    server = _DrainServer(ip, port)
    try:
        rts.set_image("drain", "example/tool:2")
        wait_for(lambda: _step(rts, "drain") == "Draining", timeout=15, what="Draining")
        entered = time.monotonic()
        if answers_200:
            wait_for(lambda: server.requests >= 2, timeout=10, what="probe answered 503 twice")
            server.idle.set()
        rts.wait_ready("drain", 2, timeout=40)
    finally:
        server.close()
    g1_uids = {e.uid for e in pod_watch.added_gen("drain", 1)}
    deleting = [e for e in pod_watch.snapshot() if e.uid in g1_uids and e.deleting]
    assert deleting, "g1 was deleted"
    deleted_at = deleting[0].received
    st = rts.status("drain")
    entry = st["history"][0]
    if answers_200:
        assert server.first_200 is not None and deleted_at >= server.first_200
        assert entry.get("message") != "drain incomplete"
        assert op.metric("baton_drain_incomplete_total") == 0
    else:
        assert deleted_at - entered >= drain_seconds - 1.0
        assert entry["message"] == "drain incomplete"
        assert rts.events_posted("drain", "DrainIncomplete")
        assert op.metric("baton_drain_incomplete_total") == 1
    assert pod_watch.assert_one_at_a_time("drain") == [1, 2]


def test_connect_timeout_retires_and_backs_off(operators: Start, rts: Runtimes,
                                              pod_watch: PodWatch) -> None:
    """Invariant 4 (connect budget) and 1: a pod that never becomes Ready gives Degraded
    ConnectTimeout within connectSeconds + 5 s; each retry waits longer; never two at once."""
    connect = 2
    t0 = time.monotonic()
    rts.create(runtime_manifest("noready", budgets={"connectSeconds": connect},
                                      pod_annotations={"baton.dev/test-never-ready": "true"}))
    op = operators("op-a")  # back-off base 2 s in tests: 2, 4, 8 ...

    def degraded() -> dict[str, Any] | None:
        c = rts.condition("noready", "Degraded")
        return c if c and c["status"] == "True" and c["reason"] == "ConnectTimeout" else None

    wait_for(degraded, timeout=connect + 5 + 5, what="Degraded=True ConnectTimeout")
    assert time.monotonic() - t0 <= connect + 5 + 5
    wait_for(lambda: len(pod_watch.added()) >= 4, timeout=60, what="four attempts")
    spans = pod_watch.lifetimes("noready")
    evs = pod_watch.snapshot()
    # spans: (name, uid, generation, index of ADDED, index of DELETED)
    gaps = [evs[nxt[3]].received - evs[prev[4]].received for prev, nxt in zip(spans, spans[1:])
            if prev[4] is not None]
    assert len(gaps) >= 3, spans
    assert gaps[1] > gaps[0] + 1.0 and gaps[2] > gaps[1] + 2.0, f"gaps between attempts: {gaps}"
    pod_watch.assert_one_at_a_time("noready")
    st = rts.status("noready")
    assert st["retry"]["attempt"] >= 3
    assert [h["outcome"] for h in st["history"]][:3] == ["ConnectTimeout"] * 3
    assert op.metric("baton_connect_timeouts_total") >= 3
    assert rts.events_posted("noready", "ConnectTimeout")


def test_delete_mid_handoff_leaves_nothing(operators: Start, rts: Runtimes,
                                           pod_watch: PodWatch, cluster: Any,
                                           namespace: str) -> None:
    """Invariant 7: deleting a runtime while it hands off retires the old pod the same way,
    creates nothing new, then removes its Service and Lease, then its finalizer."""
    rts.create(runtime_manifest("gone", service=True,
                                      pod_annotations={"baton.dev/test-terminate-after": "4s"}))
    operators("op-a")
    rts.wait_ready("gone", 1)
    rts.set_image("gone", "example/tool:2")
    wait_for(lambda: _step(rts, "gone") == "AwaitingPodGone", timeout=20, what="AwaitingPodGone")
    rts.delete("gone")
    wait_for(lambda: not rts.exists("gone"), timeout=30, what="runtime deleted")
    assert rts.pods("gone") == []
    assert not pod_watch.added_gen("gone", 2), "no new generation during a delete"
    with pytest.raises(ApiException) as svc:
        rts.core.read_namespaced_service("gone", namespace)
    assert svc.value.status == 404
    with pytest.raises(ApiException) as lease:
        client.CoordinationV1Api(cluster.api_client).read_namespaced_lease("baton-gone", namespace)
    assert lease.value.status == 404


def test_lost_pod_is_handed_off_to_a_new_number(operators: Start, rts: Runtimes,
                                                pod_watch: PodWatch) -> None:
    """A pod of the current generation deleted by someone else: recorded, and g2 follows."""
    rts.create(runtime_manifest("lost"))
    operators("op-a")
    st1 = rts.wait_ready("lost", 1)
    rts.core.delete_namespaced_pod("lost", rts.ns, grace_period_seconds=0)
    st2 = rts.wait_ready("lost", 2, timeout=30)
    [entry] = st2["history"]
    assert entry["outcome"] == "Lost" and entry["uid"] == st1["current"]["uid"]
    assert rts.events_posted("lost", "PodLost")
    assert pod_watch.assert_one_at_a_time("lost") == [1, 2]


def test_api_server_rejects_a_lower_fencing_token(operators: Start, rts: Runtimes) -> None:
    """Invariant 3's fence lives in the API server: status.fencingToken and current.generation
    never decrease, whoever writes."""
    rts.create(runtime_manifest("cel"))
    operators("op-a")
    st = rts.wait_ready("cel", 1)
    for patch, field in ((({"fencingToken": st["fencingToken"] - 1}), "fencingToken"),
                         ({"current": {"generation": 0}}, "current.generation"),
                         ({"latestGeneration": 0}, "latestGeneration")):
        with pytest.raises(ApiException) as err:
            rts.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, rts.ns, PLURAL, "cel", {"status": patch})
        assert err.value.status == 422
        assert f"status.{field} must not decrease" in err.value.body


def test_lock_timeout_is_reported_and_retried(operators: Start, rts: Runtimes, cluster: Any,
                                             namespace: str, pod_watch: PodWatch) -> None:
    """Invariant 4 (lock budget): a Lease held elsewhere past lockSeconds gives Degraded
    LockTimeout; the handoff starts once the Lease is free, and Degraded clears."""
    op = operators("op-a")
    rts.create(runtime_manifest("locked", budgets={"lockSeconds": 2}))
    rts.wait_ready("locked", 1)
    coord = client.CoordinationV1Api(cluster.api_client)
    wait_for(lambda: not coord.read_namespaced_lease("baton-locked", namespace).spec.holder_identity,
             timeout=10, what="Lease released")
    lease = coord.read_namespaced_lease("baton-locked", namespace)
    lease.spec.holder_identity = "someone-else"
    lease.spec.lease_duration_seconds = 3600
    lease.spec.renew_time = datetime.datetime.now(datetime.timezone.utc)
    coord.replace_namespaced_lease("baton-locked", namespace, lease)
    t0 = time.monotonic()
    rts.set_image("locked", "example/tool:2")

    def lock_timeout() -> bool:
        c = rts.condition("locked", "Degraded") or {}
        return c.get("status") == "True" and c.get("reason") == "LockTimeout"

    wait_for(lock_timeout, timeout=2 + 5, what="Degraded LockTimeout")
    assert time.monotonic() - t0 <= 2 + 5
    assert rts.events_posted("locked", "LockTimeout")
    assert op.metric("baton_lock_timeouts_total") == 1
    assert rts.gen_pod("locked", 2) is None and rts.gen_pod("locked", 1) is not None
    lease = coord.read_namespaced_lease("baton-locked", namespace)
    lease.spec.holder_identity = None
    lease.spec.renew_time = None
    coord.replace_namespaced_lease("baton-locked", namespace, lease)
    rts.wait_ready("locked", 2, timeout=20)
    assert (rts.condition("locked", "Degraded") or {})["status"] == "False"
    assert pod_watch.assert_one_at_a_time("locked") == [1, 2]
    assert op.metric("baton_lock_wait_seconds_count") >= 1
