"""Generation pods: list, create, relabel, delete (with UID preconditions), force-delete."""

from __future__ import annotations

from typing import Any

from baton.k8s import client


def list_runtime_pods(namespace: str, runtime: str, runtime_uid: str) -> list[dict[str, Any]]:
    """Pods this runtime controls (label and controller ownerReference both match)."""
    resp = client.core().list_namespaced_pod(
        namespace, label_selector=f"baton.dev/runtime={runtime}", _preload_content=False
    )
    items: list[dict[str, Any]] = client.json_of(resp).get("items", [])
    owned = []
    for pod in items:
        refs = pod.get("metadata", {}).get("ownerReferences") or []
        if any(r.get("uid") == runtime_uid and r.get("controller") for r in refs):
            owned.append(pod)
    return owned


def create_pod(namespace: str, manifest: dict[str, Any]) -> str:
    created = client.core().create_namespaced_pod(namespace, manifest)  # type: ignore[arg-type]
    assert created.metadata is not None
    return str(created.metadata.uid)


def patch_pod_serving(namespace: str, name: str, uid: str, serving: bool) -> None:
    """Flip the serving label; the UID in the patch makes it fail on a same-named successor."""
    client.core().patch_namespaced_pod(
        name, namespace,
        {"metadata": {"uid": uid, "labels": {"baton.dev/serving": "true" if serving else "false"}}},
    )


def delete_pod(namespace: str, name: str, uid: str, grace_seconds: int) -> None:
    """Delete exactly this UID. 404 and a UID mismatch (409) both mean: that pod is gone."""
    body = {"gracePeriodSeconds": grace_seconds, "preconditions": {"uid": uid}}
    try:
        client.core().delete_namespaced_pod(name, namespace, body=body)  # type: ignore[arg-type]
    except client.ApiException as exc:
        if client.is_not_found(exc) or client.is_conflict(exc):
            return
        raise


def force_delete_pod(namespace: str, name: str, uid: str) -> None:
    """Abandon a stuck pod: grace 0, then strip its finalizers so it can go."""
    delete_pod(namespace, name, uid, 0)
    try:
        client.core().patch_namespaced_pod(name, namespace, {"metadata": {"uid": uid, "finalizers": None}})
    except client.ApiException as exc:
        if client.is_not_found(exc) or client.is_conflict(exc):
            return
        raise
