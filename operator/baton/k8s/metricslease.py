"""The Lease whose holder exports the per-runtime metrics (one replica per installation, so each
runtime's series is scraped once per cluster, not once per replica). Does I/O: get, create and
update of one Lease in the system namespace, through the Lease connection pool.

Nothing is fenced by it: two holders for a moment only export a runtime's series twice (the
alerts take `max by (namespace, runtime)`), none for a moment leaves a gap. A Lease is taken
when it names no holder, or when this process has seen it unchanged for its whole duration by
its own monotonic clock (client-go's leader election: no comparison of wall clocks).
"""

from __future__ import annotations

import datetime
from typing import Any

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs), in the system namespace: the chart
# grants them there (tests/integration/test_chart_render.py checks both ways).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("coordination.k8s.io", "leases", ("get", "create", "update")),)


class Taken(Exception):
    """Someone else wrote the Lease first (409), or it was deleted (404)."""


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("coordination.k8s.io/v1", "leases", namespace, name)


def holder(lease: dict[str, Any] | None) -> str | None:
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or None


def version(lease: dict[str, Any] | None) -> str | None:
    return ((lease or {}).get("metadata") or {}).get("resourceVersion")


async def read(namespace: str, name: str) -> dict[str, Any] | None:
    return await client.leases().get_or_none(_path(namespace, name))


async def create(*, namespace: str, name: str, identity: str, duration_seconds: int,
                 now: datetime.datetime) -> dict[str, Any]:
    stamp = client.micro_time(now)
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {names.LABEL_COMPONENT: names.COMPONENT_METRICS}},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": duration_seconds,
                 "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0},
    }
    try:
        created: dict[str, Any] = await client.leases().request("POST", _path(namespace), body=body, timeout=5)
        return created
    except api.ApiError as exc:
        if exc.status == 409:
            raise Taken("created meanwhile by another replica") from exc
        raise


async def write(lease: dict[str, Any], *, holder_identity: str | None, duration_seconds: int,
                now: datetime.datetime, taking: bool) -> dict[str, Any]:
    """Compare-and-swap (the resourceVersion of `lease`): renew it, take it (`taking`: a new
    acquireTime, leaseTransitions + 1) or hand it back (`holder_identity` None)."""
    meta = lease.get("metadata") or {}
    spec = dict(lease.get("spec") or {})
    stamp = client.micro_time(now) if holder_identity else None
    spec.update(holderIdentity=holder_identity, leaseDurationSeconds=duration_seconds, renewTime=stamp)
    if taking or holder_identity is None:
        spec["acquireTime"] = stamp
    if taking:
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    try:
        stored: dict[str, Any] = await client.leases().request(
            "PUT", _path(str(meta.get("namespace")), str(meta.get("name"))), body={**lease, "spec": spec}, timeout=5)
        return stored
    except api.ApiError as exc:
        if exc.status in (404, 409):
            raise Taken("changed or deleted meanwhile") from exc
        raise
