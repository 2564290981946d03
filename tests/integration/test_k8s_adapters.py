"""baton.k8s against the real API server: what each of its answers means to Baton.

UID guards are the point: a write meant for one object must never land on a same-named successor,
and "that object is gone" must be told apart from a real failure. The API server's answers are not
the ones the docs suggest everywhere (a merge patch's metadata.uid on a successor: 422, not 409;
on a status subresource: ignored), so each guard is checked here, not assumed. The serving flip
is the first action after a handoff is persisted; when the pod is already gone (a lost pod: this
made test_lifecycle_faults.py::test_lost_pod_is_handed_off_to_a_new_number flaky in CI) stopping
its admission has nothing left to do and must not fail the plan.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from kubernetes import client as k8s

from baton.k8s import api, claims, client, pods, services
from baton.model import names
from dev.wait import wait_for
from harness.cluster import Cluster
from harness.kwok import pod_manifest

T = TypeVar("T")


def run_with_client(cluster: Cluster, call: Callable[[], Awaitable[T]]) -> T:
    """Run one adapter call with Baton's work client pointed at the test cluster."""
    async def body() -> T:
        client._WORK = api.Api(cluster.api_client.configuration, name="work", pool_size=2)
        try:
            return await call()
        finally:
            await client.stop()
    return asyncio.run(body())


def serving_label(core: k8s.CoreV1Api, ns: str, name: str) -> str | None:
    labels: dict[str, str] = core.read_namespaced_pod(name, ns).metadata.labels or {}
    return labels.get("baton.dev/serving")


def test_serving_flip_follows_the_uid_and_stopping_a_gone_pod_is_done(
        cluster: Cluster, namespace: str, kwok_nodes: None) -> None:
    core = k8s.CoreV1Api(cluster.api_client)
    created = core.create_namespaced_pod(namespace, pod_manifest("tool", labels={"baton.dev/serving": "true"}))
    uid = created.metadata.uid

    # Another UID than the pod's (the name now holds a successor): refused, the label untouched;
    # stopping admission of the UID meant is done (it is gone), starting it is an error.
    assert run_with_client(cluster, lambda: pods.patch_pod_serving(namespace, "tool", "other-uid", False)) is None
    assert serving_label(core, namespace, "tool") == "true"
    with pytest.raises(api.ApiError) as refused:
        run_with_client(cluster, lambda: pods.patch_pod_serving(namespace, "tool", "other-uid", True))
    assert api.is_uid_mismatch(refused.value), refused.value
    assert serving_label(core, namespace, "tool") == "true"

    # The pod's own UID: flipped.
    flipped: dict[str, Any] | None = run_with_client(
        cluster, lambda: pods.patch_pod_serving(namespace, "tool", uid, False))
    assert flipped is not None and flipped["metadata"]["labels"]["baton.dev/serving"] == "false"
    assert serving_label(core, namespace, "tool") == "false"

    # Gone: stopping admission is done (None); starting it is an error naming the 404.
    core.delete_namespaced_pod("tool", namespace, grace_period_seconds=0)
    wait_for(lambda: not core.list_namespaced_pod(namespace, field_selector="metadata.name=tool").items,
             timeout=30, what="pod tool gone")
    assert run_with_client(cluster, lambda: pods.patch_pod_serving(namespace, "tool", uid, False)) is None
    with pytest.raises(api.ApiError) as missing:
        run_with_client(cluster, lambda: pods.patch_pod_serving(namespace, "tool", uid, True))
    assert missing.value.status == 404


def test_force_delete_never_strips_a_successors_finalizers(
        cluster: Cluster, namespace: str, kwok_nodes: None) -> None:
    core = k8s.CoreV1Api(cluster.api_client)
    core.create_namespaced_pod(namespace, pod_manifest("tool", finalizers=["example.com/hold"]))
    # A force delete of a UID the name does not hold: no error, the pod holding the name untouched.
    run_with_client(cluster, lambda: pods.force_delete_pod(namespace, "tool", "other-uid"))
    pod = core.read_namespaced_pod("tool", namespace)
    assert pod.metadata.deletion_timestamp is None and pod.metadata.finalizers == ["example.com/hold"]
    # Its own UID: deleted and its finalizers stripped, so it goes.
    run_with_client(cluster, lambda: pods.force_delete_pod(namespace, "tool", pod.metadata.uid))
    wait_for(lambda: not core.list_namespaced_pod(namespace, field_selector="metadata.name=tool").items,
             timeout=30, what="pod tool gone")


def test_service_patch_of_a_gone_uid_is_not_owned(cluster: Cluster, namespace: str) -> None:
    core = k8s.CoreV1Api(cluster.api_client)
    manifest = {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "tool", "labels": {"baton.dev/runtime": "tool"}},
                "spec": {"selector": {"app": "tool"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    core.create_namespaced_service(namespace, manifest)
    with pytest.raises(services.NotOwned):
        run_with_client(cluster, lambda: services.apply_service(namespace, manifest, uid="other-uid"))
    assert core.read_namespaced_service("tool", namespace).metadata.labels == {"baton.dev/runtime": "tool"}


def test_claim_phase_is_written_to_that_uid_only(cluster: Cluster, namespace: str, crd: None) -> None:
    custom = k8s.CustomObjectsApi(cluster.api_client)
    group, version, plural = names.GROUP, names.VERSION, names.CLAIM_PLURAL
    claim = {"apiVersion": names.API_VERSION, "kind": "ToolRuntimeClaim", "metadata": {"name": "c1"},
             "spec": {"runtimeRef": {"name": "tool"}, "generation": 1, "fork": "f", "branch": "a",
                      "state": "Speculative"}}
    first = custom.create_namespaced_custom_object(group, version, namespace, plural, claim)

    def status() -> Any:
        return custom.get_namespaced_custom_object(group, version, namespace, plural, "c1").get("status")

    def write(uid: str, phase: str) -> Any:
        return run_with_client(cluster, lambda: claims.patch_claim_status(
            namespace, "c1", uid=uid, status_patch={"phase": phase, "message": f"{phase} by the test"}))

    assert write(first["metadata"]["uid"], "Bound") is not None
    assert status() == {"phase": "Bound", "message": "Bound by the test"}
    # Deleted and created again under the same name: a write meant for the first is refused.
    custom.delete_namespaced_custom_object(group, version, namespace, plural, "c1")
    custom.create_namespaced_custom_object(group, version, namespace, plural, claim)
    assert write(first["metadata"]["uid"], "Stale") is None
    assert status() is None
    # Gone: None. A status the CRD refuses is an error that says which field.
    custom.delete_namespaced_custom_object(group, version, namespace, plural, "c1")
    assert write(first["metadata"]["uid"], "Stale") is None
    second = custom.create_namespaced_custom_object(group, version, namespace, plural, claim)
    with pytest.raises(api.ApiError) as invalid:
        write(second["metadata"]["uid"], "Waiting")
    assert invalid.value.status == 422 and "status.phase" in invalid.value.message
