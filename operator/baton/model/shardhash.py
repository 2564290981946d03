"""Which range of the runtimes' hash space a runtime falls in (BATON_SHARD_RANGES), and the hash
bucket label its objects carry. Pure, no I/O.

Here, not in baton.sharding, so that the kubectl plugin (which imports baton.model only) computes
a runtime's owner with the very hash the operator uses.
"""

from __future__ import annotations

import functools

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1
# names.LABEL_HASH_BUCKET's values: the top 8 bits of the hash, two hex digits.
HASH_BUCKETS = 256
# Runtimes whose UID hash is remembered (least recently asked forgotten first): more than the
# runtimes one replica holds at the sizes measured (N=10000), a few hundred KiB.
UID_HASHES_KEPT = 16384


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a, the hash Kubernetes' sharded list/watch cuts metadata.uid by."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


@functools.lru_cache(maxsize=UID_HASHES_KEPT)
def uid_hash(uid: str) -> int:
    """fnv1a64 of a UID, remembered: a sharded replica asks for the range of a runtime at every
    wake-up and pass (in pure Python the hash was about 2 % of its CPU at N=2000)."""
    return fnv1a64(uid.encode())


def range_of(uid: str, *, ranges: int) -> int:
    """The range a runtime falls in: equal slices of the 64-bit FNV-1a hash of its UID."""
    return (uid_hash(uid) * ranges) >> 64


def hash_bucket(runtime_uid: str) -> str:
    """names.LABEL_HASH_BUCKET of every object Baton makes for the runtime of this UID: the top
    8 bits of fnv1a64(uid) as two lowercase hex digits (a pod has a UID of its own: the label
    carries its runtime's)."""
    return f"{uid_hash(runtime_uid) >> 56:02x}"
