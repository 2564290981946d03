"""Deleting a namespace that holds a running ToolRuntime finishes (issue 23).

The namespace controller deletes the runtime's Lease at once; every create in a terminating
namespace is refused (NamespaceLifecycle admission), the Lease's included, so a deletion that
waited for the Lease waited forever and the namespace stayed Terminating on baton.dev/retire.
Nothing can start a generation there either (pod creates are refused for everyone), so the
deletion finishes without the Lease."""
from __future__ import annotations

from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


def test_deleting_a_namespace_with_running_runtimes_finishes_and_leaves_nothing(
        cluster: Any, operators: Start, make_namespace: Callable[[], str]) -> None:
    ns = make_namespace()
    rts = Runtimes(cluster.api_client, ns)
    op = operators("op-a", namespaces=[ns])
    budgets = {"drainSeconds": 2, "terminationGraceSeconds": 1, "cleanupSeconds": 10}
    rts.create(runtime_manifest("with-svc", service=True, budgets=budgets))
    rts.create(runtime_manifest("plain", budgets=budgets))
    uids = {name: rts.wait_ready(name, 1)["current"]["uid"] for name in ("with-svc", "plain")}
    core = client.CoreV1Api(cluster.api_client)
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    # The budgets bound it: drain + grace + cleanup, the namespace controller's own pauses (it
    # retries a namespace with content left every few seconds), and a pass's back-off.
    wait_for(gone, timeout=2 + 1 + 10 + 45, interval=1, what=f"namespace {ns} gone")
    assert not [p for p in core.list_pod_for_all_namespaces(label_selector="baton.dev/runtime").items
                if p.metadata.uid in uids.values()], "a generation pod outlived its namespace"
    assert "because it is being terminated" in op.log_tail(400)
