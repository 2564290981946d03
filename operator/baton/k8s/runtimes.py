"""ToolRuntime objects: read, patch metadata, patch status."""

from __future__ import annotations

from typing import Any

from baton.k8s import client

GROUP, VERSION, PLURAL = "baton.dev", "v1alpha1", "toolruntimes"


def read_runtime(namespace: str, name: str) -> dict[str, Any] | None:
    return client.read_or_none(client.custom().get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)


def remove_annotation(namespace: str, name: str, key: str, value: str) -> bool:
    """Remove annotation `key` only if it still holds `value` (a JSON patch `test`), so a newer
    request written meanwhile is never lost. False when it changed or went already."""
    path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
    body = [{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]
    try:
        client.custom().patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, body, _content_type="application/json-patch+json")
    except client.ApiException as exc:
        if client.status_of(exc) in (404, 409, 422):  # gone, or the test failed: not ours to remove
            return False
        raise
    return True


def patch_runtime_finalizers(namespace: str, name: str, finalizers: list[str], resource_version: str) -> None:
    """Replace the finalizer list, guarded by resourceVersion (lists merge-patch as a whole)."""
    client.custom().patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name,
        {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}},
    )


def patch_runtime_status(
    namespace: str, name: str, status_patch: dict[str, Any], *, resource_version: str | None = None
) -> None:
    """JSON merge patch of status through the status subresource.

    The Lease holder writes without a resourceVersion precondition: its fence against a stale
    holder is status.fencingToken, checked by the CRD's CEL transition rule on the API server.
    A process that does not hold the Lease passes `resource_version`, so it can never overwrite
    what the holder wrote after it looked.
    """
    body: dict[str, Any] = {"status": status_patch}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    client.custom().patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body)


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


def runtimes_served(namespaces: tuple[str, ...]) -> bool:
    """Whether the API server serves ToolRuntimes (the CRD is installed and established)."""
    try:
        if namespaces:
            client.custom().list_namespaced_custom_object(GROUP, VERSION, namespaces[0], PLURAL, limit=1)
        else:
            client.custom().list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
    except client.ApiException as exc:
        if client.is_not_found(exc):
            return False
        raise
    return True
