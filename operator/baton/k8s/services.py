"""The runtime's Service: create, patch (only the one this runtime owns), delete by UID; and the
EndpointSlice that routes it to the gateway (spec.service.gateway), written the same way."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "services", ("get", "create", "patch", "delete")),
    ("discovery.k8s.io", "endpointslices", ("create", "patch", "delete")),
)


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
    # A merge patch keeps what it does not name: a Service routed to the gateway has no
    # selector, so the patch removes it (null) explicitly.
    body = {"metadata": {"uid": uid, "labels": manifest["metadata"]["labels"]},
            "spec": {"selector": None, **manifest["spec"]}}
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


def _slice_path(namespace: str, name: str | None = None) -> str:
    return api.path("discovery.k8s.io/v1", "endpointslices", namespace, name)


async def apply_slice(namespace: str, manifest: dict[str, Any], *, uid: str | None) -> dict[str, Any]:
    """Create the runtime's gateway EndpointSlice, or patch the one it owns (`uid`, as observed).
    Its address family cannot change in place: then it is replaced (deleted, created)."""
    if uid is None:
        created: dict[str, Any] = await client.work().request("POST", _slice_path(namespace), body=manifest)
        return created
    name = manifest["metadata"]["name"]
    body = {"metadata": {"uid": uid, "labels": manifest["metadata"]["labels"]}, "addressType": manifest["addressType"],
            "endpoints": manifest["endpoints"], "ports": manifest["ports"]}
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", _slice_path(namespace, name), body=body, content_type="application/merge-patch+json")
        return patched
    except api.ApiError as exc:
        if exc.status != 422 or "addressType" not in str(exc):
            raise
    await delete_slice(namespace, name, uid)
    replaced: dict[str, Any] = await client.work().request("POST", _slice_path(namespace), body=manifest)
    return replaced


async def delete_slice(namespace: str, name: str, uid: str) -> None:
    """Delete exactly that EndpointSlice (UID precondition); already gone is fine."""
    try:
        await client.work().request("DELETE", _slice_path(namespace, name), body={"preconditions": {"uid": uid}})
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
