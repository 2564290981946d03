"""Guarantees against foreign actors and bad input, proven against the real API server with the
operator as a real process: people editing labels and ownerReferences, objects that squat the
runtime's name, pods the API server refuses, status written by others, a clock that drifts.

Each test names what it proves; the watch log (PodWatch, API server order, followed by UID) is
the evidence for "never two pods at once".
"""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest
from harness.watchlog import PodWatch, WatchLog

Start = Callable[..., OperatorProcess]


def _condition(rts: Runtimes, name: str, kind: str) -> dict[str, Any]:
    return rts.condition(name, kind) or {}


def _user_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"owner": "a-person"}},
            "spec": {"containers": [{"name": "debug", "image": "example/debug:1"}]}}


def test_label_edited_away_then_template_change_never_two_pods(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """A person removes baton.dev/runtime from the serving pod (debugging), then the template
    changes: the old pod is still found (GET by name) and retired before g2 is created."""
    operators("op-a")
    rts.create(runtime_manifest("lbl", pod_annotations={"baton.dev/test-terminate-after": "3s"}))
    rts.wait_ready("lbl", 1)
    rts.core.patch_namespaced_pod("lbl", rts.ns, [{"op": "remove", "path": "/metadata/labels/baton.dev~1runtime"}])
    assert "baton.dev/runtime" not in (rts.pod("lbl").metadata.labels or {})
    rts.set_image("lbl", "example/tool:2")
    rts.wait_ready("lbl", 2, timeout=60)
    assert pod_watch.assert_one_at_a_time("lbl") == [1, 2]
    [g1_deleted] = pod_watch.deleted_gen("lbl", 1)
    [g2_added] = pod_watch.added_gen("lbl", 2)
    assert g1_deleted.resource_version < g2_added.resource_version


def test_ownerreference_removed_pod_is_never_touched_until_it_goes(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """A pod whose ownerReference was removed is no longer Baton's: not relabelled, not deleted,
    no second pod; Degraded=True NameConflict names it; once a person deletes it, g2 starts."""
    op = operators("op-a")
    rts.create(runtime_manifest("own"))
    rts.wait_ready("own", 1)
    rts.core.patch_namespaced_pod("own", rts.ns, [{"op": "remove", "path": "/metadata/ownerReferences"}])
    before = rts.pod("own")
    rts.set_image("own", "example/tool:2")
    wait_for(lambda: _condition(rts, "own", "Degraded").get("reason") == "NameConflict", timeout=15,
             what="Degraded NameConflict")
    assert before.metadata.uid in _condition(rts, "own", "Degraded")["message"]
    assert [e.type for e in rts.events_posted("own", "NameConflict")][:1] == ["Warning"]
    stays(lambda: (lambda pd: pd is not None and pd.metadata.uid == before.metadata.uid
                   and pd.metadata.deletion_timestamp is None
                   and (pd.metadata.labels or {}) == (before.metadata.labels or {}))(rts.pod("own")),
          duration=6, what="the disowned pod untouched")
    assert op.metric("baton_name_conflicts_total", kind="NameConflict") >= 1
    rts.core.delete_namespaced_pod("own", rts.ns, grace_period_seconds=0)
    rts.wait_ready("own", 2, timeout=60)
    assert pod_watch.assert_one_at_a_time("own") == [1, 2]
    wait_for(lambda: _condition(rts, "own", "Degraded").get("status") == "False", timeout=15,
             what="Degraded cleared")


def test_users_pod_with_the_runtimes_name_blocks_without_a_hot_loop(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """A pod someone else made under the runtime's name: untouched, NameConflict reported once,
    no pod create loop; the runtime proceeds once it is removed."""
    rts.core.create_namespaced_pod(rts.ns, _user_pod("squat"))
    # The kubelet (kwok) is done with it once it is Ready: from then on, only Baton could touch it.
    wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                         for c in (rts.pod("squat").status.conditions or [])), timeout=20, what="user's pod Ready")
    user_rv = rts.pod("squat").metadata.resource_version
    op = operators("op-a")
    rts.create(runtime_manifest("squat"))
    wait_for(lambda: _condition(rts, "squat", "Degraded").get("reason") == "NameConflict", timeout=15,
             what="Degraded NameConflict")
    assert "pod " + rts.ns + "/squat" in _condition(rts, "squat", "Degraded")["message"]
    rv_then = rts.get("squat")["metadata"]["resourceVersion"]
    time.sleep(6)
    assert rts.pod("squat").metadata.resource_version == user_rv, "the user's pod was touched"
    assert rts.get("squat")["metadata"]["resourceVersion"] == rv_then, "status rewritten while blocked"
    assert len(rts.events_posted("squat", "NameConflict")) == 1
    assert op.metric("baton_passes_throttled_total") == 0
    assert [e.uid for e in pod_watch.added() if e.of("squat")] == [rts.pod("squat").metadata.uid]
    rts.core.delete_namespaced_pod("squat", rts.ns, grace_period_seconds=0)
    rts.wait_ready("squat", 1, timeout=40)
    assert pod_watch.assert_one_at_a_time("squat") == [None, 1]


def test_users_service_with_the_runtimes_name_is_never_patched_or_deleted(
        operators: Start, rts: Runtimes, namespace: str) -> None:
    """With spec.service unset, a user's Service of the same name is left alone (also when the
    runtime is deleted); with spec.service set, NameConflict says so and it is still untouched."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svcu"},
           "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 81}]}}
    rts.core.create_namespaced_service(namespace, svc)
    rv = rts.core.read_namespaced_service("svcu", namespace).metadata.resource_version
    operators("op-a")
    rts.create(runtime_manifest("svcu"))
    rts.wait_ready("svcu", 1)
    rts.patch("svcu", {"spec": {"service": {"ports": [{"port": 80, "targetPort": 8080}]}}})
    wait_for(lambda: _condition(rts, "svcu", "Degraded").get("reason") == "NameConflict", timeout=15,
             what="NameConflict for the Service")
    assert "Service " + namespace + "/svcu" in _condition(rts, "svcu", "Degraded")["message"]
    rts.delete("svcu")
    wait_for(lambda: not rts.exists("svcu"), timeout=40, what="runtime deleted")
    kept = rts.core.read_namespaced_service("svcu", namespace)
    assert kept.metadata.resource_version == rv and kept.spec.selector == {"app": "theirs"}


def test_pod_the_api_server_refuses_is_reported_and_retried_boundedly(
        operators: Start, rts: Runtimes) -> None:
    """A container without an image: the CRD admits it, the API server refuses the pod.
    PodRejected quotes the API server within seconds; create attempts stay logarithmic in
    connectSeconds (counted by the operator's own metric), and deletion still completes."""
    op = operators("op-a")
    manifest = runtime_manifest("noimg", budgets={"connectSeconds": 20})
    del manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    rts.create(manifest)
    t0 = time.monotonic()
    wait_for(lambda: _condition(rts, "noimg", "Degraded").get("reason") == "PodRejected", timeout=10,
             what="Degraded PodRejected")
    assert time.monotonic() - t0 < 10
    msg = _condition(rts, "noimg", "Degraded")["message"]
    assert "image" in msg and "Required value" in msg, msg
    assert [e.type for e in rts.events_posted("noimg", "PodRejected")][:1] == ["Warning"]
    time.sleep(max(0.0, 20 - (time.monotonic() - t0)))
    attempts = op.metric("baton_pod_rejections_total")
    # Back-off 1, 2, 4, 8 s (±20 %) inside 20 s: about 5; never a loop of one a second.
    assert 3 <= attempts <= 8, attempts
    assert rts.pod("noimg") is None
    rts.delete("noimg")
    wait_for(lambda: not rts.exists("noimg"), timeout=30, what="runtime deleted")


def test_foreign_condition_and_unknown_step_do_not_stop_the_operator(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """Another tool's condition type is kept through handoffs; a step this version does not
    know (written by a newer Baton) is resumed safely; the operator keeps working."""
    operators("op-a")
    rts.create(runtime_manifest("tol"))
    st1 = rts.wait_ready("tol", 1)
    theirs = {"type": "example.com/Audited", "status": "True", "reason": "Checked", "message": "by another tool",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}
    now = "2026-11-30T00:00:00Z"
    rts.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, rts.ns, PLURAL, "tol",
        {"status": {"conditions": [*st1["conditions"], theirs],
                    "transition": {"kind": "Handoff", "trigger": "FutureTrigger", "step": "Quiescing",
                                   "from": 1, "fromPod": "tol", "fromUid": st1["current"]["uid"], "to": 2,
                                   "startedAt": now, "stepStartedAt": now}}})
    wait_for(lambda: rts.events("tol", "UnknownStep"), timeout=15, what="UnknownStep event")
    st2 = rts.wait_ready("tol", 2, timeout=60)
    assert theirs["type"] in [c["type"] for c in st2["conditions"]]
    assert pod_watch.assert_one_at_a_time("tol") == [1, 2]
    rts.set_image("tol", "example/tool:3")
    st3 = rts.wait_ready("tol", 3, timeout=60)
    assert [c for c in st3["conditions"] if c["type"] == theirs["type"]][0]["message"] == "by another tool"


def test_malformed_template_is_refused_at_admission_naming_the_field(rts: Runtimes) -> None:
    """A PodSpec field of the wrong shape (volumes: a string) is refused by the CRD, which carries
    the whole PodSpec schema, naming the field; before, it was stored and the runtime reported
    Degraded=True InvalidSpec (still the answer for objects stored before the CRD upgrade: the
    lifecycle's table tests cover it)."""
    manifest = runtime_manifest("bad")
    manifest["spec"]["template"]["spec"]["volumes"] = "not-a-list"
    with pytest.raises(ApiException) as refused:
        rts.create(manifest)
    assert refused.value.status == 422, refused.value
    assert "spec.template.spec.volumes" in str(refused.value.body), refused.value.body
    assert not rts.exists("bad")


def test_reset_removed_only_if_unchanged_and_its_wait_is_persisted(
        operators: Start, rts: Runtimes) -> None:
    """A reset seen mid-transition is persisted in status.pendingReset (with the time), so its
    bound holds across replicas."""
    operators("op-a")
    rts.create(runtime_manifest("pend", budgets={"drainSeconds": 6, "lockSeconds": 3},
                                      drain_probe={"httpGet": {"path": "/idle", "port": 8080}}))
    rts.wait_ready("pend", 1)
    rts.set_image("pend", "example/tool:2")
    wait_for(lambda: (rts.status("pend").get("transition") or {}).get("step") == "Draining", timeout=15,
             what="Draining")
    rts.annotate("pend", "baton.dev/reset", "1")
    pending = wait_for(lambda: rts.status("pend").get("pendingReset"), timeout=10, what="pendingReset persisted")
    assert pending["value"] == "1" and pending["since"]
    wait_for(lambda: rts.events("pend", "StaleReset"), timeout=15, what="StaleReset after lockSeconds")
    rts.wait_ready("pend", 2, timeout=60)
    assert "baton.dev/reset" not in (rts.get("pend")["metadata"].get("annotations") or {})
    assert "pendingReset" not in rts.status("pend")


def test_replica_with_a_clock_30s_off_never_acts_on_a_runtime_another_holds(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, cluster: Any, namespace: str) -> None:
    """Lease expiry is judged by each replica's own monotonic clock: a replica whose wall clock
    runs 30 s ahead (or behind) does not take a Lease the holder keeps renewing."""
    a = operators("op-a")
    rts.create(runtime_manifest("skew", budgets={"drainSeconds": 12},
                                      drain_probe={"httpGet": {"path": "/idle", "port": 8080}}))
    rts.wait_ready("skew", 1)
    ahead = operators("op-ahead", env={"BATON_FAULT_CLOCK_OFFSET_SECONDS": "30"})
    behind = operators("op-behind", env={"BATON_FAULT_CLOCK_OFFSET_SECONDS": "-30"})
    rts.set_image("skew", "example/tool:2")
    coord = client.CoordinationV1Api(cluster.api_client)
    wait_for(lambda: (rts.status("skew").get("transition") or {}).get("step") == "Draining", timeout=20,
             what="Draining")
    holder = rts.status("skew")["holder"]
    holders: set[str] = set()

    def lease_holder() -> str | None:
        try:
            return coord.read_namespaced_lease("baton-skew", namespace).spec.holder_identity
        except ApiException:
            return None
    deadline = time.monotonic() + 10  # two Lease durations, inside the 12 s drain
    while time.monotonic() < deadline:
        h = lease_holder()
        if h:
            holders.add(h)
        time.sleep(0.2)
    assert holders == {holder}, f"the Lease changed hands while {holder} renewed it: {holders}"
    rts.wait_ready("skew", 2, timeout=60)
    assert pod_watch.assert_one_at_a_time("skew") == [1, 2]
    for op in (a, ahead, behind):
        assert "fenced out by the API server" not in op.log_text()


def test_an_owned_pod_no_view_selects_is_retired_before_the_runtime_goes(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, cluster: Any, namespace: str) -> None:
    """A late create whose runtime label was then edited off (found by the model check): a pod of
    the runtime's name, owned by it, that no label-selected view lists and no status names. When
    the runtime is deleted, the GET by name before its finalizer goes (ConfirmNoPod) finds it:
    Baton retires it while the runtime still exists; the garbage collector is not left to do it."""
    operators("op-a")
    rt = rts.create(runtime_manifest("unseen", suspend=True))
    wait_for(lambda: _condition(rts, "unseen", "Suspended").get("status") == "True", timeout=30,
             what="unseen Suspended")
    rts.core.create_namespaced_pod(rts.ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "unseen", "labels": {"app": "unseen"}, "ownerReferences": [{
            "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "name": "unseen",
            "uid": rt["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "server", "image": "example/tool:1"}]}})
    runtimes = WatchLog(cluster.api_client, namespace, "toolruntimes")
    try:
        rts.delete("unseen")
        wait_for(lambda: not rts.exists("unseen"), timeout=60, what="unseen removed")
        wait_for(lambda: any(t == "DELETED" for t, _, _ in runtimes.snapshot()), timeout=10,
                 what="the runtime's DELETED in the watch log")
        [rt_deleted] = [rv for t, rv, _ in runtimes.snapshot() if t == "DELETED"]
    finally:
        runtimes.stop()
    wait_for(lambda: pod_watch.deleted("unseen"), timeout=30, what="the unseen pod's DELETED")
    terminating = [e for e in pod_watch.snapshot() if e.name == "unseen" and e.deleting]
    assert terminating and terminating[0].resource_version < rt_deleted, (
        f"pod deleted only after its runtime (rv {rt_deleted}): the garbage collector, not Baton")
    assert pod_watch.deleted("unseen")[0].resource_version < rt_deleted
    assert rts.pod("unseen") is None


def test_a_late_create_landing_with_no_pod_standing_is_retired_before_the_next_create(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """The real-plane half of model seed 700018: a create held in the network lands after its
    transition ended (the runtime suspended: no pod stands), and its runtime label is edited off,
    so no view lists it and no status names it. Resumed, Baton's create is refused by name (409);
    it reads the name, retires that pod by UID, and only then creates the next generation."""
    op = operators("op-a")
    rt = rts.create(runtime_manifest("landed"))
    rts.wait_ready("landed", 1)
    rts.patch("landed", {"spec": {"suspend": True}})
    wait_for(lambda: _condition(rts, "landed", "Suspended").get("status") == "True" and not rts.pods("landed")
             and rts.pod("landed") is None, timeout=30, what="landed suspended with no pod")
    stranger = rts.core.create_namespaced_pod(rts.ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "landed", "labels": {"app": "landed"}, "ownerReferences": [{
            "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "name": "landed",
            "uid": rt["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "server", "image": "example/tool:1"}]}})
    uid = stranger.metadata.uid
    rts.patch("landed", {"spec": {"suspend": False}})
    st = rts.wait_ready("landed", 2, timeout=60)
    assert st["current"]["uid"] != uid
    assert "pod landed already exists: create refused by the API server" in op.log_text(), (
        "the create was not refused by name: this test did not reach the path it is about")
    assert uid in {e.uid for e in pod_watch.deleted("landed")}
    # In the API server's order: g1 DELETED, the landed pod ADDED and DELETED, then g2 ADDED.
    assert pod_watch.assert_one_at_a_time("landed") == [1, None, 2]


def test_a_lease_without_its_label_is_reported_naming_it_and_taken_once_labelled(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    """The Lease views select on baton.dev/runtime: a Lease whose label a person removed is
    invisible, so each pass created it, met AlreadyExists and backed off, forever and silently.
    Now Degraded=True LeaseOutsideView names the Lease and the command that fixes it (issue 23)."""
    operators("op-a")
    rts.create(runtime_manifest("lbl"))
    rts.wait_ready("lbl", 1)
    coord = client.CoordinationV1Api(cluster.api_client)
    wait_for(lambda: not coord.read_namespaced_lease("baton-lbl", namespace).spec.holder_identity,
             timeout=30, what="the Lease released once idle")
    coord.patch_namespaced_lease("baton-lbl", namespace, {"metadata": {"labels": {"baton.dev/runtime": None}}})
    rts.set_image("lbl", "example/tool:2")

    def degraded() -> dict[str, Any] | None:
        c = rts.condition("lbl", "Degraded") or {}
        return c if c.get("reason") == "LeaseOutsideView" and c.get("status") == "True" else None
    cond = wait_for(degraded, timeout=60, what="Degraded LeaseOutsideView")
    assert f"Lease {namespace}/baton-lbl exists with no label baton.dev/runtime" in cond["message"], cond
    assert f"kubectl -n {namespace} label lease baton-lbl baton.dev/runtime=lbl" in cond["message"], cond
    events = client.CoreV1Api(cluster.api_client).list_namespaced_event(
        namespace, field_selector="involvedObject.name=lbl,reason=LeaseOutsideView").items
    assert events and "baton-lbl" in events[0].message
    assert rts.status("lbl")["current"]["generation"] == 1, "nothing handed off without the Lease"
    # The fix the message names: the Lease is seen again, taken, and the handoff goes on.
    coord.patch_namespaced_lease("baton-lbl", namespace, {"metadata": {"labels": {"baton.dev/runtime": "lbl"}}})
    rts.wait_ready("lbl", 2, timeout=90)
    wait_for(lambda: (rts.condition("lbl", "Degraded") or {}).get("reason") == "Healthy", timeout=30,
             what="Degraded cleared once the Lease was acquired")
