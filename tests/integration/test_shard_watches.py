"""Watches narrowed per replica (issue 26 item 2; BATON_SHARD_RANGES, baton.cache.views): each
sharded replica lists, watches and caches only its ranges' ToolRuntimes (the API server's
shardSelector, gate ShardedListAndWatch on in hack/cluster.py) and their pods, Leases and
Services (the hash-bucket label Baton writes); objects an older version made without the label
stay visible to every replica until their owner labels them."""
from __future__ import annotations

import asyncio
import signal
from typing import Any, Awaitable, Callable, TypeVar

from kubernetes import client

from baton.k8s import api, runtimes as runtimes_api
from baton.k8s import client as baton_client
from baton.model import names, shardhash
from baton.sharding import ranges as ranges_mod
from dev.wait import wait_for
from harness import shards
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]
T = TypeVar("T")
RANGES = 8
NAMES = [f"w{i:02d}" for i in range(12)]
BUCKET = names.LABEL_HASH_BUCKET


def _start(operators: Start, namespace: str, identity: str, ranges: int = RANGES) -> OperatorProcess:
    return operators(identity, env={"BATON_SHARD_RANGES": str(ranges), "BATON_SYSTEM_NAMESPACE": namespace})








def _cached(op: OperatorProcess) -> dict[str, int]:
    return {kind: int(op.metric("baton_cache_objects", kind=kind)) for kind in ("ToolRuntime", "Pod", "Lease")}


def _run_with_client(cluster: Any, call: Callable[[], Awaitable[T]]) -> T:
    async def body() -> T:
        baton_client._WORK = api.Api(cluster.api_client.configuration, name="work", pool_size=2)
        try:
            return await call()
        finally:
            await baton_client.stop()
    return asyncio.run(body())


def test_the_api_server_filters_toolruntimes_by_shard_selector(
        cluster: Any, crd: None, namespace: str, rts: Runtimes) -> None:
    """What the replicas rely on, checked on the plane: with the gate on, a list with range i's
    shardSelector returns exactly the runtimes whose FNV-1a UID hash falls in range i."""
    for n in NAMES:
        rts.create(runtime_manifest(n))
    assert _run_with_client(cluster, lambda: runtimes_api.shard_selector_honoured(namespace)) is True

    async def per_range() -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        for index in range(4):
            items, _ = await baton_client.work().list(
                api.path(names.API_VERSION, names.PLURAL, namespace),
                shard_selector=ranges_mod.shard_selector(index, ranges=4))
            out[index] = {i["metadata"]["name"] for i in items}
        return out

    got = _run_with_client(cluster, per_range)
    want: dict[int, set[str]] = {i: set() for i in range(4)}
    for n in NAMES:
        want[ranges_mod.range_of(rts.get(n)["metadata"]["uid"], ranges=4)].add(n)
    print("runtimes per range of 4:", {i: sorted(v) for i, v in got.items()})
    assert got == want


