"""The periodic resync (BATON_RESYNC_SECONDS): a wake-up for what no watch event reports.

A held CleanupFailed waits for an event (its pod going, or a person). A pod whose labels were
edited away has left every label-selected view, so its going sends Baton no event at all; only
the resync's pass, reading the pod by name, sees it gone."""
from __future__ import annotations

from typing import Any, Callable

from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]
RESYNC = 5


def test_a_cleanup_failure_whose_pod_lost_its_label_notices_the_pod_going_within_the_resync(
        operators: Start, rts: Runtimes, namespace: str) -> None:
    op = operators("op-a", env={"BATON_RESYNC_SECONDS": str(RESYNC)})
    rts.create(runtime_manifest("stuck", budgets={"cleanupSeconds": 4}))
    g1_uid = rts.wait_ready("stuck", 1)["current"]["uid"]
    rts.core.patch_namespaced_pod("stuck", namespace, {"metadata": {"finalizers": ["test.baton.dev/hold"]}})
    rts.set_image("stuck", "example/tool:2")

    def failed() -> dict[str, Any] | None:
        c = rts.condition("stuck", "CleanupFailed")
        return c if c and c["status"] == "True" else None

    wait_for(failed, timeout=4 + 5 + 10, what="CleanupFailed=True")
    # The pod leaves the label-selected view, then goes: no watch of Baton's reports either.
    rts.core.patch_namespaced_pod("stuck", namespace, {"metadata": {"labels": {"baton.dev/runtime": None}}})
    rts.core.patch_namespaced_pod("stuck", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: not [p for p in rts.core.list_namespaced_pod(namespace).items if p.metadata.uid == g1_uid],
             timeout=10, what="g1's pod gone")
    # Within two periods (a wake-up is drawn anywhere in the next period) plus the pass itself.
    st2 = rts.wait_ready("stuck", 2, timeout=2 * RESYNC + 15)
    assert st2["history"][0]["uid"] == g1_uid
    cond = rts.condition("stuck", "CleanupFailed")
    assert cond is not None and cond["status"] == "False", cond
    assert op.metric("baton_resyncs_total") >= 1
