"""ToolRuntimeClaim objects: Baton only writes their status (Bound | Stale); the view lists and
watches them (baton.cache.views)."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("baton.dev", "toolruntimeclaims/status", ("patch",)),)

GROUP, VERSION, PLURAL = "baton.dev", "v1alpha1", "toolruntimeclaims"
GROUP_VERSION = f"{GROUP}/{VERSION}"


async def patch_claim_status(namespace: str, name: str, *, uid: str, status_patch: dict[str, Any]) -> dict[str, Any] | None:
    """Merge patch of the claim's status, guarded by its UID (a claim deleted and created again
    under the same name is not written). None when it is gone or another object holds the name."""
    body: dict[str, Any] = {"metadata": {"uid": uid}, "status": status_patch}
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", api.path(GROUP_VERSION, PLURAL, namespace, name, "status"), body=body,
            content_type="application/merge-patch+json")
        return patched
    except api.ApiError as exc:
        if exc.status in (404, 409):
            return None
        raise
