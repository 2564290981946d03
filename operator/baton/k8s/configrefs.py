"""The ConfigMaps and Secrets a pod template references, reduced to one digest.

Only digests leave this module: Secret data is never logged, evented, cached or written to status.
An object is read (a GET by name) only because a template references it. The caller's view of
these kinds is metadata only (baton.cache.views): it says whether an object exists and at which
resourceVersion, and a DigestCache keeps each digest by the version it was read at, so a pass
reads again only an object that changed since.
"""

from __future__ import annotations

import collections
import hashlib
import json
from typing import Any, Callable

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "configmaps", ("get",)), ("", "secrets", ("get",)))

ABSENT = "absent"
UNREADABLE = "unreadable"
# (kind, namespace, name) -> what the caller's view shows of that object: its resourceVersion,
# ABSENT, or None when the caller has no view of it (then it is read every time).
Lookup = Callable[[str, str, str], str | None]
Ref = tuple[str, str, str]  # (kind, namespace, name)
# Digests kept at most. Entries go with their object (deleted) or their last reference, so the
# count is about the number of objects referenced; this bounds it whatever happens.
DIGEST_CACHE_ENTRIES = 4096


def _not_older(read_at: str, seen: str) -> bool:
    """A digest read at resourceVersion `read_at` still holds for the version `seen` in the view."""
    if read_at.isdigit() and seen.isdigit():
        return int(read_at) >= int(seen)  # the GET may be newer than the view: still good
    return read_at == seen


class DigestCache:
    """Each referenced object's data digest, by the resourceVersion it was read at. No I/O.
    At most `max_entries`, the least recently used going first."""

    def __init__(self, *, max_entries: int = DIGEST_CACHE_ENTRIES) -> None:
        self._max = max_entries
        self._entries: collections.OrderedDict[Ref, tuple[str, str]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, ref: Ref, seen: str) -> str | None:
        """The digest if it was read at `seen` (or later), else None."""
        entry = self._entries.get(ref)
        if entry is None or not _not_older(entry[0], seen):
            return None
        self._entries.move_to_end(ref)
        return entry[1]

    def put(self, ref: Ref, read_at: str, digest: str) -> None:
        self._entries[ref] = (read_at, digest)
        self._entries.move_to_end(ref)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget(self, ref: Ref) -> None:
        self._entries.pop(ref, None)


def data_digest(obj: dict[str, Any]) -> str:
    content = json.dumps({"data": obj.get("data") or {}, "binaryData": obj.get("binaryData") or {}}, sort_keys=True)
    return hashlib.sha256(content.encode()).hexdigest()


async def _read(kind: str, namespace: str, name: str) -> tuple[str, str | None]:
    """(the object's digest, ABSENT or UNREADABLE; the resourceVersion read, for a digest)."""
    plural = "configmaps" if kind == "ConfigMap" else "secrets"
    try:
        obj = await client.work().get_or_none(api.path("v1", plural, namespace, name))
    except api.ApiError as exc:
        if exc.status == 403:
            # Not readable by Baton's ServiceAccount (the chart's rbac values): the runtime
            # still runs; Degraded says that this object's changes start no handoff.
            return UNREADABLE, None
        raise
    if obj is None:
        return ABSENT, None
    return data_digest(obj), str((obj.get("metadata") or {}).get("resourceVersion") or "") or None


async def _found(kind: str, namespace: str, name: str, lookup: Lookup | None, cache: DigestCache | None) -> str:
    """A referenced object's digest, ABSENT or UNREADABLE: ABSENT without a read where the view
    shows none; from `cache` where it holds the digest at the version the view shows; else a GET
    (cached where a view can tell when it goes stale: a newer resourceVersion)."""
    ref = (kind, namespace, name)
    seen = lookup(kind, namespace, name) if lookup is not None else None
    if seen == ABSENT:
        return ABSENT
    if seen is not None and cache is not None:
        cached = cache.get(ref, seen)
        if cached is not None:
            return cached
    found, read_at = await _read(kind, namespace, name)
    if cache is not None and seen is not None and read_at is not None:
        cache.put(ref, read_at, found)
    elif cache is not None and found == ABSENT:
        cache.forget(ref)  # gone before the view heard of it
    return found


async def read_config_digest(
    namespace: str, refs: list[tuple[str, str, bool]], lookup: Lookup | None = None, *,
    cache: DigestCache | None = None,
) -> tuple[str, list[str], list[str], list[tuple[str, str]]]:
    """(digest over the data of every referenced object, required ones missing, ones not readable,
    each object's own digest as ("Kind/name", digest)). An object the caller's view shows absent
    is not read; one whose digest `cache` holds at the version the view shows is not read again."""
    if not refs:
        return "", [], [], []
    parts: list[str] = []
    missing: list[str] = []
    unreadable: list[str] = []
    for kind, name, optional in refs:
        found = await _found(kind, namespace, name, lookup, cache)
        parts.append(f"{kind}/{name}:{found}")
        if found == ABSENT and not optional:
            missing.append(f"{kind}/{name}")
        elif found == UNREADABLE:
            unreadable.append(f"{kind}/{name}")
    each = [(f"{kind}/{name}", hashlib.sha256(part.encode()).hexdigest()[:16])
            for (kind, name, _), part in zip(refs, parts)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16], missing, unreadable, each
