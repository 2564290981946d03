"""The hash-bucket label added to a runtime's objects an older version made without it (pods,
the Service, Baton's EndpointSlice); the runtime's Lease gets it when next taken
(baton.k8s.leases.acquire_lease). A merge patch of that one label, with the object's UID as its
precondition, so a same-named successor is never touched.
"""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "pods", ("patch",)), ("", "services", ("patch",)), ("discovery.k8s.io", "endpointslices", ("patch",)))

_PATHS = {"Pod": ("v1", "pods"), "Service": ("v1", "services"),
          "EndpointSlice": ("discovery.k8s.io/v1", "endpointslices")}
KINDS = tuple(_PATHS)


async def add_hash_bucket(*, kind: str, namespace: str, name: str, uid: str, bucket: str) -> dict[str, Any] | None:
    """Label exactly this object (UID) with its runtime's bucket; None when it is gone (404, or
    the name now holds another UID)."""
    group_version, plural = _PATHS[kind]
    body = {"metadata": {"uid": uid, "labels": {names.LABEL_HASH_BUCKET: bucket}}}
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", api.path(group_version, plural, namespace, name), body=body,
            content_type="application/merge-patch+json")
    except api.ApiError as exc:
        if exc.status == 404 or api.is_uid_mismatch(exc):
            return None
        raise
    return patched
