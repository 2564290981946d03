"""decide() against foreign actors and bad input (issue "Guarantees that hold against foreign
actors..."): ownership, one name per runtime, refusals with back-off, Lease expiry judged by
local observation, tolerant status, persisted verb waits. Table rows as in test_idle.py.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import conditions as conds
from baton.lifecycle import plan as p
from baton.lifecycle import decide, transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import Ev, NewPod, Rec, Unannotate, WS, case, check_plan, step_time

pytestmark = pytest.mark.unit

S, K, T, C = st.Step, st.TransitionKind, st.Trigger, st.ConditionType
M = p.Metric
NOW, at, uid = b.NOW, b.at, b.uid
RESET = names.ANN_RESET
OLD_QUIET = b.pod(7, serving=False)


def foreign(name: str = b.RT, *, labelled: bool = False, uid_: str = "uid-foreign") -> obs.PodInfo:
    """A pod Baton does not own (no controller ownerReference to the runtime)."""
    return b.pod(None, pod_name=name, uid_=uid_, serving=False).model_copy(update={"owned": False, "labelled": labelled})


def creating(**kw: Any) -> st.ToolRuntimeStatus:
    extra = {k: kw.pop(k) for k in list(kw) if k in {"conditions"}}
    return b.in_flight(b.transition(S.CREATING, deadline=None, step_started=-2.0, **kw), gen=None, latest=8,
                       history=b.history(7), **extra)


def degraded(reason: str, message: str) -> tuple[st.Condition, ...]:
    return b.steady_conditions(7, Degraded=b.cond(C.DEGRADED, True, reason, message))


NAME_MSG = ("pod agents/search-mcp (uid uid-foreign) has this runtime's name but is not owned by it: Baton does not "
            "touch it and starts no generation under that name until it is gone")


# 1. Ownership and the one name ---------------------------------------------------------------------

OWNERSHIP = [
    case("creating-blocked-by-foreign-pod-with-the-name-says-so-once",
         b.observed(status_=creating(), pods=(foreign(),)),
         [WS({"Degraded": ("True", "NameConflict"), "Degraded.message": NAME_MSG}),
          Ev("Warning", "NameConflict", "uid-foreign"), Rec(M.NAME_CONFLICTS, (("kind", "NameConflict"),))], 0),
    case("creating-blocked-already-said-parks-without-lease",
         b.observed(status_=creating(conditions=degraded("NameConflict", NAME_MSG)), pods=(foreign(),)),
         [p.ReleaseLease()], 5.0),
    case("creating-blocked-already-said-no-lease-touches-nothing",
         b.observed(status_=creating(conditions=degraded("NameConflict", NAME_MSG)), pods=(foreign(),),
                    lease=b.lease_free()),
         [], 5.0),
    case("creating-foreign-pod-gone-creates",
         b.observed(status_=creating(conditions=degraded("NameConflict", NAME_MSG)), pods=()),
         [NewPod(8, b.TOKEN)], 0),
    case("idle-foreign-pod-with-the-name-nothing-created",
         b.observed(status_=b.status(gen=None, conditions=b.steady_conditions(None)), pods=(foreign(),),
                    lease=b.lease_free()),
         [p.AcquireLease(6)], 0, NOW),  # to write Ready=False NameConflict first
    case("disowned-retiring-pod-is-not-relabelled",
         b.observed(status_=b.in_flight(b.transition(S.STOPPING_ADMISSION)),
                    pods=(b.pod(7).model_copy(update={"owned": False}),), desired_hash=b.HASH2),
         [WS({"Degraded": ("True", "NameConflict")}), Ev("Warning", "NameConflict", "uid-7"),
          Rec(M.NAME_CONFLICTS, (("kind", "NameConflict"),))], 0),
    case("disowned-pod-at-terminating-is-not-deleted",
         b.observed(status_=b.in_flight(b.transition(S.TERMINATING)),
                    pods=(OLD_QUIET.model_copy(update={"owned": False}),), desired_hash=b.HASH2),
         [WS({"Degraded": ("True", "NameConflict")}), Ev("Warning", "NameConflict", "uid-7"),
          Rec(M.NAME_CONFLICTS, (("kind", "NameConflict"),))], 0),
    case("idle-disowned-serving-pod-starts-no-handoff",
         b.observed(pods=(b.pod(7).model_copy(update={"owned": False}),), desired_hash=b.HASH2),
         [WS({"Degraded": ("True", "NameConflict"), "Ready": ("False", "NameConflict"), "transition": None}),
          Ev("Warning", "NameConflict", "uid-7"), Rec(M.NAME_CONFLICTS, (("kind", "NameConflict"),))], 0),
    case("idle-foreign-labelled-pod-is-multiple-pods-and-untouched",
         b.observed(pods=(b.pod(7), foreign("search-mcp-debug", labelled=True)), desired_hash=b.HASH2),
         [WS({"Ready": ("False", "MultiplePods"), "transition": None}),
          Ev("Warning", "MultiplePods", "search-mcp-debug"), Rec(M.NAME_CONFLICTS, (("kind", "MultiplePods"),))], 0),
    case("unlabelled-retiring-pod-still-counts-until-get-says-gone",
         b.observed(status_=b.in_flight(b.transition(S.AWAITING_POD_GONE, deadline=30.0)),
                    pods=(b.pod(7, serving=False, deleting=True).model_copy(update={"labelled": False}),),
                    desired_hash=b.HASH2),
         [], 1.0),
    case("same-name-other-uid-counts-as-gone",
         b.observed(status_=b.in_flight(b.transition(S.AWAITING_POD_GONE, deadline=30.0)),
                    pods=(foreign(uid_="uid-someone-else"),), desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "current": None, "history#gens": (7,)}), step_time("AwaitingPodGone"),
          Rec(M.HANDOFFS, (("outcome", "Retired"),))], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", OWNERSHIP)
def test_ownership(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_plan(decide(o, now), expected, wait)


def test_foreign_service_is_never_patched_or_deleted() -> None:
    svc = obs.ServiceInfo(exists=True, owned=False, uid="svc-user", selector={"app": "theirs"})
    # spec.service unset: the user's Service is left alone (it used to be deleted).
    plan = decide(b.observed(lease=b.lease_free()).model_copy(update={"service": svc}), NOW)
    assert not plan.find(p.DeleteService) and not plan.find(p.EnsureService), plan
    # spec.service set: not patched; NameConflict says so; the pod is unaffected.
    o = b.observed(spec_=b.spec(service=True)).model_copy(update={"service": svc})
    plan = decide(o, NOW)
    assert not plan.find(p.DeleteService) and not plan.find(p.EnsureService), plan
    [ws] = plan.find(p.WriteStatus)
    c = ws.status.condition(C.DEGRADED)
    assert c is not None and (c.status, c.reason) == ("True", "NameConflict") and "Service agents/search-mcp" in c.message
    # Deleting the runtime removes only what it owns.
    gone = b.observed(status_=b.in_flight(b.transition(S.FINALIZING, kind=K.DELETE, from_=None, to=None)), pods=(),
                      deleting=True).model_copy(update={"service": svc})
    assert p.DeleteService() not in decide(gone, NOW).actions


# 2. Pod creation refused by the API server ---------------------------------------------------------

REJECTED = "422 Invalid: Pod \"search-mcp\" is invalid: spec.containers[0].image: Required value"


def test_refused_create_backs_off_with_jitter_and_releases_the_lease() -> None:
    o = b.observed(status_=creating(), pods=(), pod_rejected=REJECTED)
    plan = decide(o, NOW)
    assert plan.kinds() == ["WriteStatus", "Event", "Record", "ReleaseLease"], plan
    t = plan.find(p.WriteStatus)[0].status.transition
    assert t.step == S.CREATING and t.attempt == 1 and REJECTED in (t.message or "")
    wait = (t.not_before - NOW).total_seconds()
    assert 0.8 <= wait <= 1.2 and plan.wait_seconds == pytest.approx(wait)
    c = plan.find(p.WriteStatus)[0].status.condition(C.DEGRADED)
    assert c is not None and c.reason == "PodRejected" and REJECTED in c.message
    [ev] = plan.find(p.Event)
    assert ev.reason == "PodRejected" and REJECTED in ev.message


def test_refused_create_waits_without_lease_then_tries_again() -> None:
    t = b.transition(S.CREATING, deadline=None, step_started=-2.0, attempt=1, not_before=at(3), message="refused")
    waiting = b.observed(status_=b.in_flight(t, gen=None, latest=8, history=b.history(7)), pods=(), lease=b.lease_free())
    check_plan(decide(waiting, NOW), [], 3.0)
    check_plan(decide(waiting.model_copy(update={"lease": b.lease_mine(), "lease_held_here": True}), NOW),
               [p.ReleaseLease()], 3.0)
    due = b.observed(status_=b.in_flight(t, gen=None, latest=8, history=b.history(7)), pods=())
    check_plan(decide(due, at(3)), [NewPod(8, b.TOKEN)], 0, )


def test_refusal_backoff_grows_and_jitters_but_is_deterministic() -> None:
    seen = [transitions.refusal_backoff_seconds(attempt=n, seed="rt") for n in range(1, 9)]
    for n, s in enumerate(seen, start=1):
        base = min(60.0, 2.0 ** (n - 1))
        assert 0.8 * base <= s <= 1.2 * base
    assert seen == [transitions.refusal_backoff_seconds(attempt=n, seed="rt") for n in range(1, 9)]
    assert seen != [transitions.refusal_backoff_seconds(attempt=n, seed="other") for n in range(1, 9)]


def test_refusals_within_connect_seconds_are_bounded() -> None:
    """Driving the refusal loop in simulated time: attempts in connectSeconds stay logarithmic,
    then the transition ends with a retry back-off (like a connect timeout)."""
    now = NOW
    status = creating()
    attempts = 0
    for _ in range(100):
        o = b.observed(status_=status, pods=(), lease=b.lease_mine(), pod_rejected=None)
        plan = decide(o, now)
        if plan.find(p.CreatePod):
            attempts += 1
            plan = decide(o.model_copy(update={"pod_rejected": REJECTED}), now)
        ws = plan.find(p.WriteStatus)
        if ws:
            status = ws[0].status
        if status.transition is None:
            break
        now += datetime.timedelta(seconds=plan.wait_seconds or 0.0)
    assert status.transition is None and status.retry is not None and status.retry.attempt == 1
    c = status.condition(C.READY)
    assert c is not None and c.reason == "PodRejected"
    assert 3 <= attempts <= 8, attempts  # connectSeconds=60: about 1+log2(60) attempts
    assert (now - NOW).total_seconds() <= 60 + 2 + 1


# 3. The Lease judged by local observation, never by another machine's clock ------------------------

def test_foreign_lease_expiry_is_judged_by_local_observation() -> None:
    # renewTime says the Lease expired an hour ago (the holder's clock runs behind), but this
    # process saw it change 2 s ago: it is held.
    lease = obs.LeaseInfo(exists=True, holder=b.OTHER, renew_time=at(-3600), duration_seconds=15, token=5,
                          unchanged_seconds=2.0)
    plan = decide(b.observed(desired_hash=b.HASH2, lease=lease), NOW)
    assert plan.lease_wait and not plan.find(p.AcquireLease)
    assert plan.wait_seconds is not None and plan.wait_seconds <= 13.2
    # renewTime in the future (clock ahead) but unchanged here for its duration: free.
    lease = lease.model_copy(update={"renew_time": at(3600), "unchanged_seconds": 15.0})
    assert decide(b.observed(desired_hash=b.HASH2, lease=lease), NOW).find(p.AcquireLease) == [p.AcquireLease(6)]


# 4. Tolerant status ---------------------------------------------------------------------------------

def test_unknown_condition_types_are_kept_and_ordered_after_ours() -> None:
    theirs = st.Condition(type="example.com/Audited", status="True", reason="Checked", message="by another tool")
    out = conds.set_condition((theirs,) + b.steady_conditions(7), kind=C.READY, true=False, reason="PodNotReady",
                              message="x", observed_generation=3, now=NOW)
    assert out[-1] == theirs and [c.type for c in out[:-1]] == [c.value for c in st.INITIAL_CONDITIONS]


def test_status_with_unknown_values_parses() -> None:
    raw = {
        "fencingToken": 3,
        "conditions": [{"type": "example.com/Audited", "status": "True"}],
        "transition": {"kind": "Handoff", "trigger": "SomethingNew", "step": "Quiescing", "from": 7,
                       "fromUid": "uid-7", "fromPod": b.RT, "to": 8,
                       "startedAt": "2026-03-01T11:59:00Z", "stepStartedAt": "2026-03-01T11:59:00Z"},
        "history": [{"generation": 6, "outcome": "Migrated"}],
        "lastCleanupFailure": {"generation": 6, "pod": "x", "uid": "u", "reason": "Vanished", "message": "",
                               "at": "2026-03-01T11:00:00Z"},
    }
    status = st.ToolRuntimeStatus.model_validate(raw)
    assert status.transition is not None and status.transition.step == "Quiescing"
    assert status.transition.trigger == "SomethingNew" and status.history[0].outcome == "Migrated"
    # Written back unchanged: nothing is lost by a round trip.
    assert status.wire()["transition"]["step"] == "Quiescing"
    assert status.wire()["conditions"][0]["type"] == "example.com/Audited"


def test_unknown_step_resumes_at_a_step_safe_to_repeat() -> None:
    t = b.transition(S.DRAINING).model_copy(update={"step": "Quiescing"})
    plan = decide(b.observed(status_=b.in_flight(t), pods=(b.pod(7),), desired_hash=b.HASH2), NOW)
    check_plan(plan, [WS({"transition.step": "StoppingAdmission", "transition.from_uid": "uid-7",
                          "Degraded": ("True", "UnknownStep")}), Ev("Warning", "UnknownStep", "Quiescing")], 0)
    gone = decide(b.observed(status_=b.in_flight(t), pods=(), desired_hash=b.HASH2), NOW)
    check_plan(gone, [WS({"transition.step": "Creating", "transition.to": 8}), Ev("Warning", "UnknownStep")], 0)


def test_unreadable_spec_reports_and_starts_nothing_but_deletion_completes() -> None:
    o = b.observed(desired_hash=b.HASH2, spec_error="spec.template cannot be read: AttributeError: x")
    check_plan(decide(o, NOW), [WS({"Degraded": ("True", "InvalidSpec"), "transition": None}),
                                Ev("Warning", "InvalidSpec", "AttributeError")], 0)
    deleting = decide(o.model_copy(update={"deleting": True}), NOW)
    [ws] = deleting.find(p.WriteStatus)
    assert ws.status.transition is not None and ws.status.transition.kind == K.DELETE


# 5. Verbs: waits persisted, removals guarded -----------------------------------------------------------

def test_reset_mid_transition_is_recorded_then_refused_after_lock_seconds() -> None:
    t = b.transition(S.DRAINING)
    o = b.observed(status_=b.in_flight(t), pods=(OLD_QUIET,), desired_hash=b.HASH2, annotations={RESET: "7"},
                   spec_=b.spec(probe=True))
    plan = decide(o, NOW)
    check_plan(plan, [WS({"pending_reset.value": "7", "pending_reset.since": NOW})], 0)
    recorded = plan.find(p.WriteStatus)[0].status
    # Another replica (no local memory) sees the same persisted time: refused past lockSeconds.
    later = o.model_copy(update={"status": recorded, "identity": b.OTHER, "lease": b.lease_other(renewed=0.0),
                                 "lease_held_here": False})
    assert decide(later, at(5)).wait_seconds is not None
    check_plan(decide(later, at(10.5)), [Unannotate(RESET, "7"), Ev("Warning", "StaleReset"),
                                         Rec(M.STALE_VERBS, (("verb", "reset"),))], 0)


def test_the_reset_a_transition_carries_out_is_consumed_not_reported_stale() -> None:
    """A Reset handoff whose begin plan failed after its status write (the Service refused)
    left the annotation: it is removed quietly, never a StaleReset (issue 23)."""
    t = b.transition(S.DRAINING, trigger=T.RESET)
    o = b.observed(status_=b.in_flight(t), pods=(OLD_QUIET,), desired_hash=b.HASH, annotations={RESET: "7"},
                   spec_=b.spec(probe=True))
    check_plan(decide(o, NOW), [Unannotate(RESET, "7")], 0)
    waited = o.model_copy(update={"status": b.in_flight(t, pending_reset=st.PendingReset(value="7", since=at(-60)))})
    check_plan(decide(waited, NOW), [Unannotate(RESET, "7")], 0)
    # A reset of another generation (or during another kind of transition) still waits, bounded.
    other = o.model_copy(update={"annotations": {RESET: "8"}})
    assert not [a for a in decide(other, NOW).actions if isinstance(a, p.RemoveAnnotation)]


def test_a_recorded_reset_refused_once_idle_leaves_no_pending_reset() -> None:
    """A reset recorded mid-transition and refused as stale once the transition ended (its
    annotation removed without the Lease): the next pass clears status.pendingReset under the
    Lease, so a later reset of the same value waits its full lockSeconds (seed 2 of tests/chaos)."""
    left = b.status(pending_reset=st.PendingReset(value="3", since=at(-60)))
    check_plan(decide(b.observed(status_=left), NOW), [WS({"pending_reset": None})], 0)
    check_plan(decide(b.observed(status_=left, lease=b.lease_free()), NOW), [p.AcquireLease(6)], 0)
    still = b.observed(status_=left, annotations={RESET: "3"}, lease=b.lease_free())
    assert not decide(still, NOW).find(p.WriteStatus)


def test_drain_probe_error_is_named_when_the_drain_budget_ends() -> None:
    t = b.transition(S.DRAINING, deadline=0.0)
    o = b.observed(status_=b.in_flight(t), pods=(OLD_QUIET,), desired_hash=b.HASH2, spec_=b.spec(probe=True),
                   drain_idle=False, drain_probe_error="answered 302 (redirects are not followed; not idle)")
    plan = decide(o, NOW)
    [ws] = plan.find(p.WriteStatus)
    assert ws.status.transition is not None and "302" in (ws.status.transition.message or "")
    assert any(isinstance(a, p.Event) and "302" in a.message for a in plan.actions)

