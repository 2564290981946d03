"""Sharding's Leases (baton.sharding): each replica's membership Lease and the range Leases, all
in the operator's namespace. Through the Lease connection pool (``client.leases()``), apart from
other work, so nothing queues ahead of a renewal.

Writes are compare-and-swap on the resourceVersion the caller last saw: a range is taken only
from exactly the version judged free, and renewed only while nobody wrote it since.
"""

from __future__ import annotations

import datetime
from typing import Any, AsyncIterator

from baton.k8s import api, client, leases
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs), in the operator's own namespace.
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("coordination.k8s.io", "leases", ("get", "list", "watch", "create", "update", "delete")),)

SELECTOR = f"{names.LABEL_COMPONENT} in ({names.COMPONENT_SHARD_MEMBER},{names.COMPONENT_SHARD_RANGE})"


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("coordination.k8s.io/v1", "leases", namespace, name)


def _spec(*, holder: str, duration_seconds: int, now: datetime.datetime) -> dict[str, Any]:
    stamp = client.micro_time(now)
    return {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds, "acquireTime": stamp, "renewTime": stamp}


async def list_all(namespace: str) -> list[dict[str, Any]]:
    """Every membership and range Lease (a few dozen objects: one list per tick)."""
    items, _ = await list_at(namespace)
    return items


async def list_at(namespace: str) -> tuple[list[dict[str, Any]], str]:
    """Every membership and range Lease, and the list's resourceVersion to watch from."""
    return await client.leases().list(_path(namespace), label_selector=SELECTOR)


def watch(namespace: str, *, resource_version: str, timeout_seconds: int = 300) -> AsyncIterator[dict[str, Any]]:
    """Changes to the membership and range Leases from `resource_version` (events {type, object}),
    so a replica sees each renewal as it is written, not at its next list."""
    return client.leases().watch(_path(namespace), resource_version=resource_version, label_selector=SELECTOR,
                                 timeout_seconds=timeout_seconds)


async def _put(namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        stored: dict[str, Any] = await client.leases().request("PUT", _path(namespace, name), body=body, timeout=5)
        return stored
    except api.ApiError as exc:
        if exc.status in (404, 409):
            raise leases.LeaseLost(f"Lease {namespace}/{name} changed or went ({exc.status})") from exc
        raise


async def take_range(*, namespace: str, index: int, ranges: int, identity: str, duration_seconds: int,
                     now: datetime.datetime, observed: dict[str, Any] | None) -> dict[str, Any]:
    """Hold range `index`: create its Lease, or replace exactly the version `observed` (judged
    free by the caller). LeaseLost when someone else wrote or created it first."""
    name = names.shard_range_lease_name(index=index, ranges=ranges)
    spec = _spec(holder=identity, duration_seconds=duration_seconds, now=now)
    if observed is None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {names.LABEL_COMPONENT: names.COMPONENT_SHARD_RANGE}},
                "spec": spec}
        try:
            created: dict[str, Any] = await client.leases().request("POST", _path(namespace), body=body, timeout=5)
            return created
        except api.ApiError as exc:
            if exc.status == 409:
                raise leases.LeaseLost(f"Lease {namespace}/{name} created by another replica first") from exc
            raise
    transitions = int((observed.get("spec") or {}).get("leaseTransitions") or 0)
    return await _put(namespace, name, {**observed, "spec": {**spec, "leaseTransitions": transitions + 1}})


async def renew(*, last: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """Move renewTime to `now` on our last copy; LeaseLost when anyone wrote it since."""
    meta = last.get("metadata") or {}
    body = {**last, "spec": {**(last.get("spec") or {}), "renewTime": client.micro_time(now)}}
    return await _put(str(meta.get("namespace")), str(meta.get("name")), body)


async def release(*, last: dict[str, Any]) -> None:
    """Clear the holder on our last copy, so the next replica takes the range without waiting;
    a Lease someone wrote meanwhile is left alone."""
    meta = last.get("metadata") or {}
    body = {**last, "spec": {**(last.get("spec") or {}), "holderIdentity": None, "renewTime": None,
                             "acquireTime": None}}
    try:
        await _put(str(meta.get("namespace")), str(meta.get("name")), body)
    except leases.LeaseLost:
        pass


async def join(*, namespace: str, identity: str, duration_seconds: int, now: datetime.datetime) -> dict[str, Any]:
    """Write this replica's membership Lease (create, or replace one a previous process of the
    same identity left)."""
    name = names.shard_member_lease_name(identity)
    body: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {names.LABEL_COMPONENT: names.COMPONENT_SHARD_MEMBER}},
        "spec": _spec(holder=identity, duration_seconds=duration_seconds, now=now),
    }
    try:
        created: dict[str, Any] = await client.leases().request("POST", _path(namespace), body=body, timeout=5)
        return created
    except api.ApiError as exc:
        if exc.status != 409:
            raise
    old = await client.leases().get_or_none(_path(namespace, name))
    if old is None:
        created = await client.leases().request("POST", _path(namespace), body=body, timeout=5)
        return created
    body["metadata"]["resourceVersion"] = (old.get("metadata") or {}).get("resourceVersion")
    return await _put(namespace, name, body)


async def leave(*, namespace: str, identity: str, uid: str | None) -> None:
    """Delete this replica's membership Lease (exactly `uid` when given); already gone is fine."""
    try:
        await client.leases().request("DELETE", _path(namespace, names.shard_member_lease_name(identity)),
                                      body={"preconditions": {"uid": uid}} if uid else None, timeout=5)
    except api.ApiError as exc:
        if exc.status not in (404, 409):
            raise
