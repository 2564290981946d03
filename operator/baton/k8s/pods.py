"""Generation pods: read by name, create, relabel, delete (UID preconditions), force-delete."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "pods", ("get", "create", "patch", "delete")),)


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("v1", "pods", namespace, name)


async def read_pod(namespace: str, name: str) -> dict[str, Any] | None:
    """The authoritative read: a pod is gone only when this GET says 404 (or another UID)."""
    return await client.work().get_or_none(_path(namespace, name))


# Strict field validation: a field the API server does not know (a typo the CRD schema let
# through, or a field of a newer Kubernetes than the cluster's) is refused with a 400 naming it,
# which the caller reports as PodRejected, instead of being dropped without a word.
CREATE_QUERY = {"fieldValidation": "Strict"}


async def create_pod(namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = await client.work().request("POST", _path(namespace), body=manifest,
                                                          query=CREATE_QUERY)
    return created


async def patch_pod_serving(namespace: str, name: str, uid: str, serving: bool) -> dict[str, Any] | None:
    """Flip the serving label; the UID in the patch makes it fail on a same-named successor.

    Stopping admission on a pod that is gone (404, or the name now holds another UID) has nothing
    left to do: None. Starting it there fails."""
    body = {"metadata": {"uid": uid, "labels": {names.LABEL_SERVING: "true" if serving else "false"}}}
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", _path(namespace, name), body=body, content_type="application/merge-patch+json")
    except api.ApiError as exc:
        if not serving and (exc.status == 404 or api.is_uid_mismatch(exc)):
            return None
        raise
    return patched


async def delete_pod(namespace: str, name: str, uid: str, grace_seconds: int) -> dict[str, Any] | None:
    """Delete exactly this UID. 404 and a UID mismatch (409) both mean: that pod is gone."""
    body = {"gracePeriodSeconds": grace_seconds, "preconditions": {"uid": uid}}
    try:
        deleted: dict[str, Any] = await client.work().request("DELETE", _path(namespace, name), body=body)
        return deleted
    except api.ApiError as exc:
        if exc.status in (404, 409):
            return None
        raise


async def force_delete_pod(namespace: str, name: str, uid: str) -> None:
    """Abandon a stuck pod: grace 0, then strip its finalizers so it can go."""
    await delete_pod(namespace, name, uid, 0)
    try:
        await client.work().request("PATCH", _path(namespace, name),
                                    body={"metadata": {"uid": uid, "finalizers": None}},
                                    content_type="application/merge-patch+json")
    except api.ApiError as exc:
        if exc.status == 404 or api.is_uid_mismatch(exc):
            return  # that UID is gone
        raise
