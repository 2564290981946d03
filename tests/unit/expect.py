"""Expectations on a Plan: exact action types in order, key fields of each, and the wait."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import re
from typing import Any

import pytest

from baton import lifecycle
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import names, shardhash
from baton.model import observed as obs
from baton.model import status as st

from . import builders as b


def resolve(obj: Any, path: str) -> Any:
    """`transition.step`, `history[-1].outcome`, `Ready` -> (status, reason), `Ready.message`,
    `history#gens` -> tuple of generations."""
    if path == "history#gens":
        return tuple(h.generation for h in obj.history)
    for i, part in enumerate(path.split(".")):
        m = re.fullmatch(r"(\w+)(?:\[(-?\d+)\])?", part)
        assert m, path
        attr, index = m.group(1), m.group(2)
        if i == 0 and attr in {c.value for c in st.ConditionType}:
            c = obj.condition(st.ConditionType(attr))
            assert c is not None, f"condition {attr} missing"
            if path == attr:
                return (c.status, c.reason)
            obj = c
            continue
        if obj is None:
            return None
        obj = getattr(obj, attr)
        if index is not None:
            obj = obj[int(index)]
    return obj


class Expectation:
    kind: str

    def check(self, action: Any) -> None:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class WS(Expectation):
    """A WriteStatus; `fields` maps a path (see resolve) to the wanted value."""

    fields: dict[str, Any]
    kind: str = "WriteStatus"

    def check(self, action: Any) -> None:
        assert isinstance(action, p.WriteStatus)
        for path, want in self.fields.items():
            got = resolve(action.status, path)
            assert got == want, f"status.{path}: got {got!r}, want {want!r}"


@dataclasses.dataclass(frozen=True)
class Ev(Expectation):
    type: str
    reason: str
    contains: str = ""
    kind: str = "Event"

    def check(self, action: Any) -> None:
        assert isinstance(action, p.Event)
        assert (action.type, action.reason) == (self.type, self.reason), action
        assert self.contains in action.message, f"{self.contains!r} not in {action.message!r}"


@dataclasses.dataclass(frozen=True)
class Rec(Expectation):
    metric: p.Metric
    labels: tuple[tuple[str, str], ...] = ()
    value: float | None = None
    kind: str = "Record"

    def check(self, action: Any) -> None:
        assert isinstance(action, p.Record)
        assert (action.metric, action.labels) == (self.metric, self.labels), action
        if self.value is not None:
            assert action.value == self.value, action


@dataclasses.dataclass(frozen=True)
class Unannotate(Expectation):
    """A RemoveAnnotation of `key`, guarded by the value acted on (`value`; None: any)."""

    key: str
    value: str | None = None
    kind: str = "RemoveAnnotation"

    def check(self, action: Any) -> None:
        assert isinstance(action, p.RemoveAnnotation)
        assert action.key == self.key, action
        if self.value is not None:
            assert action.value == self.value, action


def step_time(step: str, value: float | None = None) -> Rec:
    return Rec(p.Metric.STEP_DURATION, (("step", step),), value)


@dataclasses.dataclass(frozen=True)
class NewPod(Expectation):
    """A CreatePod of generation `gen` stamped with fencing token `token`."""

    gen: int
    token: int
    template_hash: str = b.HASH
    kind: str = "CreatePod"

    def check(self, action: Any) -> None:
        assert isinstance(action, p.CreatePod)
        m = action.manifest
        meta = m["metadata"]
        assert (m["apiVersion"], m["kind"]) == ("v1", "Pod")
        assert meta["name"] == b.name(self.gen) and meta["namespace"] == b.NS
        assert meta["labels"] == {
            "app": "search",  # the user's template labels are kept
            names.LABEL_RUNTIME: b.RT,
            names.LABEL_GENERATION: str(self.gen),
            names.LABEL_SERVING: "false",  # joins the Service only once Ready
            names.LABEL_HASH_BUCKET: shardhash.hash_bucket(b.RT_UID),  # sharded replicas select on it
        }
        assert meta["annotations"] == {
            "team": "tools",
            names.ANN_GENERATION: str(self.gen),
            names.ANN_FENCING_TOKEN: str(self.token),
            names.ANN_TEMPLATE_HASH: self.template_hash,
        }
        assert meta["ownerReferences"] == [{
            "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "name": b.RT, "uid": b.RT_UID,
            "controller": True, "blockOwnerDeletion": True,
        }]
        # The template's spec, and the fence handed to every container (docs/hooks.md).
        spec = copy.deepcopy(b.TEMPLATE["spec"])
        for c in spec["containers"]:
            c["env"] = [*(c.get("env") or []), *mf.fence_env(namespace=b.NS, runtime=b.RT)]
        assert m["spec"] == spec


def kind_of(e: Any) -> str:
    return e.kind if isinstance(e, Expectation) else type(e).__name__


def check_plan(plan: p.Plan, expected: list[Any], wait: float | None) -> None:
    assert plan.kinds() == [kind_of(e) for e in expected], f"actions: {plan.actions!r} ({plan.note})"
    for action, e in zip(plan.actions, expected):
        if isinstance(e, Expectation):
            e.check(action)
        else:
            assert action == e
    if wait is None:
        assert plan.wait_seconds is None, f"wait {plan.wait_seconds} ({plan.note})"
    else:
        assert plan.wait_seconds is not None, f"wait None ({plan.note})"
        assert abs(plan.wait_seconds - wait) < 1e-6, f"wait {plan.wait_seconds}, want {wait} ({plan.note})"


def case(id: str, o: obs.Observed, expected: list[Any], wait: float | None, now: datetime.datetime = b.NOW) -> Any:
    """One row of a decide() table: the observation, the clock, the actions expected, the wait."""
    return pytest.param(o, now, expected, wait, id=id)


def check_decide(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    """decide(o, now) returns exactly `expected` and waits `wait`."""
    check_plan(lifecycle.decide(o, now), expected, wait)
