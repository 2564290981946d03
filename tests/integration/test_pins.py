"""ToolRuntimeClaim pins, against the real API server with the operator as a real process: a
pinned generation is not retired (admission not stopped, the pod keeps serving) until its claim
is Released; past budgets.pinSeconds, RetirementBlocked with a Warning event and a metric, and it
keeps serving; a person's force-retire naming the generation proceeds, a stale one is refused.
The watch log (PodWatch, API server order) is the evidence of when the old pod went.
"""
from __future__ import annotations

from typing import Any, Callable

from kubernetes import client

from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, VERSION, Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]
PLURAL = "toolruntimeclaims"


def _claims(rts: Runtimes) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(rts.core.api_client)


def make_claim(rts: Runtimes, name: str, *, runtime: str, generation: int, state: str,
               fork: str = "plan-1", branch: str = "b", references: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, "generation": generation, "fork": fork,
                            "branch": branch, "state": state}
    if references:
        spec["references"] = list(references)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntimeClaim", "metadata": {"name": name},
            "spec": spec}
    created: dict[str, Any] = _claims(rts).create_namespaced_custom_object(GROUP, VERSION, rts.ns, PLURAL, body)
    return created


def set_state(rts: Runtimes, name: str, state: str) -> dict[str, Any]:
    patched: dict[str, Any] = _claims(rts).patch_namespaced_custom_object(
        GROUP, VERSION, rts.ns, PLURAL, name, {"spec": {"state": state}})
    return patched


def read_claim(rts: Runtimes, name: str) -> dict[str, Any]:
    got: dict[str, Any] = _claims(rts).get_namespaced_custom_object(GROUP, VERSION, rts.ns, PLURAL, name)
    return got


def _cond(rts: Runtimes, name: str, kind: str) -> dict[str, Any]:
    return rts.condition(name, kind) or {}


def serving(rts: Runtimes, runtime: str, uid: str) -> bool:
    pod = rts.pod(runtime)
    return (pod is not None and pod.metadata.uid == uid and pod.metadata.deletion_timestamp is None
            and (pod.metadata.labels or {}).get("baton.dev/serving") == "true")


