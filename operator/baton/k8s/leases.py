"""The lifecycle Lease: acquire (compare-and-swap on the version observed), renew, release,
delete. All through the Lease connection pool (``client.leases()``), apart from other work.

The fencing token lives in spec.leaseTransitions: it grows by one at every acquisition.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

from baton.k8s import api, client
from baton.lifecycle import manifests
from baton.model import names, shardhash

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("coordination.k8s.io", "leases", ("get", "create", "update", "delete")),)


class LeaseLost(Exception):
    """Someone else holds the Lease now, or it changed under us."""


class LeaseOutsideView(Exception):
    """The Lease exists but without the label the Leases view selects on: no pass ever sees it,
    so every pass would create it and meet AlreadyExists, silently. The message says what to do."""


def _path(namespace: str, name: str | None = None) -> str:
    return api.path("coordination.k8s.io/v1", "leases", namespace, name)


async def read_lease(namespace: str, name: str) -> dict[str, Any] | None:
    return await client.leases().get_or_none(_path(namespace, name))


async def _replace_lease(namespace: str, name: str, lease: dict[str, Any]) -> dict[str, Any]:
    """Write the Lease back; its resourceVersion makes this a compare-and-swap. Returns what
    the API server stored (with the new resourceVersion, for the next compare-and-swap)."""
    try:
        stored: dict[str, Any] = await client.leases().request("PUT", _path(namespace, name), body=lease)
        return stored
    except api.ApiError as exc:
        if exc.status == 409:
            raise LeaseLost("changed concurrently (409 Conflict)") from exc
        if exc.status == 404:
            raise LeaseLost("deleted") from exc
        raise


async def acquire_lease(
    *,
    namespace: str,
    name: str,
    runtime: str,
    runtime_uid: str,
    identity: str,
    token: int,
    duration_seconds: int,
    now: datetime.datetime,
    observed: dict[str, Any] | None,
) -> dict[str, Any]:
    """Take the Lease with `token`, replacing exactly the version the caller `observed` (and
    judged free: released, or seen unchanged for its duration by the caller's own monotonic
    clock). If anyone wrote it since, the compare-and-swap fails: LeaseLost. None: create it."""
    stamp = client.micro_time(now)
    spec = {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": token,
    }
    if observed is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {names.LABEL_RUNTIME: runtime, names.LABEL_HASH_BUCKET: shardhash.hash_bucket(runtime_uid)},
                "ownerReferences": [
                    manifests.owner_reference(name=runtime, uid=runtime_uid, block_owner_deletion=False)],
            },
            "spec": spec,
        }
        try:
            created: dict[str, Any] = await client.leases().request("POST", _path(namespace), body=body)
            return created
        except api.ApiError as exc:
            if exc.status == 409:
                await _outside_view(namespace=namespace, name=name, runtime=runtime)
                raise LeaseLost("created concurrently by another holder") from exc
            raise
    if int((observed.get("spec") or {}).get("leaseTransitions") or 0) >= token:
        raise LeaseLost("token already used")
    # A Lease an older version made has no hash-bucket label: it gets it with this take
    # (sharded replicas watch unlabelled Leases apart until then; baton.cache.views).
    meta = observed.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), names.LABEL_HASH_BUCKET: shardhash.hash_bucket(runtime_uid)}
    return await _replace_lease(namespace, name, {**observed, "metadata": {**meta, "labels": labels}, "spec": spec})


async def _outside_view(*, namespace: str, name: str, runtime: str) -> None:
    """After AlreadyExists on a create: LeaseOutsideView when the Lease standing there lacks our
    label (else it was a race with another creator, or the view lags: LeaseLost as before)."""
    lease = await read_lease(namespace, name)
    if lease is None:
        return
    value = ((lease.get("metadata") or {}).get("labels") or {}).get(names.LABEL_RUNTIME)
    if value != runtime:
        found = "no label " + names.LABEL_RUNTIME if value is None else f"{names.LABEL_RUNTIME}={value}"
        raise LeaseOutsideView(
            f"Lease {namespace}/{name} exists with {found}, so Baton does not see it: label it "
            f"(kubectl -n {namespace} label lease {name} {names.LABEL_RUNTIME}={runtime} --overwrite) or delete it")


def _ours(lease: dict[str, Any] | None, identity: str, token: int) -> bool:
    spec = (lease or {}).get("spec") or {}
    return spec.get("holderIdentity") == identity and int(spec.get("leaseTransitions") or 0) == token


async def _swap(
    *, namespace: str, name: str, lease: dict[str, Any] | None,
    still_ours: Callable[[dict[str, Any]], bool], change: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any] | None:
    """Compare-and-swap `change(spec)` onto `lease` (our last copy: one request, no read). Only if
    someone else wrote meanwhile, read once and try again while it is still ours. None when it is
    not ours (any more); LeaseLost when the second swap conflicts too."""
    for attempt in (1, 2):
        if lease is None or not still_ours(lease):
            return None
        try:
            return await _replace_lease(namespace, name, {**lease, "spec": change(lease.get("spec") or {})})
        except LeaseLost:
            if attempt == 2:
                raise
            lease = await read_lease(namespace, name)
    return None  # pragma: no cover - the loop returns or raises


async def renew_lease(
    *, namespace: str, name: str, identity: str, token: int, now: datetime.datetime, last: dict[str, Any] | None
) -> dict[str, Any]:
    """Move renewTime to `now` while the Lease names us with our token (see _swap)."""
    lease = last if last is not None and _ours(last, identity, token) else await read_lease(namespace, name)
    renewed = await _swap(namespace=namespace, name=name, lease=lease,
                          still_ours=lambda lz: _ours(lz, identity, token),
                          change=lambda spec: {**spec, "renewTime": client.micro_time(now)})
    if renewed is None:
        raise LeaseLost("no longer ours")
    return renewed


async def release_lease(*, namespace: str, name: str, identity: str, last: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Clear the holder (keep the token), so the next acquirer needs no wait. Only while the
    Lease still names us: a Lease someone else took meanwhile is left alone."""
    lease = last if last is not None else await read_lease(namespace, name)
    return await _swap(namespace=namespace, name=name, lease=lease,
                       still_ours=lambda lz: (lz.get("spec") or {}).get("holderIdentity") == identity,
                       change=lambda spec: {**spec, "holderIdentity": None, "renewTime": None, "acquireTime": None})


async def delete_lease(namespace: str, name: str, uid: str | None = None) -> None:
    """Delete the Lease; with `uid`, exactly that object (a precondition), never a successor."""
    try:
        await client.leases().request("DELETE", _path(namespace, name),
                                      body={"preconditions": {"uid": uid}} if uid else None)
    except api.ApiError as exc:
        if exc.status != 404 and not (uid and exc.status == 409):
            raise
