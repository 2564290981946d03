"""baton.cache.store fed by several informers (sharded replicas: one per held range, one for
objects without the hash-bucket label): lists and deletions concern only their own selection,
an object moving between two selections survives either order of their events, and a stopped
range's objects are forgotten quietly."""

from __future__ import annotations

from typing import Any

from baton.cache import store as store_mod
from baton.cache import views
from baton.model import names


def pod(name: str, rv: int, bucket: str | None = None) -> dict[str, Any]:
    labels = {names.LABEL_RUNTIME: name}
    if bucket is not None:
        labels[names.LABEL_HASH_BUCKET] = bucket
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": str(rv),
                         "labels": labels}}


def in_bucket_0a(obj: dict[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_HASH_BUCKET) == "0a"


def new_store() -> tuple[store_mod.Store, list[tuple[Any, Any]]]:
    s = store_mod.Store(selected_by=names.LABEL_RUNTIME)
    seen: list[tuple[Any, Any]] = []
    s.listeners.append(lambda old, new: seen.append((old, new)))
    return s, seen


def test_a_list_removes_only_what_its_own_selection_lost() -> None:
    s, _ = new_store()
    s.replace("ns", [pod("old", 1)], scope=views.unlabelled)
    s.replace("ns", [pod("a", 2, "0a")], scope=in_bucket_0a)
    assert {o["metadata"]["name"] for o in s.items()} == {"old", "a"}
    # The unlabelled informer lists again and finds nothing: the labelled pod stays.
    s.replace("ns", [], scope=views.unlabelled)
    assert {o["metadata"]["name"] for o in s.items()} == {"a"}
    # Without a scope (one informer per store) a list still removes everything it lacks.
    s.replace("ns", [], scope=None)
    assert len(s) == 0


def test_an_object_labelled_meanwhile_survives_both_orders_of_the_two_watches() -> None:
    # The label added at version 5: the unlabelled watch says DELETED (old content, version 5),
    # the range's watch says ADDED (version 5); they may arrive in either order.
    for order in ("deleted-first", "added-first"):
        s, _ = new_store()
        s.apply(pod("p", 3), watched=True)
        events = [("DELETED", pod("p", 5)), ("ADDED", pod("p", 5, "0a"))]
        if order == "added-first":
            events.reverse()
        for kind, obj in events:
            if kind == "ADDED":
                s.apply(obj, watched=True)
            else:
                s.delete(obj, scope=views.unlabelled)
        kept = s.get("ns", "p")
        assert kept is not None, order
        assert kept["metadata"]["labels"][names.LABEL_HASH_BUCKET] == "0a", order


def test_a_write_reply_at_a_deleted_version_stays_deleted() -> None:
    # Read-your-writes keeps its rule: a reply as old as the deletion does not bring it back.
    s, _ = new_store()
    s.apply(pod("p", 3))
    s.delete(pod("p", 7))
    assert not s.apply(pod("p", 7))
    assert s.get("ns", "p") is None


def test_a_real_deletion_seen_by_the_unlabelled_watch_removes_the_unlabelled_object() -> None:
    s, seen = new_store()
    s.apply(pod("p", 3), watched=True)
    assert s.delete(pod("p", 9), scope=views.unlabelled)
    assert s.get("ns", "p") is None and seen[-1][1] is None


def test_drop_forgets_a_ranges_objects_quietly_and_they_list_again() -> None:
    s, seen = new_store()
    s.replace("ns", [pod("a", 2, "0a"), pod("b", 3, "0b")], scope=None)
    calls = len(seen)
    assert s.drop(in_bucket_0a) == 1
    assert s.get("ns", "a") is None and s.get("ns", "b") is not None
    assert len(seen) == calls, "no listener runs for a dropped object"
    assert s.by_label("ns", "a") == []
    # Listed again at the same version (no tombstone was kept).
    s.replace("ns", [pod("a", 2, "0a")], scope=in_bucket_0a)
    assert s.get("ns", "a") is not None
