"""A gateway replica's registration Lease (DESIGN.md, "Gateway"; /work/brief/gateway.md): write
it (create, or take over the one a previous process of the same instance left), renew it,
delete it on a clean exit. Through the Lease connection pool (``client.leases()``): nothing
queues ahead of a renewal.

The Lease is labelled baton.dev/component=gateway (never baton.dev/runtime: the operator's
runtime views do not see it) and annotated with the replica's admin address and its static window
(ANN_GATEWAY_STATIC: how long past its registration it may still forward when it cannot renew;
docs/gateway.md, "When the API server is away"), and, while the replica holds calls for idle
runtimes, with their names (ANN_WAKE_DEMAND: a JSON list, sorted; absent when there are none;
docs/gateway.md, "Idle runtimes and wake"). Every write carries the whole annotation.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Sequence

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs), in the gateway's own namespace.
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("coordination.k8s.io", "leases", ("get", "create", "update", "delete")),)


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("coordination.k8s.io/v1", "leases", namespace, name)


def _spec(*, instance: str, duration_seconds: int, now: datetime.datetime) -> dict[str, Any]:
    stamp = client.micro_time(now)
    return {"holderIdentity": instance, "leaseDurationSeconds": duration_seconds, "acquireTime": stamp, "renewTime": stamp}


def _annotations(annotations: dict[str, str], wake_demand: Sequence[str]) -> dict[str, str]:
    """`annotations` with ANN_WAKE_DEMAND set to `wake_demand` (removed when empty)."""
    out = {k: v for k, v in annotations.items() if k != names.ANN_WAKE_DEMAND}
    if wake_demand:
        out[names.ANN_WAKE_DEMAND] = json.dumps(sorted(wake_demand), separators=(",", ":"))
    return out


def wake_demand_of(lease: dict[str, Any] | None) -> list[str]:
    """The runtimes a Lease's ANN_WAKE_DEMAND names ([] when absent or not a list of strings)."""
    text = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(names.ANN_WAKE_DEMAND)
    try:
        doc = json.loads(text) if text else []
    except ValueError:
        return []
    return [str(x) for x in doc if isinstance(x, str)] if isinstance(doc, list) else []


def _manifest(*, namespace: str, instance: str, admin: str, duration_seconds: int, static_seconds: int,
              now: datetime.datetime, wake_demand: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": names.gateway_lease_name(instance),
            "namespace": namespace,
            "labels": {names.LABEL_COMPONENT: names.COMPONENT_GATEWAY},
            "annotations": _annotations({names.ANN_GATEWAY_ADMIN: admin, names.ANN_GATEWAY_STATIC: str(static_seconds)},
                                        wake_demand),
        },
        "spec": _spec(instance=instance, duration_seconds=duration_seconds, now=now),
    }


async def register_gateway(*, namespace: str, instance: str, admin: str, duration_seconds: int,
                           now: datetime.datetime, static_seconds: int = 0,
                           wake_demand: Sequence[str] = ()) -> dict[str, Any]:
    """Write this replica's Lease (renewTime `now`, ANN_WAKE_DEMAND `wake_demand`): create it, or
    replace the one of that name (a previous process of the same instance id). Returns what the
    API server stored."""
    body = _manifest(namespace=namespace, instance=instance, admin=admin, duration_seconds=duration_seconds,
                     static_seconds=static_seconds, now=now, wake_demand=wake_demand)
    try:
        created: dict[str, Any] = await client.leases().request("POST", _path(namespace), body=body)
        return created
    except api.ApiError as exc:
        if exc.status != 409:
            raise
    name = names.gateway_lease_name(instance)
    old = await client.leases().get_or_none(_path(namespace, name))
    if old is None:
        created = await client.leases().request("POST", _path(namespace), body=body)
        return created
    body["metadata"]["resourceVersion"] = (old.get("metadata") or {}).get("resourceVersion")
    replaced: dict[str, Any] = await client.leases().request("PUT", _path(namespace, name), body=body)
    return replaced


async def renew_gateway(*, last: dict[str, Any], now: datetime.datetime,
                        wake_demand: Sequence[str] = ()) -> dict[str, Any]:
    """Move renewTime to `now` and ANN_WAKE_DEMAND to `wake_demand` on our last copy
    (compare-and-swap on its resourceVersion). ApiError 409/404 when someone changed or deleted
    it: the caller registers again."""
    meta = last.get("metadata") or {}
    body = {**last, "metadata": {**meta, "annotations": _annotations(dict(meta.get("annotations") or {}), wake_demand)},
            "spec": {**(last.get("spec") or {}), "renewTime": client.micro_time(now)}}
    renewed: dict[str, Any] = await client.leases().request(
        "PUT", _path(str(meta.get("namespace")), str(meta.get("name"))), body=body, timeout=5)
    return renewed


async def delete_gateway(*, namespace: str, instance: str, uid: str | None) -> None:
    """Delete this replica's Lease (exactly `uid` when given); already gone is fine."""
    try:
        await client.leases().request("DELETE", _path(namespace, names.gateway_lease_name(instance)),
                                      body={"preconditions": {"uid": uid}} if uid else None, timeout=5)
    except api.ApiError as exc:
        if exc.status not in (404, 409):
            raise
