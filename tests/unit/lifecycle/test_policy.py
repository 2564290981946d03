"""spec.handoff.policy (issue 10, step 1): Immediate hands a change off at once; WhenIdle waits for
the drain probe to say idle, at most budgets.pendingSeconds; Manual waits for a reset naming the
current generation. A waiting change shows UpdatePending=True and status.pending; a reset,
suspend or deletion is never delayed. Table rows as in test_idle.py, frozen clock.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.lifecycle import decide
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as sp
from baton.model import status as st

from .. import builders as b
from ..expect import Ev, Unannotate, WS, case, check_plan

pytestmark = pytest.mark.unit

S, K, T, C = st.Step, st.TransitionKind, st.Trigger, st.ConditionType
P = sp.HandoffPolicy
NOW, at = b.NOW, b.at


def spec(policy: P, *, probe: bool = True, **kw: Any) -> sp.ToolRuntimeSpec:
    return b.spec(probe=probe, **kw).model_copy(update={"handoff": sp.Handoff(policy=policy)})


def waiting(policy: P, *, since: float = -10.0, template_hash: str = b.HASH2,
            changed: tuple[str, ...] = ("template or referenced config",)) -> st.ToolRuntimeStatus:
    """Serving g7, a change to HASH2 recorded as pending `since` seconds ago."""
    reason = "WaitingForReset" if policy == P.MANUAL else "WaitingForIdle"
    conds = b.steady_conditions(7) + (b.cond(C.UPDATE_PENDING, True, reason, "recorded"),)
    return b.status(pending=st.PendingChange(template_hash=template_hash, since=at(since), changed=changed),
                    conditions=conds)


# The serving g7 taken out of its Service in the plan that starts its retire (nothing pins it).
FLIP = p.SetServing(b.name(7), "uid-7", False, pins_of=7)
LOST_FLIP = p.SetServing(b.name(7), "uid-7", False)  # a lost pod is not pinned: no pin gate


BEGIN_HANDOFF = {"transition.kind": K.HANDOFF, "transition.step": S.STOPPING_ADMISSION, "transition.to": 8}
TAKEN_UP = {"pending": None, "UpdatePending": ("False", "UpToDate")}

CASES = [
    case("immediate-hands-off-at-once",
         b.observed(spec_=spec(P.IMMEDIATE), desired_hash=b.HASH2),
         [WS({**BEGIN_HANDOFF, "transition.trigger": T.TEMPLATE_CHANGED, "pending": None}),
          Ev("Normal", "TransitionStarted"), p.Record(p.Metric.TRANSITIONS, (("kind", "Handoff"),)), FLIP], 0),
    case("when-idle-first-seen-is-recorded-not-handed-off",
         b.observed(spec_=spec(P.WHEN_IDLE), desired_hash=b.HASH2),
         [WS({"transition": None, "pending.template_hash": b.HASH2, "pending.since": NOW,
              "UpdatePending": ("True", "WaitingForIdle")}),
          Ev("Normal", "WaitingForIdle", "budgets.pendingSeconds=600")], 0),
    case("manual-first-seen-is-recorded-naming-the-reset",
         b.observed(spec_=spec(P.MANUAL), desired_hash=b.HASH2),
         [WS({"transition": None, "pending.template_hash": b.HASH2, "UpdatePending": ("True", "WaitingForReset")}),
          Ev("Normal", "WaitingForReset", 'baton.dev/reset: "7"')], 0),
    case("manual-first-seen-without-the-lease-takes-it-to-record",
         b.observed(spec_=spec(P.MANUAL), desired_hash=b.HASH2, lease=b.lease_free()),
         [p.AcquireLease(6)], 0),
    case("manual-recorded-waits-without-lease-or-writes",
         b.observed(spec_=spec(P.MANUAL), status_=waiting(P.MANUAL), desired_hash=b.HASH2, lease=b.lease_free()),
         [], None),
    case("manual-recorded-hands-its-lease-back",
         b.observed(spec_=spec(P.MANUAL), status_=waiting(P.MANUAL), desired_hash=b.HASH2),
         [p.ReleaseLease()], None),
    case("manual-reset-naming-the-current-generation-hands-off",
         b.observed(spec_=spec(P.MANUAL), status_=waiting(P.MANUAL), desired_hash=b.HASH2,
                    annotations={names.ANN_RESET: "7"}),
         [WS({**BEGIN_HANDOFF, **TAKEN_UP, "transition.trigger": T.RESET}),
          Ev("Normal", "TransitionStarted"), p.Record(p.Metric.TRANSITIONS, (("kind", "Handoff"),)), FLIP,
          Unannotate(names.ANN_RESET, "7")], 0),
    case("manual-suspend-is-not-delayed",
         b.observed(spec_=spec(P.MANUAL, suspend=True), status_=waiting(P.MANUAL), desired_hash=b.HASH2),
         [WS({"transition.kind": K.RETIRE, "transition.trigger": T.SUSPENDED, **TAKEN_UP}),
          Ev("Normal", "TransitionStarted"), p.Record(p.Metric.TRANSITIONS, (("kind", "Retire"),)), FLIP], 0),
    case("manual-deletion-is-not-delayed",
         b.observed(spec_=spec(P.MANUAL), status_=waiting(P.MANUAL), desired_hash=b.HASH2, deleting=True),
         [WS({"transition.kind": K.DELETE, "transition.trigger": T.DELETED, **TAKEN_UP}),
          Ev("Normal", "TransitionStarted"), p.Record(p.Metric.TRANSITIONS, (("kind", "Delete"),)), FLIP], 0),
    case("when-idle-lost-pod-is-not-delayed",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE), desired_hash=b.HASH2,
                    pods=(b.pod(7, phase="Failed"),)),
         [WS({"transition.trigger": T.POD_LOST, **TAKEN_UP}), Ev("Normal", "TransitionStarted"),
          p.Record(p.Metric.TRANSITIONS, (("kind", "Handoff"),)), Ev("Warning", "PodLost"), LOST_FLIP], 0),
    case("when-idle-due-check-takes-the-lease-to-probe",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE), desired_hash=b.HASH2, lease=b.lease_free()),
         [p.AcquireLease(6)], 0),
    case("when-idle-checked-lately-waits-for-the-interval-without-the-lease",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE), desired_hash=b.HASH2, lease=b.lease_free(),
                    idle_checked_at=at(-2)),
         [], 3.0),
    case("when-idle-probed-busy-hands-the-lease-back-until-the-next-check",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE), desired_hash=b.HASH2,
                    drain_idle=False, idle_checked_at=NOW),
         [p.ReleaseLease()], 5.0),
    case("when-idle-held-but-checked-lately-does-not-check-again",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE), desired_hash=b.HASH2,
                    idle_checked_at=at(-2)),
         [p.ReleaseLease()], 3.0),
    case("when-idle-next-check-never-later-than-the-budget",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE, since=-598), desired_hash=b.HASH2,
                    drain_idle=False, idle_checked_at=NOW),
         [p.ReleaseLease()], 2.05),
    case("when-idle-probed-idle-hands-off",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE), desired_hash=b.HASH2,
                    drain_idle=True, idle_checked_at=NOW),
         [WS({**BEGIN_HANDOFF, **TAKEN_UP, "transition.message": "WhenIdle: the drain probe said idle"}),
          Ev("Normal", "TransitionStarted"), p.Record(p.Metric.TRANSITIONS, (("kind", "Handoff"),)), FLIP], 0),
    case("when-idle-past-pending-seconds-hands-off-anyway",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE, since=-600), desired_hash=b.HASH2,
                    lease=b.lease_free(), idle_checked_at=at(-1)),
         [p.AcquireLease(6)], 0),
    case("when-idle-past-pending-seconds-with-the-lease-begins",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE, since=-600), desired_hash=b.HASH2,
                    drain_idle=False),
         [WS({**BEGIN_HANDOFF, **TAKEN_UP,
              "transition.message": "WhenIdle: not idle within budgets.pendingSeconds=600; handing off anyway"}),
          Ev("Normal", "TransitionStarted"), p.Record(p.Metric.TRANSITIONS, (("kind", "Handoff"),)), FLIP], 0),
    case("change-undone-clears-the-pending-change",
         b.observed(spec_=spec(P.MANUAL), status_=waiting(P.MANUAL), desired_hash=b.HASH),
         [WS({**TAKEN_UP, "transition": None, "UpdatePending.message": "the spec matches the serving generation"})], 0),
    case("a-further-change-keeps-the-first-since",
         b.observed(spec_=spec(P.WHEN_IDLE), status_=waiting(P.WHEN_IDLE, since=-100), desired_hash="hash-c"),
         [WS({"pending.template_hash": "hash-c", "pending.since": at(-100)}), Ev("Normal", "WaitingForIdle")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", CASES)
def test_handoff_policy(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_plan(decide(o, now), expected, wait)


def _with_parts(policy: P, desired: dict[str, str]) -> obs.Observed:
    status = b.status()
    assert status.current is not None
    current = status.current.model_copy(update={"parts": {"template": "t1", "ConfigMap/cfg": "c1", "Secret/key": "s1"}})
    return b.observed(spec_=spec(policy), status_=status.model_copy(update={"current": current}),
                      desired_hash=b.HASH2, desired_parts=tuple(desired.items()))


@pytest.mark.parametrize("desired, named", [
    ({"template": "t1", "ConfigMap/cfg": "c2", "Secret/key": "s1"}, ("ConfigMap/cfg",)),
    ({"template": "t2", "ConfigMap/cfg": "c1", "Secret/key": "s1"}, ("template",)),
    ({"template": "t2", "ConfigMap/cfg": "c1", "Secret/key": "s2"}, ("template", "Secret/key")),
    ({"template": "t2", "ConfigMap/cfg": "c1"}, ("template", "Secret/key")),  # a reference removed
])
def test_the_pending_change_names_what_changed(desired: dict[str, str], named: tuple[str, ...]) -> None:
    for policy in (P.WHEN_IDLE, P.MANUAL):
        [write] = decide(_with_parts(policy, desired), NOW).find(p.WriteStatus)
        assert write.status.pending.changed == named
        cond = write.status.condition(C.UPDATE_PENDING)
        assert cond is not None and cond.message.startswith(f"{', '.join(named)} changed since generation 7 started")


def test_a_new_generation_records_what_it_was_built_from() -> None:
    parts = (("template", "t2"), ("ConfigMap/cfg", "c2"))
    t = b.transition(S.CONNECTING, to_uid=b.uid(8), template_hash=b.HASH2, deadline=30.0)
    o = b.observed(status_=b.in_flight(t), pods=(b.pod(8, serving=True, template_hash=b.HASH2),),
                   desired_hash=b.HASH2, desired_parts=parts)
    [write] = decide(o, NOW).find(p.WriteStatus)
    assert write.status.current is not None and write.status.current.parts == dict(parts)
    # Built from another hash than the one desired now: its parts are unknown, never guessed.
    [write] = decide(o.model_copy(update={"desired_hash": "hash-c"}), NOW).find(p.WriteStatus)
    assert write.status.current is not None and write.status.current.parts is None
