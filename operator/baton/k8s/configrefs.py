"""The ConfigMaps and Secrets a pod template references, reduced to one digest.

Only keyed digests leave this module: Secret data is never logged, evented, cached or written to
status, and every digest of it is an HMAC-SHA256 under the installation's digest key (see
`install_key`), so a reader of the ToolRuntime who may not read the Secret cannot test guesses of
its data offline. The key itself is never logged.

An object is read (a GET by name) only because a template references it. The caller's view of
these kinds is metadata only (baton.cache.views): it says whether an object exists and at which
resourceVersion, and a DigestCache keeps each digest by the version it was read at, so a pass
reads again only an object that changed since.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import pathlib
from typing import Any, Callable

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "configmaps", ("get",)), ("", "secrets", ("get",)))

ABSENT = "absent"
UNREADABLE = "unreadable"
# The part of an object whose data Baton has not seen since the current generation started (it
# was unreadable then): kept, never replaced by a later value, so that readability alone never
# changes the hash. Not a digest (16 hex characters are never this word).
UNSEEN = "unseen"
# The smallest digest key accepted (bytes): the chart's key is 32 random bytes.
KEY_MIN_BYTES = 32
# A part's length in hex characters (80 bits of the HMAC: a change detector, not a secret;
# status.current.parts carries them). Not 16: the parts of the older unkeyed scheme had 16, and a
# part of that scheme is never kept for an unreadable object (it would keep an unkeyed digest).
_PART_HEX = 20
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

# Set once at startup (`install_key`), before any informer or pass runs; the same for every
# replica of an installation (the chart's Secret), or replicas would disagree on every hash.
_key: bytes | None = None


class DigestKeyError(ValueError):
    """The digest key is missing or unusable: the operator does not start."""


def load_key(path: str) -> bytes:
    """The digest key from a file (the chart mounts its Secret there). Never logged."""
    try:
        key = pathlib.Path(path).read_bytes().strip()
    except OSError as exc:
        raise DigestKeyError(f"BATON_DIGEST_KEY_FILE: cannot read {path}: {exc.strerror}") from None
    if len(key) < KEY_MIN_BYTES:
        raise DigestKeyError(f"BATON_DIGEST_KEY_FILE: {path} holds {len(key)} bytes, at least {KEY_MIN_BYTES} are needed")
    return key


def install_key(key: bytes) -> None:
    """The key every digest of referenced data is made with (`data_digest`, `part`)."""
    global _key
    if len(key) < KEY_MIN_BYTES:
        raise DigestKeyError(f"the digest key must be at least {KEY_MIN_BYTES} bytes")
    _key = key


def _the_key(key: bytes | None) -> bytes:
    if key is not None:
        return key
    if _key is None:
        # A programming error: never fall back to an unkeyed digest.
        raise RuntimeError("configrefs: no digest key installed (install_key at startup)")
    return _key


def data_digest(obj: dict[str, Any], *, key: bytes | None = None) -> str:
    """HMAC-SHA256 of a ConfigMap's or Secret's data under the installed key (or `key`)."""
    content = json.dumps({"data": obj.get("data") or {}, "binaryData": obj.get("binaryData") or {}}, sort_keys=True)
    return hmac.new(_the_key(key), content.encode(), hashlib.sha256).hexdigest()


def part(ref: str, found: str, *, key: bytes | None = None) -> str:
    """One referenced object's part of the hash ("Kind/name", and its data digest or ABSENT)."""
    return hmac.new(_the_key(key), f"{ref}:{found}".encode(), hashlib.sha256).hexdigest()[:_PART_HEX]


def combine(parts: list[tuple[str, str]]) -> str:
    """The config digest the template hash is built with, from the parts alone (already keyed:
    a plain hash suffices, and anyone may recompute it from status.current.parts)."""
    return hashlib.sha256("\n".join(f"{ref}={p}" for ref, p in parts).encode()).hexdigest()[:_PART_HEX]


def is_part(value: str) -> bool:
    """A part of this scheme, or UNSEEN (not one of the older unkeyed scheme)."""
    return value == UNSEEN or (len(value) == _PART_HEX and all(c in "0123456789abcdef" for c in value))


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
    before: dict[str, str] | None = None,
) -> tuple[str, list[str], list[str], list[tuple[str, str]], tuple[str, list[tuple[str, str]]] | None]:
    """(digest over the parts of every referenced object, required ones missing, ones not readable,
    each object's part as ("Kind/name", part), and what to adopt or None). An object the
    caller's view shows absent is not read; one whose digest `cache` holds at the version the view
    shows is not read again.

    `before` is status.current.parts (what the serving generation was built from). Readability
    never changes the digest: an unreadable object keeps its part from `before` (UNSEEN if it had
    none), and an object that was UNSEEN keeps UNSEEN while readable, so nothing hands off; its
    value read now is offered for adoption instead: (the digest with those values, the parts),
    which the lifecycle records as the serving generation's (no handoff), so that its later
    changes are seen."""
    if not refs:
        return "", [], [], [], None
    before = before or {}
    each: list[tuple[str, str]] = []
    seen: list[tuple[str, str]] = []
    missing: list[str] = []
    unreadable: list[str] = []
    for kind, name, optional in refs:
        ref = f"{kind}/{name}"
        found = await _found(kind, namespace, name, lookup, cache)
        kept = before.get(ref, UNSEEN)
        kept = kept if is_part(kept) else UNSEEN
        if found == UNREADABLE:
            unreadable.append(ref)
            each.append((ref, kept))
            seen.append((ref, kept))
            continue
        if found == ABSENT and not optional:
            missing.append(ref)
        now = part(ref, found)
        each.append((ref, UNSEEN if before.get(ref) == UNSEEN else now))
        seen.append((ref, now))
    adopt = (combine(seen), seen) if seen != each else None
    return combine(each), missing, unreadable, each, adopt
