"""A store of one kind of object, keyed by (namespace, name), indexed by the runtime label.

No I/O. Informers and the executor feed it; `apply` keeps the newest version of each object.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable

from baton.model import names

Obj = dict[str, Any]
Key = tuple[str, str]
# (old or None, new or None): what changed; new None means deleted.
Listener = Callable[[Obj | None, Obj | None], None]

# What no reader of the views needs and every object may carry, often as large as the rest of it:
# the server's field ownership record, and kubectl's copy of the last applied manifest. Never
# kept (writes are patches or, for Leases, PUTs, which the server gives the stored
# managedFields back when the body has none).
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# How long a deleted object's resourceVersion is remembered. A write's reply arrives within its
# request timeout (at most a minute) or never; this is five times that.
TOMBSTONE_SECONDS = 300.0


def rv_of(obj: Obj | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


# Strings up to this long are shared between the stored objects (sys.intern): keys, and values
# such as names, UIDs (a pod names its runtime's), timestamps of one burst and condition types.
# Each decoded object otherwise holds its own copy of every one; shared, a cached pod takes
# about half the memory. Longer values (a script in an env var, a large annotation) stay apart.
SHARED_STRING_CHARS = 64
_CONTAINERS = (dict, list, str)


def compact(value: Any) -> Any:
    """`value` rebuilt with its dicts' keys and its short strings shared (`SHARED_STRING_CHARS`):
    equal to it, and no part of it is the caller's."""
    kind = type(value)
    if kind is dict:
        return {sys.intern(k) if type(k) is str else k: v if type(v) not in _CONTAINERS else compact(v)
                for k, v in value.items()}
    if kind is list:
        return [compact(v) for v in value]
    if kind is str:
        return sys.intern(value) if len(value) <= SHARED_STRING_CHARS else value
    return value


def kept_copy(obj: Obj) -> Obj:
    """What a store keeps of `obj` by default, built in one pass: `compact(obj)` without
    metadata.managedFields and kubectl's last-applied annotation. No part of it is the caller's."""
    kept: Obj = {}
    for key, value in obj.items():
        if key == "metadata" and type(value) is dict:
            kept["metadata"] = {sys.intern(k): _kept_annotations(v) if k == "annotations" else
                                v if type(v) not in _CONTAINERS else compact(v)
                                for k, v in value.items() if k != "managedFields"}
        else:
            kept[sys.intern(key) if type(key) is str else key] = compact(value)
    return kept


def _kept_annotations(value: Any) -> Any:
    if type(value) is not dict:
        return compact(value)
    return {sys.intern(k): compact(v) for k, v in value.items() if k != LAST_APPLIED}


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta["name"]))


