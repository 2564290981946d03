"""Holds this replica's share of the ranges (baton.sharding.ranges decides, this does the I/O
through baton.k8s.shardleases). Does I/O.

One task ticks every third of a Lease duration: renew the membership Lease and every held range
(compare-and-swap), list the membership and range Leases, hand back what is over this replica's
share, take free ranges up to it. A watch of those Leases records when each version is first
seen (a dead holder's range expires one duration after its last renewal was *seen*) and wakes
the task when a range is handed back; the task also looks again, without renewing, at the
moment another's range could first be judged expired. So a dead replica's ranges are taken one
Lease duration after its last renewal plus the time a list and a write take, not up to two
periods later. A range counts as this replica's only while *fresh*: its last
renewal was sent less than (duration - margin) ago by the local monotonic clock, the rule of the
runtimes' own Leases (baton.execute.leasekeeper.safety_margin), so a replica whose renewals stall
stops trying a range's runtimes before anyone else may take the range.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import random
from typing import Any, Callable

from baton import clock as clock_mod
from baton import metrics
from baton.execute import leasekeeper
from baton.k8s import client, leases, shardleases
from baton.model import names
from baton.sharding import ranges as ranges_mod

log = logging.getLogger("baton.sharding")


# A renewal round may start this much before a full period has passed since the last one (a
# look woken just before it is due renews too, instead of a second wake-up moments later).
RENEW_EARLY_SECONDS = 0.25
# A look for an expiry comes this long after the moment computed, so the list it makes sees the
# version unchanged for the full duration.
EXPIRY_LOOK_SLACK_SECONDS = 0.05


def next_look_in(*, now: float, renewed_at: float, period: float, expiries: list[float]) -> float:
    """Seconds until the loop looks again: the next renewal round (a period after the last), or
    sooner, just after the earliest moment another's range could be judged expired."""
    wait = period - (now - renewed_at)
    if expiries:
        wait = min(wait, min(expiries) - now + EXPIRY_LOOK_SLACK_SECONDS)
    return max(0.1, wait)


class Standing(str, enum.Enum):
    MINE = "mine"
    LAPSED = "lapsed"
    OTHER = "other"


@dataclasses.dataclass
class HeldRange:
    renewed: float  # monotonic clock when the last successful take/renew was *sent*
    last: dict[str, Any]