def test_pinned_retire_waits_then_proceeds_when_the_claim_is_released(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    operators("op-a")
    rts.create(runtime_manifest("pin", budgets={"pinSeconds": 300}))
    rts.wait_ready("pin", 1)
    g1 = rts.pod("pin").metadata.uid
    make_claim(rts, "plan-1-b", runtime="pin", generation=1, state="CommitEligible")
    wait_for(lambda: read_claim(rts, "plan-1-b").get("status", {}).get("phase") == "Bound", timeout=15,
             what="claim Bound")
    rts.set_image("pin", "example/tool:2")
    wait_for(lambda: _cond(rts, "pin", "Progressing").get("reason") == "AwaitingPinRelease", timeout=15,
             what="Progressing AwaitingPinRelease")
    assert "plan-1-b" in _cond(rts, "pin", "Progressing")["message"]
    assert _cond(rts, "pin", "Ready").get("status") == "True"
    stays(lambda: serving(rts, "pin", g1), duration=5, what="generation 1 serving while pinned")
    assert not pod_watch.added_gen("pin", 2) and not pod_watch.deleted_gen("pin", 1)

    released = set_state(rts, "plan-1-b", "Released")
    rts.wait_ready("pin", 2, timeout=60)
    [g1_deleted] = pod_watch.deleted_gen("pin", 1)
    assert g1_deleted.resource_version > int(released["metadata"]["resourceVersion"]), (
        "generation 1's pod went before its claim was released")
    assert pod_watch.assert_one_at_a_time("pin") == [1, 2]
    # Generation 1 is gone: its claim is marked Stale (it pins nothing any more).
    wait_for(lambda: read_claim(rts, "plan-1-b").get("status", {}).get("phase") == "Stale", timeout=15,
             what="claim Stale")


def test_pin_past_pin_seconds_blocks_then_force_retire_proceeds_and_a_stale_one_is_refused(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, namespace: str) -> None:
    op = operators("op-a")
    rts.create(runtime_manifest("blk", budgets={"pinSeconds": 3}))
    rts.wait_ready("blk", 1)
    g1 = rts.pod("blk").metadata.uid
    make_claim(rts, "plan-2-a", runtime="blk", generation=1, state="Committed", fork="plan-2", branch="a")
    rts.set_image("blk", "example/tool:2")
    wait_for(lambda: _cond(rts, "blk", "RetirementBlocked").get("status") == "True", timeout=30,
             what="RetirementBlocked")
    blocked = _cond(rts, "blk", "RetirementBlocked")
    assert blocked["reason"] == "PinnedByCommitEligibleClaim" and "plan-2-a" in blocked["message"]
    assert [e.type for e in rts.events_posted("blk", "PinnedByCommitEligibleClaim")] == ["Warning"]
    wait_for(lambda: op.metric("baton_retirements_blocked", namespace=namespace, runtime="blk") == 1, timeout=10,
             what="baton_retirements_blocked 1")
    assert op.metric("baton_retirements_blocked_total") == 1
    assert _cond(rts, "blk", "Ready").get("status") == "True"
    stays(lambda: serving(rts, "blk", g1), duration=3, what="generation 1 keeps serving while blocked")

    # A force-retire naming another generation is refused like a stale reset.
    rts.annotate("blk", "baton.dev/force-retire", "5")
    wait_for(lambda: "baton.dev/force-retire" not in (rts.get("blk")["metadata"].get("annotations") or {}),
             timeout=15, what="stale force-retire removed")
    assert [e.type for e in rts.events_posted("blk", "StaleForceRetire")] == ["Warning"]
    assert serving(rts, "blk", g1) and _cond(rts, "blk", "RetirementBlocked").get("status") == "True"

    rts.annotate("blk", "baton.dev/force-retire", "1")
    rts.wait_ready("blk", 2, timeout=60)
    assert pod_watch.assert_one_at_a_time("blk") == [1, 2]
    [entry] = [h for h in rts.status("blk").get("history", []) if h["generation"] == 1]
    assert "force-retired past pins (claims plan-2-a)" in entry.get("message", "")
    assert [e.type for e in rts.events_posted("blk", "ForceRetired")] == ["Normal"]
    assert _cond(rts, "blk", "RetirementBlocked").get("status") == "False"
    wait_for(lambda: op.metric("baton_retirements_blocked", namespace=namespace, runtime="blk") == 0, timeout=10,
             what="baton_retirements_blocked 0")


def test_unreferenced_speculative_and_abandoned_claims_never_delay_a_handoff(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    operators("op-a")
    rts.create(runtime_manifest("fast", budgets={"pinSeconds": 300}))
    rts.wait_ready("fast", 1)
    # Claims on generation 1 that pin nothing: speculative and abandoned branches, one speculative
    # branch referencing an abandoned one (only a commit-eligible or committed reference pins).
    make_claim(rts, "fk-probe", runtime="fast", generation=1, state="Speculative", fork="fk", branch="probe")
    make_claim(rts, "fk-old", runtime="fast", generation=1, state="Abandoned", fork="fk", branch="old")
    make_claim(rts, "fk-plan", runtime="fast", generation=1, state="Speculative", fork="fk", branch="plan",
               references=["probe", "old"])
    for name in ("fk-probe", "fk-old", "fk-plan"):
        wait_for(lambda n=name: read_claim(rts, n).get("status", {}).get("phase") == "Bound", timeout=15,  # type: ignore[misc]
                 what=f"claim {name} Bound")
    rts.set_image("fast", "example/tool:2")
    rts.wait_ready("fast", 2, timeout=60)
    assert pod_watch.assert_one_at_a_time("fast") == [1, 2]
    assert rts.events("fast", "AwaitingPinRelease") == [], "an unreferenced claim held the retire"
    assert _cond(rts, "fast", "RetirementBlocked").get("status") != "True"
    [entry] = [h for h in rts.status("fast").get("history", []) if h["generation"] == 1]
    assert "pin" not in entry.get("message", "")


def test_deleting_a_pinned_runtime_waits_for_the_pin_then_leaves_nothing(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    operators("op-a")
    rts.create(runtime_manifest("del", service=True, budgets={"pinSeconds": 300}))
    rts.wait_ready("del", 1)
    g1 = rts.pod("del").metadata.uid
    # The abandoned probe branch's effect is referenced by the planner's commit-eligible claim:
    # generation 1 is pinned although the claim that names it is abandoned.
    make_claim(rts, "fd-probe", runtime="del", generation=1, state="Abandoned", fork="fd", branch="probe")
    make_claim(rts, "fd-plan", runtime="del", generation=1, state="CommitEligible", fork="fd", branch="plan",
               references=["probe"])
    wait_for(lambda: read_claim(rts, "fd-plan").get("status", {}).get("phase") == "Bound", timeout=15,
             what="claim Bound")
    rts.delete("del")
    wait_for(lambda: _cond(rts, "del", "Progressing").get("reason") == "AwaitingPinRelease", timeout=15,
             what="deletion AwaitingPinRelease")
    message = _cond(rts, "del", "Progressing")["message"]
    assert "fd-plan" in message and "probe" in message
    assert rts.get("del")["metadata"].get("deletionTimestamp")
    stays(lambda: serving(rts, "del", g1), duration=5, what="generation 1 serving while its deletion is pinned")
    assert not pod_watch.deleted_gen("del", 1)

    released = set_state(rts, "fd-plan", "Released")
    wait_for(lambda: not rts.exists("del"), timeout=60, what="runtime deleted")
    [g1_deleted] = pod_watch.deleted_gen("del", 1)
    assert g1_deleted.resource_version > int(released["metadata"]["resourceVersion"]), (
        "generation 1's pod went before the referencing claim was released")
    assert rts.pod("del") is None and rts.pods("del") == []
    assert pod_watch.assert_one_at_a_time("del") == [1]
    services = rts.core.list_namespaced_service(rts.ns, label_selector="baton.dev/runtime=del").items
    assert services == []
