"""The lifecycle Lease: acquire (compare-and-swap on resourceVersion), renew, release, delete.

The fencing token lives in spec.leaseTransitions: it grows by one at every acquisition.
"""

from __future__ import annotations

import datetime
from typing import Any

from baton.k8s import client


class LeaseLost(Exception):
    """Someone else holds the Lease now, or it changed under us."""


def read_lease(namespace: str, name: str) -> dict[str, Any] | None:
    return client.read_or_none(client.coordination().read_namespaced_lease, name, namespace)


def _replace_lease(namespace: str, name: str, lease: dict[str, Any]) -> None:
    """Write the Lease back; its resourceVersion makes this a compare-and-swap."""
    try:
        client.coordination().replace_namespaced_lease(name, namespace, lease)  # type: ignore[arg-type]
    except client.ApiException as exc:
        if client.is_conflict(exc):
            raise LeaseLost("changed concurrently (409 Conflict)") from exc
        raise


def _expired(lease: dict[str, Any], now: datetime.datetime) -> bool:
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return True
    renew = client.parse_time(spec.get("renewTime"))
    if renew is None:
        return True
    return renew + datetime.timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0)) <= now


def acquire_lease(
    *,
    namespace: str,
    name: str,
    runtime: str,
    runtime_uid: str,
    identity: str,
    token: int,
    duration_seconds: int,
    now: datetime.datetime,
) -> None:
    """Take the Lease with `token`, only if it is free, expired or already ours."""
    stamp = client.micro_time(now)
    spec = {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": token,
    }
    lease = read_lease(namespace, name)
    if lease is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"baton.dev/runtime": runtime},
                "ownerReferences": [{
                    "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "name": runtime,
                    "uid": runtime_uid, "controller": True, "blockOwnerDeletion": False,
                }],
            },
            "spec": spec,
        }
        try:
            client.coordination().create_namespaced_lease(namespace, body)  # type: ignore[arg-type]
        except client.ApiException as exc:
            if client.is_conflict(exc):
                raise LeaseLost("created concurrently by another holder") from exc
            raise
        return
    current = lease.get("spec") or {}
    if current.get("holderIdentity") not in (None, "", identity) and not _expired(lease, now):
        raise LeaseLost(f"held by {current.get('holderIdentity')}")
    if int(current.get("leaseTransitions") or 0) >= token:
        raise LeaseLost("token already used")
    lease["spec"] = spec
    _replace_lease(namespace, name, lease)


def renew_lease(*, namespace: str, name: str, identity: str, token: int, now: datetime.datetime) -> None:
    lease = read_lease(namespace, name)
    spec = (lease or {}).get("spec") or {}
    if lease is None or spec.get("holderIdentity") != identity or int(spec.get("leaseTransitions") or 0) != token:
        raise LeaseLost("no longer ours")
    spec["renewTime"] = client.micro_time(now)
    _replace_lease(namespace, name, lease)


def release_lease(*, namespace: str, name: str, identity: str) -> None:
    """Clear the holder (keep the token), so the next acquirer needs no wait."""
    lease = read_lease(namespace, name)
    spec = (lease or {}).get("spec") or {}
    if lease is None or spec.get("holderIdentity") != identity:
        return
    spec["holderIdentity"] = None
    spec["renewTime"] = None
    spec["acquireTime"] = None
    _replace_lease(namespace, name, lease)


def delete_lease(namespace: str, name: str) -> None:
    try:
        client.coordination().delete_namespaced_lease(name, namespace)
    except client.ApiException as exc:
        if not client.is_not_found(exc):
            raise
