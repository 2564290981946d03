"""Which runtimes an object change wakes, and when (baton.triggers): pure, so read as tables."""
from __future__ import annotations

from typing import Any

import pytest

from baton import triggers
from baton.cache import views
from baton.model import names

NS = "agents"
SETTLE = triggers.CLAIM_SETTLE_SECONDS


def obj(name: str, *, labels: dict[str, str] | None = None, generation: int = 1, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": name, "generation": generation, "labels": labels or {}}, **fields}


def claim(name: str, runtime: str, *, generation: int = 1) -> dict[str, Any]:
    return obj(name, generation=generation, spec={"runtimeRef": {"name": runtime}})


def lease(holder: str, runtime: str = "search") -> dict[str, Any]:
    return obj(f"baton-{runtime}", labels={names.LABEL_RUNTIME: runtime}, spec={"holderIdentity": holder})


@pytest.mark.parametrize(("old", "new", "wakes"), [
    (None, obj("search"), [((NS, "search"), 0.0)]),
    (obj("search"), obj("search", generation=2), [((NS, "search"), 0.0)]),
    (obj("search"), None, [((NS, "search"), 0.0)]),
    (None, None, []),
])
def test_a_runtime_change_wakes_that_runtime_now(old: Any, new: Any, wakes: list[triggers.Wake]) -> None:
    assert triggers.on_runtime(old, new) == wakes


@pytest.mark.parametrize(("old", "new", "in_transition", "wakes"), [
    # A claim made: the runtime in no transition lets a burst settle; one in a transition at once.
    (None, claim("c1", "search"), False, [((NS, "search"), SETTLE)]),
    (None, claim("c1", "search"), True, [((NS, "search"), 0.0)]),
    # Its spec changed (a new metadata.generation): as made.
    (claim("c1", "search"), claim("c1", "search", generation=2), True, [((NS, "search"), 0.0), ((NS, "search"), 0.0)]),
    # Our own status write (same generation): nothing to decide on.
    (claim("c1", "search"), claim("c1", "search"), True, []),
    # Moved to another runtime: both.
    (claim("c1", "search", generation=1), claim("c1", "fetch", generation=2), False,
     [((NS, "search"), SETTLE), ((NS, "fetch"), SETTLE)]),
    (claim("c1", "search"), None, False, [((NS, "search"), SETTLE)]),
    # Naming no runtime: nothing.
    (None, obj("c1", spec={}), True, []),
])
def test_a_claim_wakes_the_runtime_it_names(old: Any, new: Any, in_transition: bool,
                                            wakes: list[triggers.Wake]) -> None:
    assert triggers.on_claim(old, new, runtime_of=views.claim_runtime,
                             in_transition=lambda ns, name: in_transition) == wakes


@pytest.mark.parametrize(("old", "new", "wakes"), [
    (None, obj("search-pod", labels={names.LABEL_RUNTIME: "search"}), [((NS, "search"), 0.0)]),
    # Relabelled: the runtime it left and the one it joined.
    (obj("p", labels={names.LABEL_RUNTIME: "search"}), obj("p", labels={names.LABEL_RUNTIME: "fetch"}),
     [((NS, "search"), 0.0), ((NS, "fetch"), 0.0)]),
    (obj("p", labels={names.LABEL_RUNTIME: "search"}), None, [((NS, "search"), 0.0)]),
    (None, obj("p", labels={"app": "search"}), []),
])
def test_a_labelled_object_wakes_the_runtime_its_label_names(old: Any, new: Any, wakes: list[triggers.Wake]) -> None:
    assert triggers.by_label(names.LABEL_RUNTIME)(old, new) == wakes


@pytest.mark.parametrize(("old", "new", "wakes"), [
    (lease("baton-a"), lease("baton-a"), []),  # a renewal, ours or another's
    (lease("baton-a"), lease("baton-b"), [((NS, "search"), 0.0)]),  # a new holder
    (lease("baton-a"), lease(""), [((NS, "search"), 0.0)]),  # released
    (lease("baton-a"), None, [((NS, "search"), 0.0)]),  # deleted
    (None, lease("baton-a"), [((NS, "search"), 0.0)]),  # created
    (None, obj("other-lease"), []),  # not a runtime's
])
def test_only_a_change_of_lease_holder_wakes_the_runtime(old: Any, new: Any, wakes: list[triggers.Wake]) -> None:
    assert triggers.on_lease(names.LABEL_RUNTIME)(old, new) == wakes


def config(name: str, rv: str) -> dict[str, Any]:
    """A ConfigMap/Secret as its metadata-only view keeps it."""
    return {"metadata": {"namespace": NS, "name": name, "resourceVersion": rv}}


def test_a_config_change_wakes_the_runtimes_that_reference_it_and_only_while_they_do() -> None:
    unreferenced: list[tuple[str, str, str]] = []
    index = triggers.ConfigIndex(on_unreferenced=lambda *ref: unreferenced.append(ref))
    on_configmap, on_secret = index.on_config("ConfigMap"), index.on_config("Secret")
    index.update((NS, "search"), [("ConfigMap", "settings", False), ("Secret", "api-key", True)])
    index.update((NS, "fetch"), [("ConfigMap", "settings", False)])
    assert on_configmap(config("settings", "d1"), config("settings", "d2")) == [((NS, "fetch"), 0.0), ((NS, "search"), 0.0)]
    assert on_configmap(config("settings", "d1"), config("settings", "d1")) == []  # same version
    assert on_secret(None, config("api-key", "d1")) == [((NS, "search"), 0.0)]
    assert on_configmap(config("api-key", "d1"), None) == []  # a ConfigMap of that name: not referenced
    index.update((NS, "search"), [("ConfigMap", "settings", False)])  # the Secret no longer referenced
    assert on_secret(config("api-key", "d1"), None) == []
    assert unreferenced == [(NS, "Secret", "api-key")]  # its cached digest can go
    assert index.users == {(NS, "ConfigMap", "settings"): {"search", "fetch"}}
    index.update((NS, "search"), [])
    assert len(unreferenced) == 1  # "fetch" still references the ConfigMap
    index.update((NS, "fetch"), [])
    assert index.users == {}
    assert unreferenced == [(NS, "Secret", "api-key"), (NS, "ConfigMap", "settings")]


def test_a_resync_wakes_every_runtime_once_spread_over_the_period() -> None:
    keys = [(NS, f"rt{i}") for i in range(5)]
    draws = iter([0.0, 0.2, 0.4, 0.6, 0.999])
    got = triggers.resync(keys, period=300.0, draw=lambda: next(draws))
    assert [k for k, _ in got] == keys
    assert [round(d, 1) for _, d in got] == [0.0, 60.0, 120.0, 180.0, 299.7]
    assert triggers.resync([], period=300.0, draw=lambda: 0.5) == []


def test_the_resync_period_is_bounded_and_named_when_wrong() -> None:
    from baton import settings
    assert settings.Settings.from_env({}).resync_seconds == 300
    assert settings.Settings.from_env({"BATON_RESYNC_SECONDS": "30"}).resync_seconds == 30
    for bad in ("0", "4", "86401", "soon"):
        with pytest.raises(ValueError, match="BATON_RESYNC_SECONDS"):
            settings.Settings.from_env({"BATON_RESYNC_SECONDS": bad})