class RangeKeeper:
    def __init__(self, *, identity: str, namespace: str, ranges: int, lease_seconds: int, clock: clock_mod.Clock,
                 on_gained: Callable[[int], None], on_lost: Callable[[int], None]) -> None:
        self.identity = identity
        self.namespace = namespace
        self.ranges = ranges
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.on_gained = on_gained
        self.on_lost = on_lost
        self.held: dict[int, HeldRange] = {}
        self.members: tuple[str, ...] = (identity,)
        self._member: dict[str, Any] | None = None
        self._sightings = ranges_mod.Sightings()
        # The ranges the controller was last told about (on_gained, not since on_lost): a range
        # whose renewals lapsed and came back is announced again, so its runtimes are woken.
        self._announced: set[int] = set()
        # Dropped since the last announcement: one lost and taken back within a tick must still
        # be announced as lost and gained (its views may have been stopped meanwhile, and a pass
        # that found it someone else's was dropped from the queue).
        self._dropped: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        # Monotonic moments at which another holder's range could first be judged expired (its
        # version unchanged for a duration since first seen): the loop looks again then.
        self._expiries: list[float] = []
        metrics.SHARD_RANGES.set(ranges)

    # --- what the controller asks -----------------------------------------------------------------

    def holds_range(self, index: int) -> bool:
        held = self.held.get(index)
        if held is None:
            return False
        return self.clock.monotonic() - held.renewed < self.lease_seconds - leasekeeper.safety_margin(self.lease_seconds)

    def owns(self, uid: str) -> bool:
        return self.holds_range(ranges_mod.range_of(uid, ranges=self.ranges))

    def standing(self, uid: str) -> Standing:
        """MINE: in a range held fresh; LAPSED: in a range still held whose renewals are late
        (it may come back: wait, start nothing); OTHER: someone else's (or nobody's yet)."""
        index = ranges_mod.range_of(uid, ranges=self.ranges)
        if self.holds_range(index):
            return Standing.MINE
        return Standing.LAPSED if index in self.held else Standing.OTHER

    def range_of(self, uid: str) -> int:
        return ranges_mod.range_of(uid, ranges=self.ranges)

    # --- the loop ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="baton ranges")
        if self._watch_task is None:
            self._watch_task = asyncio.create_task(self._watch(), name="baton range leases watch")

    async def _run(self) -> None:
        period = max(0.5, self.lease_seconds / 3)
        renewed_at: float | None = None
        while not self._stopping:
            started = self.clock.monotonic()
            renew = renewed_at is None or started - renewed_at >= period - RENEW_EARLY_SECONDS
            self._wake.clear()
            try:
                await self.tick(renew=renew)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # API trouble: held ranges go stale by themselves; next tick
                log.warning("range tick failed: %s", client.short(exc))
                # Looked at by no list now: the next look is the next round, not a retry loop.
                self._expiries = []
            if renew:
                renewed_at = started
            self._announce()
            assert renewed_at is not None
            wait = next_look_in(now=self.clock.monotonic(), renewed_at=renewed_at, period=period,
                                expiries=self._expiries)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _watch(self) -> None:
        """Sightings as renewals are written, and a wake-up when a range is handed back (free
        at once) or a Lease deleted (a member that left). Best effort: without it the ticks' lists still see every
        version, only later."""
        failures = 0
        while not self._stopping:
            try:
                items, version = await shardleases.list_at(self.namespace)
                now = self.clock.monotonic()
                for listed in items:
                    self._sight(listed, now)
                async for event in shardleases.watch(self.namespace, resource_version=version):
                    kind, obj = event.get("type"), event.get("object")
                    if not isinstance(obj, dict) or kind not in ("ADDED", "MODIFIED", "DELETED"):
                        if kind == "ERROR":
                            break  # expired resourceVersion or the like: list again
                        continue
                    meta = obj.get("metadata") or {}
                    if kind != "DELETED":
                        self._sight(obj, self.clock.monotonic())
                    # A member gone (its Lease deleted at SIGTERM) or a range handed back: the
                    # shares change now, so look now.
                    is_range = _range_index(str(meta.get("name")), ranges=self.ranges) is not None
                    if kind == "DELETED" or (is_range and not (obj.get("spec") or {}).get("holderIdentity")):
                        self._wake.set()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                # Said once per run of failures (a Role without `watch` on Leases keeps failing;
                # the ticks' lists still see every version, only later).
                (log.warning if failures == 1 else log.debug)(
                    "watch of the range Leases failed: %s; ranges are still seen at each tick", client.short(exc))
                await asyncio.sleep(min(10.0, 0.5 * 2 ** min(failures, 5)) * random.uniform(0.8, 1.2))

    def _sight(self, lease: dict[str, Any], now: float) -> float:
        """Record a sighting of `lease` at its version; how long that version has been seen."""
        meta = lease.get("metadata") or {}
        return self._sightings.observe(name=str(meta.get("name")), version=str(meta.get("resourceVersion")), now=now)

    def _announce(self) -> None:
        """Tell the controller which ranges became its own or stopped being so since last time
        (taken, handed back, lost, or lapsed and renewed again)."""
        fresh = {i for i in self.held if self.holds_range(i)}
        regained = fresh & self._announced & self._dropped
        self._dropped = set()
        for index in sorted((self._announced - fresh) | regained):
            self.on_lost(index)
        for index in sorted((fresh - self._announced) | regained):
            self.on_gained(index)
        self._announced = fresh
        metrics.SHARD_RANGES_HELD.set(len(fresh))

    async def tick(self, *, renew: bool = True) -> None:
        """`renew`: renew the membership and held ranges first (a look between renewals,
        for a range about to expire, does not)."""
        if renew:
            # Renewals first and side by side: nothing else this tick does may delay them.
            await asyncio.gather(self._renew_member(), *(self._renew(index) for index in list(self.held)))
        items = await shardleases.list_all(self.namespace)
        now = self.clock.monotonic()
        members: list[str] = []
        seen: list[ranges_mod.RangeLease] = []
        observed: dict[int, dict[str, Any]] = {}
        expiries: list[float] = []
        for lease in items:
            meta = lease.get("metadata") or {}
            spec = lease.get("spec") or {}
            name = str(meta.get("name"))
            age = self._sight(lease, now)
            expired = age >= float(spec.get("leaseDurationSeconds") or self.lease_seconds)
            holder = spec.get("holderIdentity") or None
            component = (meta.get("labels") or {}).get(names.LABEL_COMPONENT)
            if component == names.COMPONENT_SHARD_MEMBER and holder and not expired:
                members.append(str(holder))
            index = _range_index(name, ranges=self.ranges)
            if component == names.COMPONENT_SHARD_RANGE and index is not None:
                seen.append(ranges_mod.RangeLease(index=index, holder=holder, expired=expired))
                observed[index] = lease
                if holder and holder != self.identity and not expired:
                    expiries.append(now + float(spec.get("leaseDurationSeconds") or self.lease_seconds) - age)
        self._expiries = expiries
        self._sightings.forget_except(str((lz.get("metadata") or {}).get("name")) for lz in items)
        self.members = tuple(sorted(set(members) | {self.identity}))
        moves = ranges_mod.plan_moves(me=self.identity, members=self.members, leases=seen,
                                      held=[i for i in self.held if self.holds_range(i)], ranges=self.ranges)
        for index in moves.hand_back:
            await self.hand_back(index)
        for index in moves.take:
            await self._take(index, observed.get(index))
        metrics.SHARD_MEMBERS.set(len(self.members))

    async def _renew_member(self) -> None:
        try:
            await self._write_member()
        except Exception as exc:  # the others may count this replica out for a while: no harm
            log.warning("membership Lease not renewed: %s", client.short(exc))

    async def _write_member(self) -> None:
        if self._member is not None:
            try:
                self._member = await shardleases.renew(last=self._member, now=self.clock.wall())
                return
            except leases.LeaseLost:
                self._member = None
        self._member = await shardleases.join(namespace=self.namespace, identity=self.identity,
                                              duration_seconds=self.lease_seconds, now=self.clock.wall())

    async def _renew(self, index: int) -> None:
        held = self.held[index]
        sent = self.clock.monotonic()
        try:
            held.last = await shardleases.renew(last=held.last, now=self.clock.wall())
            held.renewed = sent
        except leases.LeaseLost as exc:
            log.warning("lost range %d of %d: %s", index, self.ranges, exc)
            self._drop(index, why="lost")
        except Exception as exc:  # transient: the range goes stale by itself if this persists
            log.warning("renewal of range %d failed: %s", index, client.short(exc))

    async def _take(self, index: int, observed: dict[str, Any] | None) -> None:
        sent = self.clock.monotonic()
        try:
            written = await shardleases.take_range(
                namespace=self.namespace, index=index, ranges=self.ranges, identity=self.identity,
                duration_seconds=self.lease_seconds, now=self.clock.wall(), observed=observed)
        except leases.LeaseLost as exc:
            log.info("range %d not taken: %s", index, exc)
            return
        self.held[index] = HeldRange(renewed=sent, last=written)
        metrics.SHARD_RANGE_MOVES.labels(move="taken").inc()
        log.info("took range %d of %d (%d members)", index, self.ranges, len(self.members))

    def _drop(self, index: int, *, why: str) -> HeldRange | None:
        """Not this replica's from now on (owns() says so at once; the controller hears at the
        end of the tick)."""
        held = self.held.pop(index, None)
        if held is not None:
            self._dropped.add(index)
            metrics.SHARD_RANGE_MOVES.labels(move=why).inc()
        return held

    async def hand_back(self, index: int) -> None:
        """Stop trying the range's runtimes (at once, locally), then clear the Lease's holder."""
        held = self._drop(index, why="handed_back")
        if held is None:
            return
        log.info("handing back range %d of %d", index, self.ranges)
        try:
            await shardleases.release(last=held.last)
        except Exception as exc:  # it expires by itself
            log.warning("range %d not released: %s", index, client.short(exc))

    async def stop(self) -> None:
        """At shutdown: hand every range back and leave, so the others take over at once."""
        self._stopping = True
        for task in (self._task, self._watch_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for index in list(self.held):
            await self.hand_back(index)
        metrics.SHARD_RANGES_HELD.set(0)
        if self._member is not None:
            try:
                await shardleases.leave(namespace=self.namespace, identity=self.identity,
                                        uid=(self._member.get("metadata") or {}).get("uid"))
            except Exception as exc:
                log.warning("membership Lease not deleted: %s", client.short(exc))


def _range_index(name: str, *, ranges: int) -> int | None:
    prefix = names.shard_range_lease_name(index=0, ranges=ranges)[:-1]
    if not name.startswith(prefix):
        return None
    try:
        index = int(name[len(prefix):])
    except ValueError:
        return None
    return index if 0 <= index < ranges else None
