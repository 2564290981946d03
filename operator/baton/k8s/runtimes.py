"""ToolRuntime objects: read, patch metadata, patch status (returning what was stored)."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (names.GROUP, names.PLURAL, ("list", "patch")), (names.GROUP, f"{names.PLURAL}/status", ("patch",)))


def _path(namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    return api.path(names.API_VERSION, names.PLURAL, namespace, name, sub)


async def patch_runtime_finalizers(namespace: str, name: str, finalizers: list[str],
                                   resource_version: str) -> dict[str, Any]:
    """Replace the finalizer list, guarded by resourceVersion (lists merge-patch as a whole)."""
    body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
    patched: dict[str, Any] = await client.work().request(
        "PATCH", _path(namespace, name), body=body, content_type="application/merge-patch+json")
    return patched


async def remove_annotation(namespace: str, name: str, key: str, value: str) -> dict[str, Any] | None:
    """Remove annotation `key` only if it still holds `value` (a JSON patch `test`), so a newer
    request written meanwhile is never lost. None when it changed or went already."""
    pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
    body = [{"op": "test", "path": pointer, "value": value}, {"op": "remove", "path": pointer}]
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", _path(namespace, name), body=body, content_type="application/json-patch+json")
        return patched
    except api.ApiError as exc:
        if exc.status in (404, 409, 422):  # gone, or the test failed: not ours to remove
            return None
        raise


async def patch_runtime_status(
    namespace: str, name: str, status_patch: dict[str, Any], *, resource_version: str
) -> dict[str, Any]:
    """JSON merge patch of status through the status subresource; returns the stored object.

    Every lifecycle write passes `resource_version` (the version it was decided on), so it never
    lands on a state its writer did not see: not another's write, and not the writer's own later
    write overtaking this one in the network (409 Conflict then). The fence against a stale
    holder is also status.fencingToken, checked by the CRD's CEL transition rule.
    """
    body: dict[str, Any] = {"metadata": {"resourceVersion": resource_version}, "status": status_patch}
    patched: dict[str, Any] = await client.work().request(
        "PATCH", _path(namespace, name, "status"), body=body, content_type="application/merge-patch+json")
    return patched


async def read_runtime(namespace: str, name: str) -> dict[str, Any] | None:
    """The runtime as stored now (a list by field selector: `list` is granted, `get` is not)."""
    page = await client.work().request("GET", _path(namespace), query={"fieldSelector": f"metadata.name={name}"})
    for item in page.get("items") or []:
        item.setdefault("metadata", {}).setdefault("namespace", namespace)
        item.setdefault("apiVersion", names.API_VERSION)
        item.setdefault("kind", names.KIND)
        return dict(item)
    return None


def merge_patch(old: Any, new: Any) -> Any:
    """RFC 7386 merge patch turning `old` into `new` (None where a key disappears)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value) if isinstance(value, dict) and isinstance(old[key], dict) else value
    return patch


async def runtimes_served(namespaces: tuple[str, ...]) -> bool:
    """Whether the API server serves ToolRuntimes (the CRD is installed and established)."""
    try:
        await client.work().request("GET", _path(namespaces[0] if namespaces else None), query={"limit": 1})
    except api.ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


# Not a selector: an API server that reads shardSelector refuses it ("invalid shard selector",
# a 500 from 1.36.3's custom-resource handler); one that does not (the ShardedListAndWatch gate
# off, or older than 1.36) answers the list as if it were absent.
_NOT_A_SHARD_SELECTOR = "baton-probe("


async def shard_selector_honoured(namespace: str | None) -> bool:
    """Whether the API server filters ToolRuntime lists and watches by shardSelector (KEP-5866).
    One list of at most one object; any other failure says no (the caller falls back to
    watching every ToolRuntime, which is correct either way)."""
    try:
        await client.work().request("GET", _path(namespace),
                                    query={"limit": 1, "shardSelector": _NOT_A_SHARD_SELECTOR}, timeout=10)
    except api.ApiError as exc:
        return exc.status in (400, 500) and "invalid shard selector" in exc.message
    return False
