"""Generation pods: list, create, relabel, delete (with UID preconditions), force-delete."""

from __future__ import annotations

from typing import Any

from baton.k8s import client


def list_labelled_pods(namespace: str, runtime: str) -> list[dict[str, Any]]:
    """Pods labelled for this runtime, owned or not (the caller tells them apart). Never the
    evidence that a pod is gone: a label can be edited away; see read_pod."""
    resp = client.core().list_namespaced_pod(
        namespace, label_selector=f"baton.dev/runtime={runtime}", _preload_content=False
    )
    items: list[dict[str, Any]] = client.json_of(resp).get("items", [])
    return items


def read_pod(namespace: str, name: str) -> dict[str, Any] | None:
    """The authoritative read: a pod is gone only when this GET says 404 (or another UID)."""
    return client.read_or_none(client.core().read_namespaced_pod, name, namespace)


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
