"""Which operator replica owns each runtime (`kubectl baton list --owner`). Pure: the range
Leases in (as the API server returns them), owners out; no I/O.

With sharding (BATON_SHARD_RANGES > 0) the operator's replicas hold ranges of the runtimes' hash
space through Leases labelled baton.dev/component=shard-range in the operator's namespace, named
baton-range.<ranges>.<index>; a runtime falls in range baton.model.shardhash.range_of(uid), the
same function the operator uses. The owner is that Lease's holder. It only says which replica
*tries* the runtime: each step still takes the runtime's own Lease.
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, NamedTuple, Sequence

from baton.model import meta, names, shardhash

NONE = "<none>"  # a range released or never taken: the next replica to tick takes it


class RangeHolder(NamedTuple):
    holder: str | None
    live: bool  # renewTime + leaseDurationSeconds is ahead of the plugin's clock


class Ranges(NamedTuple):
    total: int  # how many ranges the hash space is cut into
    holders: dict[int, RangeHolder]
    namespaces: tuple[str, ...]  # where the range Leases were found


def ranges_from(leases: Sequence[Mapping[str, Any]], *, now: datetime.datetime) -> Ranges | None:
    """The ranges the Leases describe; None without any (sharding off). Leases cut for another
    count (left by a replica configured otherwise) are ignored: the count whose Lease was renewed
    last is the one the replicas run with."""
    by_count: dict[int, dict[int, RangeHolder]] = {}
    renewed: dict[int, datetime.datetime] = {}
    spaces: set[str] = set()
    epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    for lease in leases:
        md = lease.get("metadata") or {}
        parsed = names.parse_shard_range_lease_name(str(md.get("name") or ""))
        if parsed is None:
            continue
        index, count = parsed
        spec = lease.get("spec") or {}
        at = meta.parse_time(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds")
        live = (at is not None and isinstance(duration, int) and not isinstance(duration, bool)
                and at + datetime.timedelta(seconds=duration) > now)
        holder = spec.get("holderIdentity") or None
        by_count.setdefault(count, {})[index] = RangeHolder(holder=holder, live=live)
        renewed[count] = max(renewed.get(count, epoch), at or epoch)
        spaces.add(str(md.get("namespace") or ""))
    if not by_count:
        return None
    count = max(by_count, key=lambda c: (renewed[c], c))
    return Ranges(total=count, holders=by_count[count], namespaces=tuple(sorted(spaces)))


def owner(uid: str, ranges: Ranges) -> str:
    """The OWNER cell of a runtime: its range's holder, "(expired)" after one whose Lease lapsed
    (another replica takes it over after a Lease duration), NONE for a range nobody holds."""
    if not uid:
        return NONE
    held = ranges.holders.get(shardhash.range_of(uid, ranges=ranges.total))
    if held is None or held.holder is None:
        return NONE
    return held.holder if held.live else f"{held.holder} (expired)"
