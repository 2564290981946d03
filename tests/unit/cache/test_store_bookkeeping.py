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


def test_an_object_without_bookkeeping_is_kept_as_it_came() -> None:
    s = store_mod.Store(selected_by=names.LABEL_RUNTIME)
    plain = pod(5)
    s.apply(plain)
    assert s.get("ns", "alpha") is plain


def test_a_store_with_its_own_transform_keeps_what_that_returns() -> None:
    s = store_mod.Store(index_label=None, transform=lambda o: {"metadata": {"name": o["metadata"]["name"],
                                                                             "namespace": "ns"}})
    s.apply(pod(6, managedFields=MANAGED))
    assert s.get("ns", "alpha") == {"metadata": {"name": "alpha", "namespace": "ns"}}