def test_each_replica_caches_only_its_ranges_objects_and_the_survivor_all(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    a = _start(operators, namespace, "op-a")
    b = _start(operators, namespace, "op-b")
    holders = wait_for(lambda: shards.split(cluster, namespace, "op-a", "op-b", ranges=RANGES), timeout=45, what="the ranges split")
    for n in NAMES:
        rts.create(runtime_manifest(n))
    for n in NAMES:
        rts.wait_ready(n, 1, timeout=120)
    assert shards.holders(cluster, namespace, ranges=RANGES) == holders, "the ranges moved meanwhile"
    owners = {n: shards.owner(rts, holders, n, ranges=RANGES) for n in NAMES}
    mine = {p.identity: list(owners.values()).count(p.identity) for p in (a, b)}
    assert all(mine.values()), f"12 runtimes over 8 ranges: both replicas own some {mine}"
    # Each runtime has one pod and one Lease; each replica's views hold its own runtimes' only.
    want = {p.identity: {"ToolRuntime": mine[p.identity], "Pod": mine[p.identity], "Lease": mine[p.identity]}
            for p in (a, b)}
    wait_for(lambda: {p.identity: _cached(p) for p in (a, b)} == want, timeout=30,
             what=f"each replica caches its own runtimes' objects only: {want}")
    seen = {p.identity: _cached(p) for p in (a, b)}
    print("cached per replica:", seen, "owners:", mine)
    assert sum(s["Pod"] for s in seen.values()) == len(NAMES)
    for p in (a, b):
        assert "listed and watched per range (shardSelector)" in p.log_text()
    events = {p.identity: int(p.metric("baton_watch_events_total", kind="Pod")) for p in (a, b)}
    received = {p.identity: int(p.metric("baton_watch_bytes_total", resource="pods") or 0) for p in (a, b)}
    print("pod watch events per replica:", events, "bytes:", received)
    # Bytes follow events: a replica that got pod events got their lines (bookmarks aside).
    for i, n in events.items():
        assert n == 0 or received[i] > 200 * n, (i, n, received[i])
    # op-b leaves: op-a's views grow to everything, and every runtime still converges.
    b.signal(signal.SIGTERM)
    b.wait_exit(30)
    wait_for(lambda: shards.split(cluster, namespace, "op-a", ranges=RANGES), timeout=30, what="op-a holds every range")
    everything = {"ToolRuntime": len(NAMES), "Pod": len(NAMES), "Lease": len(NAMES)}
    wait_for(lambda: _cached(a) == everything, timeout=30, what="op-a caches every runtime's objects")
    for n in NAMES:
        rts.set_image(n, "example/tool:2")
    for n in NAMES:
        rts.wait_ready(n, 2, timeout=120)
    assert {rts.status(n)["holder"] for n in NAMES} == {"op-a"}
    print("after op-b left, op-a caches:", _cached(a))


def test_objects_made_without_the_bucket_label_stay_seen_by_their_owner_and_get_it(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str, pod_watch: PodWatch) -> None:
    """Objects an older version made (no hash-bucket label) must never be invisible to the replica
    that owns their runtime: every replica watches them apart, the owner labels them, and no
    second pod is ever created."""
    core = client.CoreV1Api(cluster.api_client)
    coord = client.CoordinationV1Api(cluster.api_client)
    old = operators("op-old")  # unsharded: makes the runtimes' pods and Leases
    for n in NAMES:
        rts.create(runtime_manifest(n, service=True))
    for n in NAMES:
        rts.wait_ready(n, 1, timeout=120)
    old.signal(signal.SIGTERM)
    old.wait_exit(30)
    # As an older version left them: no hash-bucket label anywhere.
    strip = {"metadata": {"labels": {BUCKET: None}}}
    for n in NAMES:
        core.patch_namespaced_pod(n, namespace, strip)
        core.patch_namespaced_service(n, namespace, strip)
        coord.patch_namespaced_lease(names.lease_name(n), namespace, strip)
    first = {n: rts.status(n)["current"]["uid"] for n in NAMES}
    a = _start(operators, namespace, "op-a")
    b = _start(operators, namespace, "op-b")
    holders = wait_for(lambda: shards.split(cluster, namespace, "op-a", "op-b", ranges=RANGES), timeout=45, what="the ranges split")

    def labelled() -> bool:
        for n in NAMES:
            want = shardhash.hash_bucket(rts.get(n)["metadata"]["uid"])
            pod = core.read_namespaced_pod(n, namespace)
            svc = core.read_namespaced_service(n, namespace)
            if (pod.metadata.labels or {}).get(BUCKET) != want or (svc.metadata.labels or {}).get(BUCKET) != want:
                return False
        return True

    # The resync is 300 s: the owners' first passes (each runtime is woken when its range's
    # views are filled) do it.
    wait_for(labelled, timeout=60, what="every pod and Service labelled with its runtime's bucket")
    # Nothing was recreated: the same pod serves each runtime.
    assert {n: rts.status(n)["current"]["uid"] for n in NAMES} == first
    assert {n: core.read_namespaced_pod(n, namespace).metadata.uid for n in NAMES} == first
    # The owners' caches now hold them (moved from the unlabelled view to the range's).
    owners = {n: shards.owner(rts, holders, n, ranges=RANGES) for n in NAMES}
    mine = {p.identity: list(owners.values()).count(p.identity) for p in (a, b)}
    wait_for(lambda: {p.identity: int(p.metric("baton_cache_objects", kind="Pod")) for p in (a, b)} == mine,
             timeout=30, what=f"each replica caches its own runtimes' pods only: {mine}")
    for n in NAMES:
        rts.set_image(n, "example/tool:2")
    for n in NAMES:
        rts.wait_ready(n, 2, timeout=120)
    acted = {n: rts.status(n)["holder"] for n in NAMES}
    assert acted == owners
    for n in NAMES:
        assert pod_watch.assert_one_at_a_time(n) == [1, 2], n
        # The Lease got the label when it was taken for the handoff.
        lease = coord.read_namespaced_lease(names.lease_name(n), namespace)
        assert (lease.metadata.labels or {}).get(BUCKET) == shardhash.hash_bucket(rts.get(n)["metadata"]["uid"]), n
