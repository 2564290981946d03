"""Ranges of the runtimes' hash space and who should hold them. Pure: no I/O, the clock is an
argument.

Each replica computes the same shares from the same member list: sorted identities, the first
``ranges % members`` take one range more. A replica over its share hands back its highest ranges;
one under it takes free ranges (released, or unchanged for a whole Lease duration by its own
clock), starting at an offset of its own so two newcomers rarely reach for the same one.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from baton.model import names, shardhash

# The hash is in baton.model, where the kubectl plugin reads it too (`kubectl baton list --owner`).
fnv1a64 = shardhash.fnv1a64
range_of = shardhash.range_of
# BATON_SHARD_RANGES must divide the label buckets evenly (a power of two up to this).
MAX_RANGES = shardhash.HASH_BUCKETS


def valid_count(ranges: int) -> bool:
    """0 (off) or a power of two up to MAX_RANGES: every range is then a whole set of buckets."""
    return ranges == 0 or (0 < ranges <= MAX_RANGES and ranges & (ranges - 1) == 0)


def buckets(index: int, *, ranges: int) -> tuple[str, ...]:
    """The values of names.LABEL_HASH_BUCKET whose runtimes fall in range `index` of `ranges`."""
    width = shardhash.HASH_BUCKETS // ranges
    return tuple(f"{b:02x}" for b in range(index * width, (index + 1) * width))


def range_of_bucket(bucket: str, *, ranges: int) -> int | None:
    """The range a LABEL_HASH_BUCKET value falls in; None for a value Baton never writes."""
    if len(bucket) != 2 or any(c not in "0123456789abcdef" for c in bucket):
        return None
    return int(bucket, 16) * ranges // shardhash.HASH_BUCKETS


def bucket_selector(index: int, *, ranges: int) -> str:
    """The label selector of range `index`'s objects (those Baton labelled)."""
    return f"{names.LABEL_HASH_BUCKET} in ({','.join(buckets(index, ranges=ranges))})"


def shard_selector(index: int, *, ranges: int) -> str:
    """The API server's shardSelector of range `index` (KEP-5866, gate ShardedListAndWatch):
    16 lowercase hex digits, the last range's end is 2^64 (17 digits)."""
    start = (index << 64) // ranges
    end = ((index + 1) << 64) // ranges
    return f"shardRange(object.metadata.uid, '0x{start:016x}', '0x{end:016x}')"


def share(*, member: str, members: Iterable[str], ranges: int) -> int:
    """How many ranges `member` should hold while `members` (it included) are alive."""
    ordered = sorted(set(members) | {member})
    base, extra = divmod(ranges, len(ordered))
    return base + (1 if ordered.index(member) < extra else 0)


@dataclasses.dataclass(frozen=True)
class RangeLease:
    index: int
    holder: str | None  # None: released (or never taken)
    expired: bool  # unchanged for its whole duration as this replica saw it


@dataclasses.dataclass(frozen=True)
class Moves:
    take: tuple[int, ...] = ()
    hand_back: tuple[int, ...] = ()


def plan_moves(*, me: str, members: Iterable[str], leases: Sequence[RangeLease], held: Iterable[int],
               ranges: int) -> Moves:
    """What this replica does about ranges at one tick. `leases` is every range Lease seen (a
    missing index is free), `held` the ranges this replica holds fresh."""
    alive = sorted(set(members) | {me})
    mine = sorted(set(held))
    want = share(member=me, members=alive, ranges=ranges)
    if len(mine) > want:
        return Moves(hand_back=tuple(mine[want:]))
    room = want - len(mine)
    if room == 0:
        return Moves()
    seen = {lease.index: lease for lease in leases}
    start = alive.index(me) * ranges // len(alive)
    free: list[int] = []
    for k in range(ranges):
        i = (start + k) % ranges
        if i in mine:
            continue
        lease = seen.get(i)
        if lease is None or lease.holder is None or lease.expired or lease.holder == me:
            free.append(i)
    return Moves(take=tuple(free[:room]))


class Sightings:
    """When this replica first saw each Lease's current version (its own monotonic clock): a
    Lease is expired once unchanged for its duration since then, whatever the writer's clock
    said. A replica that just started judges nothing expired before a full duration."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, float]] = {}
        self._changed: set[str] = set()  # Leases this replica saw change (written while it watched)

    def observe(self, *, name: str, version: str, now: float) -> float:
        """Record a sighting; returns how long (seconds) this version has been seen unchanged."""
        last = self._seen.get(name)
        if last is None or last[0] != version:
            if last is not None:
                self._changed.add(name)
            self._seen[name] = (version, now)
            return 0.0
        return now - last[1]

    def changed(self, name: str) -> bool:
        """Whether this replica saw the Lease change: its writer wrote since this replica first
        saw it (a Lease only ever seen at one version may be a dead writer's leftover)."""
        return name in self._changed

    def forget_except(self, names: Iterable[str]) -> None:
        keep = set(names)
        for name in [n for n in self._seen if n not in keep]:
            del self._seen[name]
            self._changed.discard(name)
