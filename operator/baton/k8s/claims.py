"""ToolRuntimeClaim objects: Baton only writes their status (Bound | Stale); the view lists and
watches them (baton.cache.views)."""

from __future__ import annotations

from typing import Any

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (names.GROUP, names.CLAIM_PLURAL, ("list",)), (names.GROUP, f"{names.CLAIM_PLURAL}/status", ("patch",)))


async def claims_served(namespaces: tuple[str, ...]) -> bool:
    """Whether the API server serves ToolRuntimeClaims (their CRD is installed)."""
    try:
        await client.work().request("GET", api.path(names.API_VERSION, names.CLAIM_PLURAL,
                                                    namespaces[0] if namespaces else None), query={"limit": 1})
    except api.ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def patch_claim_status(namespace: str, name: str, *, uid: str, status_patch: dict[str, Any]) -> dict[str, Any] | None:
    """The claim's status (phase, message: `status_patch`) written whole, guarded by its UID (a
    claim deleted and created again under the same name is not written). None when it is gone
    or another object holds the name.

    A JSON patch whose first op tests /metadata/uid: the status subresource ignores metadata.uid
    in a merge patch (it wrote a same-named successor's status: tests/integration/
    test_k8s_adapters.py), while a failed `test` refuses the whole patch. The status is Baton's
    alone (the CRD says so) and these are all its fields, so it is replaced, not merged."""
    ops = [{"op": "test", "path": "/metadata/uid", "value": uid}, {"op": "add", "path": "/status", "value": status_patch}]
    try:
        patched: dict[str, Any] = await client.work().request(
            "PATCH", api.path(names.API_VERSION, names.CLAIM_PLURAL, namespace, name, "status"), body=ops,
            content_type="application/json-patch+json")
        return patched
    except api.ApiError as exc:
        if exc.status == 404 or _uid_test_failed(exc):
            return None
        raise  # a status the CRD refuses (named fields: "... is invalid: status.phase ...") is a bug: shown


def _uid_test_failed(exc: api.ApiError) -> bool:
    """A failed JSON patch `test` is a 422 without field details, unlike a schema refusal."""
    return exc.status == 422 and " is invalid" not in exc.message
