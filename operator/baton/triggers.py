"""Which runtimes an object change wakes, and when. Pure: no I/O, no clock, no queue.

Each trigger takes a watch event's (old, new) objects and returns the (key, delay) pairs to
enqueue: delay 0 wakes the runtime now, a positive delay lets a burst of events settle first.
The controller applies them; the tests read them as tables.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

Key = tuple[str, str]
Wake = tuple[Key, float]
Trigger = Callable[[dict[str, Any] | None, dict[str, Any] | None], list[Wake]]

# A claim only changes what a retire would do: while the runtime is in no transition its claims'
# events wait this long, so a burst of them (an agent forking twenty branches) is one pass.
CLAIM_SETTLE_SECONDS = 1.0


def on_runtime(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Wake]:
    obj = new or old
    if obj is None:
        return []
    meta = obj["metadata"]
    return [((meta.get("namespace") or "", meta["name"]), 0.0)]


def on_claim(old: dict[str, Any] | None, new: dict[str, Any] | None, *,
             runtime_of: Callable[[dict[str, Any]], str | None], in_transition: Callable[[str, str], bool]) -> list[Wake]:
    """A claim pins (or stops pinning) the generation of the runtime it names. Its status is
    ours (Bound/Stale): an update that leaves the spec alone (same metadata.generation) changes
    nothing to decide on, so our own phase writes never wake the runtime again."""
    if old is not None and new is not None and (
            (old.get("metadata") or {}).get("generation") == (new.get("metadata") or {}).get("generation")):
        return []
    wakes: list[Wake] = []
    for obj in (old, new):
        runtime = runtime_of(obj) if obj is not None else None
        if obj is None or not runtime:
            continue
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        # A retire may be waiting on this claim: at once; otherwise let a burst settle.
        wakes.append(((ns, runtime), 0.0 if in_transition(ns, runtime) else CLAIM_SETTLE_SECONDS))
    return wakes


def by_label(label: str) -> Trigger:
    """The runtime an object names in `label` (its pods, Service, EndpointSlices)."""
    def trigger(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Wake]:
        wakes: list[Wake] = []
        for obj in (old, new):
            if obj is None:
                continue
            meta = obj.get("metadata") or {}
            value = (meta.get("labels") or {}).get(label)
            if value:
                wakes.append(((meta.get("namespace") or "", value), 0.0))
        return wakes
    return trigger


def on_lease(label: str) -> Trigger:
    """The runtime a Lease names in `label`. A renewal (ours or another's) changes nothing to
    decide on: only a change of holder (or a Lease gone) wakes the runtime. Expiry of a foreign
    Lease is a timed wake-up."""
    def holder(obj: dict[str, Any] | None) -> object:
        return None if obj is None else (obj.get("spec") or {}).get("holderIdentity") or ""

    def trigger(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Wake]:
        if old is not None and new is not None and holder(old) == holder(new):
            return []
        obj = new or old
        meta = (obj or {}).get("metadata") or {}
        runtime = (meta.get("labels") or {}).get(label)
        if not runtime:
            return []
        return [((meta.get("namespace") or "", runtime), 0.0)]
    return trigger


def on_gateway_pod(old: dict[str, Any] | None, new: dict[str, Any] | None, *,
                   endpoint: Callable[[dict[str, Any] | None], object],
                   routed: Callable[[], Iterable[Key]]) -> list[Wake]:
    """A gateway pod that starts or stops taking calls (`endpoint` of it changed: Ready, IP, port,
    deletion) changes the EndpointSlice of every runtime routed through the gateway; any other
    change of it (a status heartbeat, a label) wakes none."""
    if endpoint(old) == endpoint(new):
        return []
    return [(key, 0.0) for key in routed()]


class ConfigIndex:
    """(namespace, kind, name) of a ConfigMap/Secret -> the runtimes whose template references it.
    `on_unreferenced(namespace, kind, name)` hears of an object no runtime references any more."""

    def __init__(self, *, on_unreferenced: Callable[[str, str, str], None] | None = None) -> None:
        self.users: dict[tuple[str, str, str], set[str]] = {}
        self._on_unreferenced = on_unreferenced

    def update(self, key: Key, refs: list[tuple[str, str, bool]]) -> None:
        ns, runtime = key
        wanted = {(ns, kind, name) for kind, name, _ in refs}
        for ref_key, users in list(self.users.items()):
            if ref_key[0] == ns and runtime in users and ref_key not in wanted:
                users.discard(runtime)
                if not users:
                    del self.users[ref_key]
                    if self._on_unreferenced is not None:
                        self._on_unreferenced(*ref_key)
        for ref_key in wanted:
            self.users.setdefault(ref_key, set()).add(runtime)

    def on_config(self, kind: str) -> Trigger:
        """The runtimes referencing a ConfigMap/Secret that changed. The view is metadata only,
        so any new resourceVersion wakes them: the pass reads the data (one GET) and hands off
        only if its digest changed."""
        def trigger(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Wake]:
            obj = new or old
            if obj is None or (old is not None and new is not None and _rv(old) == _rv(new)):
                return []
            meta = obj["metadata"]
            ns = meta.get("namespace") or ""
            return [((ns, runtime), 0.0) for runtime in sorted(self.users.get((ns, kind, meta["name"]), ()))]
        return trigger


def _rv(obj: dict[str, Any]) -> object:
    return (obj.get("metadata") or {}).get("resourceVersion")


def resync(keys: Iterable[Key], *, period: float, draw: Callable[[], float]) -> list[Wake]:
    """Every key once, its wake-up drawn over the period (`draw` in [0, 1)), so a periodic
    resync is a low, even rate of passes instead of one burst of every runtime at once."""
    return [(key, period * draw()) for key in keys]
