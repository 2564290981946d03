"""Reading the range Leases of sharded replicas (BATON_SHARD_RANGES) in a test's namespace:
who holds each range, whether the shares are even, which replica owns a runtime."""
from __future__ import annotations

from typing import Any

from kubernetes import client

from baton.sharding import ranges as ranges_mod
from harness.runtimes import Runtimes


def holders(cluster: Any, namespace: str, *, ranges: int) -> dict[int, str | None]:
    """Range index -> holder, as the range Leases say."""
    coord = client.CoordinationV1Api(cluster.api_client)
    prefix = f"baton-range.{ranges}."
    out: dict[int, str | None] = {}
    for lease in coord.list_namespaced_lease(namespace, label_selector="baton.dev/component=shard-range").items:
        assert lease.metadata.name.startswith(prefix), lease.metadata.name
        out[int(lease.metadata.name[len(prefix):])] = lease.spec.holder_identity
    return out


def split(cluster: Any, namespace: str, *identities: str, ranges: int) -> dict[int, str | None] | None:
    """The holders once every range is held and the shares are even among `identities`."""
    held = holders(cluster, namespace, ranges=ranges)
    if len(held) != ranges or set(held.values()) != set(identities):
        return None
    counts = [list(held.values()).count(i) for i in identities]
    return held if max(counts) - min(counts) <= 1 else None


def owner(rts: Runtimes, held: dict[int, str | None], name: str, *, ranges: int) -> str | None:
    """The replica holding the range runtime `name`'s UID falls in."""
    return held[ranges_mod.range_of(rts.get(name)["metadata"]["uid"], ranges=ranges)]