class Store:
    def __init__(self, *, index_label: str | None = names.LABEL_RUNTIME, transform: Callable[[Obj], Obj] | None = None,
                 selected_by: str | None = None, index_by: Callable[[Obj], str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`selected_by`: the label its informer selects on. An object without it (a write's
        reply after someone removed the label) is out of the selection: no watch event would
        ever refresh it, so the store drops it instead of keeping a copy that goes stale."""
        self._selected_by = selected_by
        self._objects: dict[Key, Obj] = {}
        self._index_label = index_label
        self._index_by = index_by  # indexes by what it returns instead of a label (e.g. a spec field)
        self._index: dict[Key, set[str]] = {}
        self._transform = transform
        self.listeners: list[Listener] = []
        # Deleted objects' last resourceVersions: a late reply to an older write does not bring
        # a deleted object back. Kept TOMBSTONE_SECONDS (by `clock`), oldest first.
        self._deleted_rv: dict[Key, tuple[int, float]] = {}
        self._clock = clock

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._objects.get((namespace, name))

    def items(self) -> Iterable[Obj]:
        return self._objects.values()

    def by_label(self, namespace: str, value: str) -> list[Obj]:
        return [self._objects[(namespace, n)] for n in sorted(self._index.get((namespace, value), ()))
                if (namespace, n) in self._objects]

    def _label(self, obj: Obj | None) -> str | None:
        if obj is not None and self._index_by is not None:
            return self._index_by(obj)
        if obj is None or self._index_label is None:
            return None
        return ((obj.get("metadata") or {}).get("labels") or {}).get(self._index_label)

    def _reindex(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        before, after = self._label(old), self._label(new)
        if before == after:
            return
        if before is not None:
            names = self._index.get((key[0], before))
            if names is not None:
                names.discard(key[1])
                if not names:
                    del self._index[(key[0], before)]
        if after is not None:
            self._index.setdefault((key[0], after), set()).add(key[1])

    @property
    def reduces(self) -> bool:
        """The store keeps a reduced copy of each object (its transform), not the object."""
        return self._transform is not None

    def reduce(self, obj: Obj) -> Obj:
        """What the store keeps of `obj`: its transform's copy, else all of it but the
        bookkeeping, its strings shared with the other objects (`kept_copy`); never the caller's
        object itself."""
        if self._transform is not None:
            return self._transform(obj)
        return kept_copy(obj)

    def apply(self, obj: Obj, *, reduced: bool = False, watched: bool = False) -> bool:
        """Keep `obj` if it is newer than what is stored; True if it changed the view.
        `reduced`: `obj` is already what `reduce` returns (a list reduced page by page).
        `watched`: `obj` came from a list or watch, not a write's reply: a tombstone of the same
        version does not stop it (an object that moved between two informers of this store
        leaves one as DELETED and enters the other as ADDED at that one version, in either
        order; a real deletion's version is never listed or watched as a live object)."""
        if not reduced:
            obj = self.reduce(obj)
        if self._selected_by is not None and self._selected_by not in ((obj.get("metadata") or {}).get("labels") or {}):
            return self.delete(obj)
        key = key_of(obj)
        old = self._objects.get(key)
        rv = rv_of(obj)
        if old is not None and rv_of(old) >= rv:
            return False
        if old is None and key in self._deleted_rv and self._deleted_rv[key][0] >= rv + (1 if watched else 0):
            return False
        self._deleted_rv.pop(key, None)
        self._objects[key] = obj
        self._reindex(key, old, obj)
        for listener in self.listeners:
            listener(old, obj)
        return True

    def delete(self, obj: Obj, *, scope: Callable[[Obj], bool] | None = None) -> bool:
        """`scope`: the selection of the informer that saw it go (a store fed by several): the
        stored copy is left alone when it is outside that selection, i.e. it moved to another
        informer's (a newer version already applied) and only left this one's."""
        key = key_of(obj)
        old = self._objects.get(key)
        if old is None:
            return False
        if scope is not None and not scope(old):
            return False
        uid = (obj.get("metadata") or {}).get("uid")
        if uid and (old.get("metadata") or {}).get("uid") not in (None, uid):
            return False  # an older object of that name; the stored one is newer
        del self._objects[key]
        self._forget_old_tombstones()
        self._deleted_rv.pop(key, None)  # re-inserted last: the dict stays ordered by time
        self._deleted_rv[key] = (max(rv_of(obj), rv_of(old)), self._clock())
        self._reindex(key, old, None)
        for listener in self.listeners:
            listener(old, None)
        return True

    def _forget_old_tombstones(self) -> None:
        horizon = self._clock() - TOMBSTONE_SECONDS
        while self._deleted_rv:
            key, (_, at) = next(iter(self._deleted_rv.items()))
            if at > horizon:
                return
            del self._deleted_rv[key]

    def tombstones(self) -> int:
        """How many deleted objects' versions are remembered (bounded by TOMBSTONE_SECONDS)."""
        self._forget_old_tombstones()
        return len(self._deleted_rv)

    def replace(self, namespace: str | None, objs: list[Obj], *, reduced: bool = False,
                scope: Callable[[Obj], bool] | None = None) -> None:
        """A fresh list (of one namespace, or all): apply it, and delete what it no longer has.
        `reduced`: the objects are already what `reduce` returns. `scope`: the list's selection
        (a store fed by several informers): only what it selects can have gone from it."""
        if not reduced:
            objs = [self.reduce(o) for o in objs]
        seen = {key_of(o) for o in objs}
        for key, old in list(self._objects.items()):
            if (namespace is None or key[0] == namespace) and key not in seen and (scope is None or scope(old)):
                self.delete(old)
        for obj in objs:
            self.apply(obj, reduced=True, watched=True)

    def drop(self, scope: Callable[[Obj], bool]) -> int:
        """Forget every object `scope` selects, quietly: no listener runs and no tombstone is
        kept (an informer that stopped watching them; listed again later, they come back at
        the versions the server has). Returns how many went."""
        gone = [(key, old) for key, old in self._objects.items() if scope(old)]
        for key, old in gone:
            del self._objects[key]
            self._reindex(key, old, None)
        return len(gone)
