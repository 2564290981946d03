"""`kubectl baton release`: what to run when no operator manages a namespace's runtimes any more
(`helm uninstall`, or the namespace removed from `watch.namespaces`) (issue 23).

Without an operator, nothing removes `baton.dev/retire`: a deleted ToolRuntime, and so its
namespace, stays Terminating for good. The verb removes the finalizer; the namespace controller
and the garbage collector then remove the runtimes, their pods and Services. docs/runbooks.md,
"Removing Baton from a namespace"."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


def _plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", cluster.kubeconfig], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def _namespace_gone(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespace(ns)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def test_a_namespace_left_without_an_operator_is_deleted_after_release(
        cluster: Any, operators: Start, make_namespace: Callable[[], str]) -> None:
    ns, kept = make_namespace(), make_namespace()
    rts, kept_rts = Runtimes(cluster.api_client, ns), Runtimes(cluster.api_client, kept)
    op = operators("op-a", namespaces=[ns, kept])
    rts.create(runtime_manifest("with-svc", service=True))
    rts.create(runtime_manifest("plain"))
    kept_rts.create(runtime_manifest("other"))
    uids = {name: rts.wait_ready(name, 1)["current"]["uid"] for name in ("with-svc", "plain")}
    kept_rts.wait_ready("other", 1)
    custom = client.CustomObjectsApi(cluster.api_client)
    core = client.CoreV1Api(cluster.api_client)

    # The operator goes (helm uninstall; or it no longer watches `ns`), the namespace is deleted.
    op.signal(signal.SIGTERM)
    assert op.wait_exit(30) == 0, op.log_tail()
    core.delete_namespace(ns)

    def stranded() -> bool:
        rt = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "plain")
        return bool(rt["metadata"].get("deletionTimestamp")) and "baton.dev/retire" in rt["metadata"]["finalizers"]
    # The namespace controller deletes content after its own pause, and retries a namespace with
    # content left at growing intervals: generous on a loaded machine.
    try:
        wait_for(stranded, timeout=120, interval=1, what="the runtime deleted with the namespace")
    except Exception:
        print(core.read_namespace(ns).status)
        raise
    # Nothing removes the finalizer: the namespace stays Terminating (the defect the verb answers).
    stays(lambda: not _namespace_gone(core, ns), duration=8, what=f"namespace {ns} Terminating")

    refused = _plugin(cluster, "release", "-n", ns)
    assert refused.returncode == 1 and "pass --yes" in refused.stderr, refused
    res = _plugin(cluster, "release", "-n", ns, "--yes")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == [f"toolruntime {ns}/plain released", f"toolruntime {ns}/with-svc released"]

    wait_for(lambda: _namespace_gone(core, ns), timeout=90, interval=1, what=f"namespace {ns} gone")
    left = [p for p in core.list_pod_for_all_namespaces(label_selector="baton.dev/runtime").items
            if p.metadata.uid in uids.values()]
    assert not left, f"a generation pod outlived its namespace: {left}"
    # -n touched only its namespace: the other runtime still carries the finalizer.
    other = custom.get_namespaced_custom_object(GROUP, VERSION, kept, PLURAL, "other")
    assert "baton.dev/retire" in other["metadata"]["finalizers"]

    # Released again: nothing left to do, said on stderr, exit 0.
    again = _plugin(cluster, "release", "other", "-n", kept, "--yes", "-o", "json")
    assert again.returncode == 0 and '"name": "other"' in again.stdout, again
    assert "baton.dev/retire" not in (custom.get_namespaced_custom_object(
        GROUP, VERSION, kept, PLURAL, "other")["metadata"].get("finalizers") or [])
    none_left = _plugin(cluster, "release", "-n", kept, "--yes")
    assert (none_left.returncode, none_left.stdout) == (0, "")
    assert f"No toolruntime holds Baton's finalizer in {kept} namespace." in none_left.stderr


def test_a_released_runtime_deleted_takes_its_pod_and_service_with_it(
        cluster: Any, operators: Start, rts: Runtimes, namespace: str) -> None:
    op = operators("op-a")
    rts.create(runtime_manifest("svc", service=True))
    uid = rts.wait_ready("svc", 1)["current"]["uid"]
    op.signal(signal.SIGTERM)
    assert op.wait_exit(30) == 0, op.log_tail()
    res = _plugin(cluster, "release", "svc", "-n", namespace, "--yes")
    assert (res.returncode, res.stdout) == (0, f"toolruntime {namespace}/svc released\n"), res.stderr
    custom = client.CustomObjectsApi(cluster.api_client)
    core = client.CoreV1Api(cluster.api_client)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "svc")

    def gone() -> bool:
        pods = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.uid == uid]
        services = [s for s in core.list_namespaced_service(namespace).items if s.metadata.name == "svc"]
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "svc")
            return False
        except ApiException as e:
            if e.status != 404:
                raise
        return not pods and not services
    wait_for(gone, timeout=60, interval=1, what="the runtime, its pod and its Service gone")
