"""This replica's share of the runtimes (BATON_SHARD_RANGES), as the controller sees it: which
runtimes it tries, what a range gained or lost does to its views and its queue, the watches of
ranges it no longer needs, and the hash-bucket labels an older version left off. Does I/O (the
views' watches, and the label patches through baton.k8s.labels).

Without sharding every runtime is this replica's and none of this acts. The ranges themselves
are held by ``baton.sharding.keeper.RangeKeeper`` (created here, its moves reported here); each
step still takes the runtime's own Lease, so a range move is never unsafe.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Collection

from baton import clock as clock_mod
from baton import queue as queue_mod
from baton import settings as settings_mod
from baton.cache import store, views as views_mod
from baton.k8s import client, labels
from baton.model import names, shardhash
from baton.sharding import keeper as shard_keeper

# The controller's logger: these lines are about its runtimes and ranges.
log = logging.getLogger("baton.runner")

Key = tuple[str, str]
# How often the watches of ranges this replica no longer needs are stopped.
UNWATCH_PERIOD_SECONDS = 1.0


class ReplicaShare:
    """Which runtimes this replica tries, and what its range moves do.

    `held`: the runtimes whose Lease this replica holds (the executor's); `wake` queues a runtime
    if it is worth queueing; `forget` drops a runtime's memory between passes (the reconciler's).
    """

    def __init__(self, *, settings: settings_mod.Settings, clock: clock_mod.Clock, views: views_mod.Views,
                 held: Collection[Key], queue: queue_mod.WorkQueue[Key], wake: Callable[[str, str], None],
                 forget: Callable[[Key], None]) -> None:
        self.views = views
        self.held = held
        self.queue = queue
        self.wake = wake
        self.forget = forget
        # Sharding (BATON_SHARD_RANGES): this replica tries only the runtimes in the ranges it
        # holds; each step still takes the runtime's own Lease, so a range move is never unsafe.
        self.ranges: shard_keeper.RangeKeeper | None = None
        if settings.shard_ranges:
            self.ranges = shard_keeper.RangeKeeper(
                identity=settings.identity, namespace=settings.system_namespace, ranges=settings.shard_ranges,
                lease_seconds=settings.lease_seconds, clock=clock,
                on_gained=self._range_gained, on_lost=self._range_lost)

    def standing(self, key: Key) -> shard_keeper.Standing:
        """Without sharding, every runtime is MINE; with it, by the range it falls in (a runtime
        not in view is MINE: its pass finds it gone). A range whose views are not filled yet
        (just gained: its objects are being listed) counts as LAPSED: nothing is decided on a
        view that may still miss a pod."""
        if self.ranges is None:
            return shard_keeper.Standing.MINE
        rt = self.views.runtimes.get(*key)
        if rt is None:
            return shard_keeper.Standing.MINE
        uid = _uid(rt)
        standing = self.ranges.standing(uid)
        if standing == shard_keeper.Standing.MINE and not self.views.range_synced(self.ranges.range_of(uid)):
            return shard_keeper.Standing.LAPSED
        return standing

    def mine(self, key: Key) -> bool:
        """Worth queueing: MINE, or LAPSED (its range may come back; the controller's turn waits for it)."""
        return self.standing(key) != shard_keeper.Standing.OTHER

    def mine_runtime(self, rt: dict[str, Any]) -> bool:
        if self.ranges is None:
            return True
        uid = _uid(rt)
        return self.ranges.owns(uid) and self.views.range_synced(self.ranges.range_of(uid))

    def _in_range(self, index: int) -> list[Key]:
        assert self.ranges is not None
        ranges = self.ranges
        return [store.key_of(rt) for rt in list(self.views.runtimes.items())
                if ranges.range_of(_uid(rt)) == index]

    def _range_gained(self, index: int) -> None:
        # Its objects listed and watched from now on (kept if still watched since it was lost);
        # its runtimes wait (LAPSED) until those views are filled, then their events wake them.
        self.views.start_range(index)
        for key in self._in_range(index):
            self.wake(*key)

    def _held_ranges(self) -> set[int]:
        """The ranges of the runtimes whose Lease this replica holds."""
        assert self.ranges is not None
        out: set[int] = set()
        for key in list(self.held):
            rt = self.views.runtimes.get(*key)
            if rt is not None:
                out.add(self.ranges.range_of(_uid(rt)))
        return out

    async def unwatch_forever(self) -> None:
        """Stop watching a range once it is neither held (fresh or lapsed) nor the range of a
        runtime whose Lease this replica still holds: the pass that hands such a Lease back
        needs that runtime's objects in view."""
        assert self.ranges is not None
        while True:
            await asyncio.sleep(UNWATCH_PERIOD_SECONDS)
            for index in sorted(self.views.watched_ranges()):
                # Judged again right before each stop: one gained back while an earlier stop
                # awaited is kept (stop_range forgets a range before its first await).
                if index in self.ranges.held or index in self._held_ranges():
                    continue
                leaving = self._in_range(index)
                try:
                    await self.views.stop_range(index)
                except Exception:  # never the end of this loop; the next second tries again
                    log.exception("stopping the watches of range %d failed", index)
                    continue
                # Their memory goes with them (no Lease of theirs is held here: checked above).
                for key in leaving:
                    if key not in self.held:
                        self.forget(key)
                log.info("stopped watching range %d of %d", index, self.ranges.ranges)

    def _range_lost(self, index: int) -> None:
        # Runtimes of the range this replica holds the Lease of: one more turn hands it back.
        for key in self._in_range(index):
            if key in self.held:
                self.queue.add(key)

    async def adopt(self, key: Key) -> None:
        """Label the runtime's objects an older version made without its hash bucket (its pods,
        Service, Baton's EndpointSlice), so they move from every replica's view of unlabelled
        objects to the owner's range view. Only the owner does this; a failure is tried again at
        the next pass (the unlabelled view keeps showing them to every replica meanwhile)."""
        rt = self.views.runtimes.get(*key)
        if rt is None:
            return
        ns, name = key
        uid = _uid(rt)
        found: list[tuple[str, dict[str, Any]]] = [("Pod", pd) for pd in self.views.pods.by_label(ns, name)]
        for kind, obj in (("Service", self.views.services.get(ns, name)),
                          ("EndpointSlice", self.views.slices.get(ns, names.gateway_slice_name(name)))):
            if obj is not None:
                found.append((kind, obj))
        for kind, obj in found:
            meta = obj.get("metadata") or {}
            if not views_mod.unlabelled(obj) or uid not in {ref.get("uid") for ref in meta.get("ownerReferences") or []}:
                continue
            try:
                patched = await labels.add_hash_bucket(kind=kind, namespace=ns, name=str(meta.get("name")),
                                                       uid=str(meta.get("uid")), bucket=shardhash.hash_bucket(uid))
            except Exception as exc:  # the next pass tries again
                log.warning("%s %s/%s not labelled with its hash bucket: %s", kind, ns, meta.get("name"),
                            client.short(exc), extra={"runtime": f"{ns}/{name}"})
                continue
            if patched is not None:
                self.views.apply(patched, kind)


def _uid(rt: dict[str, Any]) -> str:
    return str((rt.get("metadata") or {}).get("uid") or "")
