"""The NetworkPolicy that admits only the gateway (and the operator) to a gateway-routed runtime's
pods (BATON_ISOLATE_TOOL_PODS; docs/gateway.md, "Closing the direct path"): created, patched (only
the one this runtime owns, by UID), deleted by UID, as the runtime's Service is."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants them (with the
# informer's list and watch, baton.cache.views.POLICY_RBAC) only where gateway.isolateToolPods is
# on; tests/integration/test_chart_render.py checks both ways, and that the calls below fit.
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("networking.k8s.io", "networkpolicies", ("create", "patch", "delete")),
)


class NotOwned(Exception):
    """A NetworkPolicy with the policy's name exists and the runtime does not own it."""


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("networking.k8s.io/v1", "networkpolicies", namespace, name)


async def apply_policy(namespace: str, manifest: dict[str, Any], *, uid: str | None) -> dict[str, Any]:
    """Create the policy, or patch the one this runtime owns (`uid`, as observed)."""
    name = manifest["metadata"]["name"]
    if uid is None:
        try:
            created: dict[str, Any] = await client.work().request("POST", _path(namespace), body=manifest)
            return created
        except api.ApiError as exc:
            if exc.status == 409:
                raise NotOwned(f"NetworkPolicy {namespace}/{name} exists and is not in the view") from exc
            raise
    # metadata.uid in the patch: the API server refuses it if the name now holds another object.
    # A merge patch replaces lists whole: the spec's ingress is exactly what Baton wants.
    body = {"metadata": {"uid": uid, "labels": manifest["metadata"]["labels"]}, "spec": manifest["spec"]}
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", _path(namespace, name), body=body, content_type="application/merge-patch+json")
    except api.ApiError as exc:
        if api.is_uid_mismatch(exc):
            raise NotOwned(f"NetworkPolicy {namespace}/{name} is now another object (uid {uid} is gone)") from exc
        raise
    return patched


async def delete_policy(namespace: str, name: str, uid: str) -> None:
    """Delete exactly the policy this runtime owns (UID precondition); already gone is fine."""
    try:
        await client.work().request("DELETE", _path(namespace, name), body={"preconditions": {"uid": uid}})
    except api.ApiError as exc:
        if exc.status not in (404, 409):
            raise
