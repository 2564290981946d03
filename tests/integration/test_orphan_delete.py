"""`kubectl delete --cascade=orphan` finishes (issue 23): the retiring pod, disowned, is left in
place and recorded Orphaned, never waited on."""
from __future__ import annotations

from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


def test_an_orphaning_delete_finishes_and_leaves_the_pod(cluster: Any, operators: Start, rts: Runtimes,
                                                         namespace: str) -> None:
    operators("op-a")
    # The probe never says idle (the pod's IP is outside the operator's allowed CIDRs: nothing is
    # dialled), so the deletion's retire sits in Draining for drainSeconds unless it stops waiting.
    rts.create(runtime_manifest("orph", drain_probe={"httpGet": {"path": "/idle", "port": 8080}},
                                budgets={"drainSeconds": 120, "cleanupSeconds": 120}))
    uid = rts.wait_ready("orph", 1)["current"]["uid"]
    cluster.kubectl("delete", "trt", "orph", "-n", namespace, "--cascade=orphan", "--wait=false")
    def deleting_or_gone() -> bool:
        # The garbage collector may strip the ownerReference before Baton's first pass: then the
        # deletion finishes at once, and the runtime is gone before this looks.
        try:
            return (rts.status("orph").get("transition") or {}).get("kind") == "Delete"
        except ApiException as e:
            if e.status == 404:
                return True
            raise

    wait_for(deleting_or_gone, timeout=20, what="the Delete retire under way (or already finished)")
    # The garbage collector strips the ownerReference (orphan finalizer); by hand too, in case
    # Baton's retire reached the pod first.
    try:
        rts.core.patch_namespaced_pod("orph", namespace, {"metadata": {"ownerReferences": None}})
    except ApiException as e:
        if e.status != 404:
            raise

    def runtime_gone() -> bool:
        try:
            rts.get("orph")
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(runtime_gone, timeout=30, what="the runtime gone (far below drainSeconds=120)")
    pod = rts.core.read_namespaced_pod("orph", namespace)
    assert pod.metadata.uid == uid and pod.metadata.deletion_timestamp is None, "the orphaned pod is left in place"
    assert not pod.metadata.owner_references
