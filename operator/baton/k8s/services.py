"""The runtime's Service: create, patch (only the one this runtime owns), delete by UID."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "services", ("get", "create", "patch", "delete")),)


class NotOwned(Exception):
    """A Service with the runtime's name exists and the runtime does not own it."""


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("v1", "services", namespace, name)


async def read_service(namespace: str, name: str) -> dict[str, Any] | None:
    return await client.work().get_or_none(_path(namespace, name))


async def apply_service(namespace: str, manifest: dict[str, Any], *, uid: str | None) -> dict[str, Any]:
    """Create the Service, or patch the one this runtime owns (`uid`, as observed)."""
    name = manifest["metadata"]["name"]
    if uid is None:
        try:
            created: dict[str, Any] = await client.work().request("POST", _path(namespace), body=manifest)
            return created
        except api.ApiError as exc:
            if exc.status == 409:
                raise NotOwned(f"Service {namespace}/{name} exists and is not this runtime's") from exc
            raise
    # metadata.uid in the patch: the API server refuses it if the name now holds another object.
    body = {"metadata": {"uid": uid, "labels": manifest["metadata"]["labels"]}, "spec": manifest["spec"]}
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", _path(namespace, name), body=body, content_type="application/merge-patch+json")
    except api.ApiError as exc:
        if api.is_uid_mismatch(exc):
            raise NotOwned(f"Service {namespace}/{name} is now another object (uid {uid} is gone)") from exc
        raise
    return patched


async def delete_service(namespace: str, name: str, uid: str) -> None:
    """Delete exactly the Service this runtime owns (UID precondition), never a successor."""
    try:
        await client.work().request("DELETE", _path(namespace, name), body={"preconditions": {"uid": uid}})
    except api.ApiError as exc:
        if exc.status not in (404, 409):
            raise


def endpoints_list_pod_ready(slices: list[dict[str, Any]], pod_uid: str, pod_name: str) -> bool:
    """True while any of the Service's EndpointSlices lists the pod as ready."""
    for eps in slices:
        for ep in eps.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if ref.get("uid") == pod_uid or (ref.get("kind") == "Pod" and ref.get("name") == pod_name and not ref.get("uid")):
                if (ep.get("conditions") or {}).get("ready", True):
                    return True
    return False
