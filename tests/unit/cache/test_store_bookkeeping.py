"""baton.cache.store keeps no bookkeeping no reader needs: an object's managedFields and kubectl's
last-applied annotation are dropped whether the object came from a list, a watch or a write's
reply, and the caller's object is left as it was (a write's reply may still be read)."""

from __future__ import annotations

import copy
from typing import Any

from baton.cache import store as store_mod
from baton.model import names

MANAGED = [{"manager": "kwok", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}, "f:podIP": {}}}}]


def pod(rv: int, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "alpha", "namespace": "ns", "uid": "u1", "resourceVersion": str(rv),
                         "labels": {names.LABEL_RUNTIME: "alpha"}, **meta},
            "status": {"phase": "Running", "podIP": "10.0.0.7"}}


def test_managed_fields_and_last_applied_are_not_kept_the_rest_is() -> None:
    s = store_mod.Store(selected_by=names.LABEL_RUNTIME)
    sent = pod(3, managedFields=MANAGED,
               annotations={store_mod.LAST_APPLIED: '{"big": "manifest"}', "baton.dev/reset": "2"})
    before = copy.deepcopy(sent)
    assert s.apply(sent)
    kept = s.get("ns", "alpha")
    assert kept is not None
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"baton.dev/reset": "2"}
    assert kept["status"] == {"phase": "Running", "podIP": "10.0.0.7"}
    assert kept["metadata"]["labels"] == {names.LABEL_RUNTIME: "alpha"}
    assert sent == before  # the caller's copy untouched


def test_a_list_and_a_watch_event_are_slimmed_too() -> None:
    s = store_mod.Store(selected_by=names.LABEL_RUNTIME)
    s.replace("ns", [pod(3, managedFields=MANAGED)])
    assert "managedFields" not in s.get("ns", "alpha")["metadata"]  # type: ignore[index]
    s.apply(pod(4, managedFields=MANAGED), watched=True)
    kept = s.get("ns", "alpha")
    assert kept is not None and store_mod.rv_of(kept) == 4 and "managedFields" not in kept["metadata"]


def test_an_object_without_bookkeeping_is_kept_equal_its_strings_shared_between_objects() -> None:
    s = store_mod.Store(selected_by=names.LABEL_RUNTIME)
    plain = pod(5)
    s.apply(plain)
    kept = s.get("ns", "alpha")
    assert kept == plain and kept is not plain
    other = {"metadata": {"name": "beta", "namespace": "ns", "uid": "u2", "resourceVersion": "6",
                          "labels": {names.LABEL_RUNTIME: "beta"}},
             "status": {"phase": "".join(["Run", "ning"]), "podIP": "10.0.0.8"}}
    assert other["status"]["phase"] is not kept["status"]["phase"]
    s.apply(other)
    beta = s.get("ns", "beta")
    assert beta is not None
    # One copy of a short value and of every key, whichever object brought it.
    assert beta["status"]["phase"] is kept["status"]["phase"]
    assert next(iter(beta["status"])) is next(iter(kept["status"]))


def test_compact_keeps_long_strings_apart_and_everything_equal() -> None:
    long_value = "x" * (store_mod.SHARED_STRING_CHARS + 1)
    value = {"a": [1, 2.5, None, True, {"b": long_value, "c": "short"}], "d": {}}
    out = store_mod.compact(value)
    assert out == value
    assert out["a"] is not value["a"] and out["a"][4] is not value["a"][4]


def test_a_store_with_its_own_transform_keeps_what_that_returns() -> None:
    s = store_mod.Store(index_label=None, transform=lambda o: {"metadata": {"name": o["metadata"]["name"],
                                                                             "namespace": "ns"}})
    s.apply(pod(6, managedFields=MANAGED))
    assert s.get("ns", "alpha") == {"metadata": {"name": "alpha", "namespace": "ns"}}


def test_the_kept_copy_is_the_object_less_its_bookkeeping_and_shares_nothing_with_it() -> None:
    sent = pod(7, managedFields=MANAGED, annotations={store_mod.LAST_APPLIED: "{}", "a": "b"},
               ownerReferences=[{"kind": "ToolRuntime", "name": "alpha"}])
    before = copy.deepcopy(sent)
    kept = store_mod.kept_copy(sent)
    expected = copy.deepcopy(before)
    del expected["metadata"]["managedFields"]
    del expected["metadata"]["annotations"][store_mod.LAST_APPLIED]
    assert kept == expected
    assert sent == before
    assert kept["metadata"] is not sent["metadata"]
    assert kept["metadata"]["annotations"] is not sent["metadata"]["annotations"]
    assert kept["metadata"]["ownerReferences"][0] is not sent["metadata"]["ownerReferences"][0]
    assert kept["status"] is not sent["status"]
    # Odd shapes are kept as they came (no metadata dict, annotations not a dict).
    assert store_mod.kept_copy({"metadata": None, "x": [1]}) == {"metadata": None, "x": [1]}
    assert store_mod.kept_copy({"metadata": {"name": "n", "annotations": None}}) == {
        "metadata": {"name": "n", "annotations": None}}
