"""decide() with ToolRuntimeClaims (issue 10, step 4): a pinned generation is not retired before
its pins resolve: admission is not stopped, Progressing=True AwaitingPinRelease, bounded by
budgets.pinSeconds; past it RetirementBlocked=True (fail closed: it keeps serving); a person may
force-retire it naming the generation. Multi-pass scenarios on the fake executor, frozen clock."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from baton.lifecycle import pins as pn
from baton.lifecycle import plan as p
from baton.lifecycle import decide
from baton.model import claims as cm
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, Rec, Unannotate, check_plan

pytestmark = pytest.mark.unit

S, K, T, C = st.Step, st.TransitionKind, st.Trigger, st.ConditionType
CS = cm.ClaimState
NOW, at = b.NOW, b.at
FORCE = names.ANN_FORCE_RETIRE


_BOUND = {"Bound": "True", "Stale": "False"}


def claim(name: str, state: CS, *, generation: int = 7, branch: str = "b", references: tuple[str, ...] = (),
          phase: str | None = "Bound", bound: str | None = "as phase") -> cm.Claim:
    """A claim whose status (phase, and the Bound condition saying the same unless `bound`) is
    as this version writes it."""
    return cm.Claim(name=name, uid=f"uid-{name}", runtime=b.RT, generation=generation, fork="plan-42",
                    branch=branch, state=state, references=references, phase=phase,
                    bound=_BOUND.get(phase or "") if bound == "as phase" else bound)


ELIGIBLE = claim("plan-42-b", CS.COMMIT_ELIGIBLE)


def changed(*claims: cm.Claim, **kw: Any) -> obs.Observed:
    """Serving g7, the template changed (HASH2), these claims."""
    kw.setdefault("desired_hash", b.HASH2)
    return b.observed(claims=claims, **kw)


def flips_serving_off(plan: p.Plan) -> bool:
    return any(a.uid == b.uid(7) and not a.serving for a in plan.find(p.SetServing)) or any(
        a.uid == b.uid(7) for a in plan.find(p.DeletePod) + plan.find(p.ForceDeletePod))


# 1. The gate at the start of a retire, for every trigger -------------------------------------

PINNED_BEGIN = {"transition.step": S.STOPPING_ADMISSION, "transition.pin_wait_since": NOW,
                "Progressing": ("True", "AwaitingPinRelease"), "Ready": ("True", "GenerationReady")}


def begin(kind: str, trigger: T) -> list[Any]:
    return [WS({**PINNED_BEGIN, "transition.trigger": trigger}), Ev("Normal", "AwaitingPinRelease", "plan-42-b"),
            Ev("Normal", "TransitionStarted"), Rec(p.Metric.TRANSITIONS, (("kind", kind),))]


@pytest.mark.parametrize("o, expected", [
    pytest.param(changed(ELIGIBLE), begin("Handoff", T.TEMPLATE_CHANGED), id="template-change"),
    pytest.param(b.observed(claims=(ELIGIBLE,), annotations={names.ANN_RESET: "7"}),
                 begin("Handoff", T.RESET) + [Unannotate(names.ANN_RESET, "7")], id="reset"),
    pytest.param(b.observed(claims=(ELIGIBLE,), spec_=b.spec(suspend=True)), begin("Retire", T.SUSPENDED), id="suspend"),
    pytest.param(b.observed(claims=(ELIGIBLE,), deleting=True), begin("Delete", T.DELETED), id="deletion"),
])
def test_every_trigger_waits_for_pins_without_stopping_admission(o: obs.Observed, expected: list[Any]) -> None:
    plan = decide(o, NOW)
    check_plan(plan, expected, 0)
    assert not flips_serving_off(plan)
    [write] = plan.find(p.WriteStatus)
    assert write.status.transition.message.startswith("retiring generation 7")
    assert "claims plan-42-b" in write.status.condition(C.PROGRESSING).message


def test_claims_not_yet_readable_hold_the_retire_as_if_pinned() -> None:
    plan = decide(changed(claims_known=False), NOW)
    [write] = plan.find(p.WriteStatus)
    assert write.status.transition.pin_wait_since == NOW and not flips_serving_off(plan)
    assert "not yet readable" in write.status.condition(C.PROGRESSING).message


def test_a_lost_pod_cannot_be_pinned() -> None:
    plan = decide(changed(ELIGIBLE, pods=(b.pod(7, phase="Failed"),)), NOW)
    [write] = plan.find(p.WriteStatus)
    assert write.status.transition.trigger == T.POD_LOST and write.status.transition.pin_wait_since is None


@pytest.mark.parametrize("claims", [
    pytest.param((), id="no-claims"),
    pytest.param((claim("r", CS.RELEASED),), id="released"),
    pytest.param((claim("s", CS.SPECULATIVE),), id="speculative"),
    pytest.param((claim("a", CS.ABANDONED),), id="abandoned"),
    pytest.param((claim("old", CS.COMMITTED, generation=6),), id="generation-moved-on"),
])
def test_the_fast_path_when_nothing_pins(claims: tuple[cm.Claim, ...]) -> None:
    [write] = decide(changed(*claims), NOW).find(p.WriteStatus)
    assert write.status.transition.pin_wait_since is None
    assert write.status.condition(C.PROGRESSING).reason == "StoppingAdmission"


# 2. Multi-pass: wait, block, release, force ------------------------------------------------------


def run(world: b.World, now: datetime.datetime, passes: int = 6) -> list[p.Plan]:
    """Passes at `now` while they ask to act at once (as a worker does)."""
    plans = []
    for _ in range(passes):
        plan = decide(world.o, now)
        plans.append(plan)
        world.apply(plan, now)
        if plan.wait_seconds != 0:
            break
    return plans


def transition(world: b.World) -> st.Transition:
    assert world.o.status.transition is not None
    return world.o.status.transition


def test_wait_then_blocked_then_released_resumes_with_a_fresh_drain_budget() -> None:
    w = b.World(changed(ELIGIBLE))
    plans = run(w, NOW)
    assert plans[-1].kinds() == ["ReleaseLease"] and plans[-1].wait_seconds == 600.0
    assert not any(flips_serving_off(pl) for pl in plans)
    assert w.o.pod_by_uid(b.uid(7)).serving  # admission not stopped

    # Woken early by an unrelated event: parked, no Lease taken, no write.
    assert decide(w.o, at(100)).actions == ()

    plans = run(w, at(600))
    kinds = [k for pl in plans for k in pl.kinds()]
    # Take the Lease, write its token (resuming), record the block, hand the Lease back.
    assert kinds == ["AcquireLease", "WriteStatus", "Event", "WriteStatus", "Event", "Record", "ReleaseLease"], kinds
    blocked = w.o.status.condition(C.RETIREMENT_BLOCKED)
    assert blocked is not None and (blocked.status, blocked.reason) == ("True", "PinnedByCommitEligibleClaim")
    assert "plan-42-b" in blocked.message and FORCE in blocked.message
    events = [a for pl in plans for a in pl.find(p.Event)]
    assert [(e.type, e.reason) for e in events] == [("Normal", "LeaseAcquired"), ("Warning", "PinnedByCommitEligibleClaim")]
    assert [a.metric for pl in plans for a in pl.find(p.Record)] == [p.Metric.RETIREMENTS_BLOCKED]
    assert plans[-1].wait_seconds is None  # blocked: waits for a claim event or a person
    assert w.o.pod_by_uid(b.uid(7)).serving
    assert decide(w.o, at(5000)).actions == ()  # stays blocked, said once

    # The claim is released: the retire proceeds, admission stops, drain budget from now.
    w.o = w.o.model_copy(update={"claims": (ELIGIBLE.model_copy(update={"state": CS.RELEASED}),)})
    plans = run(w, at(6000))
    resumed = plans[2].find(p.WriteStatus)[0].status  # after taking the Lease and writing its token
    t = resumed.transition
    assert t is not None and t.step == S.STOPPING_ADMISSION and t.pin_wait_since is None and not t.pin_blocked
    assert t.deadline == at(6000 + 30)  # drainSeconds from the release, not from the retire's start
    assert resumed.condition(C.RETIREMENT_BLOCKED).status == "False"
    assert plans[3].find(p.SetServing) == [p.SetServing(b.name(7), b.uid(7), False, pins_of=7)]


def test_force_retire_naming_the_generation_proceeds_and_is_recorded_in_history() -> None:
    w = b.World(changed(ELIGIBLE))
    run(w, NOW)
    w.o = w.o.model_copy(update={"annotations": {FORCE: "7"}})
    plans = run(w, at(10))
    kinds = [k for pl in plans for k in pl.kinds()]
    assert kinds[:3] == ["AcquireLease", "WriteStatus", "Event"]  # the Lease, its token written (resuming)
    resumed = plans[2]
    check_plan(resumed, [WS({"transition.pin_wait_since": None, "Progressing": ("True", "StoppingAdmission")}),
                         Rec(p.Metric.STEP_DURATION, (("step", "StoppingAdmission"),)),
                         Ev("Normal", "ForceRetired", 'baton.dev/force-retire: "7"'), Unannotate(FORCE, "7"),
                         Rec(p.Metric.FORCE_RETIRES)], 0)
    assert any(flips_serving_off(pl) for pl in plans)
    # Carry the retire to its end: the history entry of generation 7 says it was forced past pins.
    w.pod_event(b.uid(7), gone=True)
    run(w, at(20))
    [entry] = [h for h in w.o.status.history if h.generation == 7]
    assert entry.message is not None and "force-retired past pins (claims plan-42-b)" in entry.message


@pytest.mark.parametrize("value", ["6", "8", "seven"])
def test_a_stale_force_retire_is_refused_and_removed(value: str) -> None:
    w = b.World(changed(ELIGIBLE))
    run(w, NOW)
    w.o = w.o.model_copy(update={"annotations": {FORCE: value}})
    plans = run(w, at(10))
    stale = [pl for pl in plans if pl.find(p.RemoveAnnotation)]
    assert len(stale) == 1
    check_plan(stale[0], [Unannotate(FORCE, value), Ev("Warning", "StaleForceRetire", f"names generation {value}"),
                          Rec(p.Metric.STALE_VERBS, (("verb", "force-retire"),))], 0)
    assert transition(w).pin_wait_since == NOW and not any(flips_serving_off(pl) for pl in plans)


def test_force_retire_while_idle_is_stale() -> None:
    check_plan(decide(b.observed(annotations={FORCE: "7"}), NOW),
               [Unannotate(FORCE, "7"), Ev("Warning", "StaleForceRetire"),
                Rec(p.Metric.STALE_VERBS, (("verb", "force-retire"),))], 0)


def test_a_claim_arriving_after_the_retire_began_still_holds_it_before_admission_stops() -> None:
    t = b.transition(S.STOPPING_ADMISSION, deadline=20.0)
    o = b.observed(status_=b.in_flight(t), desired_hash=b.HASH2, claims=(ELIGIBLE,))
    plan = decide(o, NOW)
    check_plan(plan, [WS({"transition.pin_wait_since": NOW, "Progressing": ("True", "AwaitingPinRelease")}),
                      Ev("Normal", "AwaitingPinRelease")], 0)


# 3. Claim phases -------------------------------------------------------------------------------------


def test_claims_on_a_gone_generation_are_marked_stale_and_live_ones_bound() -> None:
    o = b.observed(status_=b.status(latest=7, history=b.history(6)),
                   claims=(claim("gone", CS.COMMITTED, generation=6, phase=None), claim("live", CS.SPECULATIVE, phase=None),
                           claim("future", CS.SPECULATIVE, generation=9, phase=None),
                           claim("said", CS.COMMITTED, generation=5, phase="Stale")))
    plan = decide(o, NOW)
    assert plan.kinds() == ["SetClaimPhase", "SetClaimPhase", "ReleaseLease"] and plan.wait_seconds is None
    assert [(a.name, a.phase) for a in plan.find(p.SetClaimPhase)] == [("gone", "Stale"), ("live", "Bound")]
    # Without the Lease: take it first (claims' status is written by the holder only).
    assert decide(o.model_copy(update={"lease": b.lease_free()}), NOW).kinds() == ["AcquireLease"]
    # A claim on a gone generation pins nothing, even Committed: the retire of 7 is not held.
    [write] = decide(o.model_copy(update={"desired_hash": b.HASH2}), NOW).find(p.WriteStatus)
    assert write.status.transition is not None and write.status.transition.pin_wait_since is None
    assert pn.pins(claims=o.claims, runtime=b.RT, generation=7).claims == ()


def test_claim_phases_carry_the_bound_condition_and_a_claim_of_an_earlier_version_gets_it() -> None:
    """A claim marked by an earlier version (phase, no Bound condition) is written once more, so
    it gets the condition; one whose condition says the same as its phase is left alone."""
    o = b.observed(status_=b.status(latest=7, history=b.history(6)),
                   claims=(claim("old-bound", CS.SPECULATIVE, bound=None),
                           claim("old-stale", CS.COMMITTED, generation=6, phase="Stale", bound=None),
                           claim("said", CS.SPECULATIVE)))
    plan = decide(o, NOW)
    assert [(a.name, a.phase, a.at) for a in plan.find(p.SetClaimPhase)] == [("old-bound", "Bound", NOW),
                                                                             ("old-stale", "Stale", NOW)]
    wire = cm.status_wire(cm.ClaimPhase.STALE, "generation 6 of search-mcp is gone (now 7)", NOW)
    assert wire == {"phase": "Stale", "message": "generation 6 of search-mcp is gone (now 7)", "conditions": [{
        "type": "Bound", "status": "False", "reason": "Stale", "message": "generation 6 of search-mcp is gone (now 7)",
        "lastTransitionTime": NOW.strftime("%Y-%m-%dT%H:%M:%SZ")}]}
    assert cm.status_wire(cm.ClaimPhase.BOUND, "m", NOW)["conditions"][0]["reason"] == "GenerationExists"


# 4. Property: a retire never proceeds while an eligible claim touches the generation's footprint ------

claims_strategy = hs.lists(
    hs.builds(lambda i, gen, fork, branch, state, refs: cm.Claim(
        name=f"c{i}", uid=f"u{i}", runtime=b.RT, generation=gen, fork=fork, branch=branch, state=state,
        references=tuple(refs), phase="Bound"),
        hs.integers(0, 10_000), hs.integers(5, 8), hs.sampled_from(["f1", "f2"]), hs.sampled_from(["a", "b", "c"]),
        hs.sampled_from(list(CS)), hs.lists(hs.sampled_from(["a", "b", "c"]), max_size=3, unique=True)),
    max_size=6, unique_by=lambda c: c.name)
TRIGGERS = {
    "template": dict(desired_hash=b.HASH2),
    "reset": dict(annotations={names.ANN_RESET: "7"}),
    "suspend": dict(spec_=b.spec(suspend=True)),
    "delete": dict(deleting=True),
}


@settings(max_examples=300, deadline=None)
@given(claims_strategy, hs.sampled_from(sorted(TRIGGERS)), hs.lists(hs.floats(0, 599), min_size=1, max_size=6))
def test_no_retire_while_an_eligible_claim_touches_the_footprint(claims: list[cm.Claim], trigger: str,
                                                                  times: list[float]) -> None:
    footprint = {(c.fork, c.branch) for c in claims if c.generation == 7}
    eligible = [c for c in claims if c.state in (CS.COMMIT_ELIGIBLE, CS.COMMITTED)
                and (c.generation == 7 or any((c.fork, r) in footprint for r in c.references))]
    w = b.World(b.observed(claims=tuple(claims), **TRIGGERS[trigger]))
    acted = []
    for seconds in sorted(times):
        w.o = w.o.model_copy(update={"lease": w.o.lease.model_copy(update={"unchanged_seconds": 0.0})})
        acted += run(w, at(seconds), passes=8)
    flipped = any(flips_serving_off(pl) for pl in acted)
    if eligible:
        assert not flipped, f"retired g7 while {[c.name for c in eligible]} pin it"
        assert w.o.pod_by_uid(b.uid(7)) is not None and w.o.pod_by_uid(b.uid(7)).serving
    else:
        assert flipped, "nothing pins g7, yet its retire did not stop admission"
