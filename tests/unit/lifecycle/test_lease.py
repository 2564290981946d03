"""decide() and the lifecycle Lease: fencing, and resuming from every persisted step."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.lifecycle import decide
from baton.model import names, observed as obs

from .. import builders as b
from ..expect import WS, Ev, NewPod, Rec, case, check_decide, check_plan, step_time
from .shapes import C, DEL_FIN, FORCED_AWAIT, M, NOW, OLD_DELETING, OLD_QUIET, OLD_STUCK, S, at, connecting, creating, handoff, held, name, retiring, stopped_and_started

pytestmark = pytest.mark.unit


OUTSIDE = ("Lease agents/baton-search-mcp exists with no label baton.dev/runtime, so Baton does not see it: label it "
           "(kubectl -n agents label lease baton-search-mcp baton.dev/runtime=search-mcp --overwrite) or delete it")

# 6. The Lease and fencing -------------------------------------------------------------------------

LEASE = [
    case("lease-names-me-but-this-process-restarted-takes-it-with-a-new-token",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), lease_held_here=False, desired_hash=b.HASH2),
         [p.AcquireLease(token=6)], 0),
    case("held-by-other-mid-transition-waits-for-expiry",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), lease=b.lease_other(renewed=-5.0),
                    desired_hash=b.HASH2),
         [], 10.2),
    case("held-by-other-mid-transition-no-lock-timeout",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), lease=b.lease_other(renewed=0.0),
                    lock_wait_since=at(-60), desired_hash=b.HASH2),
         [], 15.2),
    case("expired-lease-of-other-acquired-with-higher-token",
         b.observed(status_=retiring(S.DRAINING, token=9), pods=(OLD_QUIET,), lease=b.lease_other(9, renewed=-20.0),
                    desired_hash=b.HASH2),
         [p.AcquireLease(token=10)], 0),
    case("lease-expiring-exactly-now-is-free",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), lease=b.lease_other(5, renewed=-15.0),
                    desired_hash=b.HASH2),
         [p.AcquireLease(token=6)], 0),
    case("own-lease-expired-is-reacquired-with-new-token",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,),
                    lease=obs.LeaseInfo(exists=True, holder=b.ME, renew_time=at(-30), token=5), desired_hash=b.HASH2,
                    lease_held_here=False),  # the executor stopped renewing it in time
         [p.AcquireLease(token=6)], 0),
    case("fenced-out-mid-transition-only-takes-the-lease-up-past-status",
         b.observed(status_=retiring(S.TERMINATING, token=6), pods=(OLD_QUIET,), lease=b.lease_mine(5),
                    desired_hash=b.HASH2),
         [p.AcquireLease(token=7)], 0),
    case("fenced-out-idle-only-takes-the-lease-up-past-status",
         b.observed(status_=b.status(token=6), lease=b.lease_mine(5), desired_hash=b.HASH2),
         [p.AcquireLease(token=7)], 0),
    case("lock-timeout-written-once",
         b.observed(desired_hash=b.HASH2, lease=b.lease_other(5, renewed=0.0), lock_wait_since=at(-11)),
         [WS({"Degraded": ("True", "LockTimeout"), "Degraded.last_transition_time": NOW, "fencing_token": 5,
              "transition": None, "current.generation": 7}),
          Ev("Warning", "LockTimeout", b.OTHER), Rec(M.LOCK_TIMEOUTS)], 15.2),
    case("lock-timeout-not-written-again",
         b.observed(desired_hash=b.HASH2, lease=b.lease_other(5, renewed=0.0), lock_wait_since=at(-40),
                    status_=b.status(conditions=b.steady_conditions(
                        7, Degraded=b.cond(C.DEGRADED, True, "LockTimeout", since=at(-29))))),
         [], 15.2),
    case("lock-wait-within-budget-wakes-at-budget",
         b.observed(desired_hash=b.HASH2, lease=b.lease_other(5, renewed=0.0), lock_wait_since=at(-4)),
         [], 6.05),
    case("lock-timeout-cleared-when-transition-begins",
         b.observed(desired_hash=b.HASH2, lease=b.lease_mine(6),
                    status_=b.status(conditions=b.steady_conditions(
                        7, Degraded=b.cond(C.DEGRADED, True, "LockTimeout", since=at(-29))))),
         [WS(handoff(fencing_token=6, Degraded=("False", "Healthy"))), *stopped_and_started("Handoff")], 0),
    case("lock-timeout-cleared-when-idle-again",
         b.observed(status_=b.status(conditions=b.steady_conditions(
             7, Degraded=b.cond(C.DEGRADED, True, "LockTimeout", since=at(-29))))),
         [WS({"Degraded": ("False", "Healthy"), "Degraded.last_transition_time": NOW, "transition": None})], 0),
    # A Lease outside the label-selected view (issue 23): our create met AlreadyExists.
    case("lease-outside-view-said-once-naming-it",
         b.observed(desired_hash=b.HASH2, lease=b.NO_LEASE, lease_outside_view=OUTSIDE),
         [WS({"Degraded": ("True", "LeaseOutsideView"), "Degraded.message": OUTSIDE, "transition": None}),
          Ev("Warning", "LeaseOutsideView", "Lease agents/baton-search-mcp")], 0),
    case("lease-outside-view-already-said-tries-again",
         b.observed(desired_hash=b.HASH2, lease=b.NO_LEASE, lease_outside_view=OUTSIDE,
                    status_=b.status(conditions=b.steady_conditions(
                        7, Degraded=b.cond(C.DEGRADED, True, "LeaseOutsideView", OUTSIDE, since=at(-29))))),
         [p.AcquireLease(token=6)], 0),
    case("lease-outside-view-cleared-when-transition-begins",
         b.observed(desired_hash=b.HASH2, lease=b.lease_mine(6),
                    status_=b.status(conditions=b.steady_conditions(
                        7, Degraded=b.cond(C.DEGRADED, True, "LeaseOutsideView", OUTSIDE, since=at(-29))))),
         [WS(handoff(fencing_token=6, Degraded=("False", "Healthy"))), *stopped_and_started("Handoff")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", LEASE)
def test_lease_and_fencing(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


# 7. Resume from every persisted step with a fresh Lease ------------------------------------------
# (step, snapshot with status token 5 written by OTHER, what the same step does next)

RESUME: list[tuple[str, obs.Observed, list[Any], float | None]] = [
    ("StoppingAdmission", b.observed(status_=retiring(S.STOPPING_ADMISSION), desired_hash=b.HASH2),
     [p.SetServing(name(7), "uid-7", False, pins_of=7)], 0),
    ("Draining", b.observed(status_=retiring(S.DRAINING, deadline=10.0), pods=(OLD_QUIET,),
                            spec_=b.spec(probe=True), drain_idle=False, desired_hash=b.HASH2),
     [], 1.0),
    ("Terminating", b.observed(status_=retiring(S.TERMINATING, deadline=60.0), pods=(OLD_QUIET,), desired_hash=b.HASH2),
     [p.DeletePod(name(7), "uid-7", 30)], 0),
    ("AwaitingPodGone", b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=30.0), pods=(OLD_DELETING,),
                                   desired_hash=b.HASH2),
     [], 30.0),
    ("CleanupFailed", b.observed(status_=held(), pods=(OLD_STUCK,), spec_=b.spec(force=True), desired_hash=b.HASH2),
     [WS(FORCED_AWAIT), step_time("CleanupFailed"), Ev("Normal", "ForceRecovered"), Rec(M.FORCE_RECOVERIES)], 0),
    # Creating keeps its number only when a pod of that number is in view (without one, the
    # number is given up: test_resume_in_creating_gives_a_number_with_no_pod_up below).
    ("Creating", b.observed(status_=creating(), pods=(b.pending(8),), desired_hash=b.HASH2),
     [WS({"transition.step": S.CONNECTING, "transition.to": 8, "transition.to_uid": "uid-8"}), step_time("Creating")], 0),
    ("Creating-no-number-yet", b.observed(status_=creating(to=None), pods=(), desired_hash=b.HASH2),
     [NewPod(gen=9, token=9, template_hash=b.HASH2)], 0),
    ("Connecting", b.observed(status_=connecting(deadline=40.0), pods=(b.pending(8),), desired_hash=b.HASH2),
     [], 40.0),
    ("Finalizing", b.observed(status_=b.in_flight(DEL_FIN, gen=None), pods=(), deleting=True),
     [p.ConfirmNoPod(names.pod_name(b.RT)), p.DeleteLease(), p.RemoveFinalizer()], None),
]


def _taken_over(o: obs.Observed) -> obs.Observed:
    """The previous holder (OTHER, token 5) died; this process just acquired the Lease (token 9)."""
    return o.model_copy(update={"status": o.status.model_copy(update={"holder": b.OTHER}), "lease": b.lease_mine(9)})


@pytest.mark.parametrize("o", [pytest.param(_taken_over(o), id=f"resume-{s}-writes-token-first") for s, o, _, _ in RESUME])
def test_resume_writes_token_before_acting(o: obs.Observed) -> None:
    assert o.status.transition is not None
    check_plan(decide(o, NOW), [
        WS({"fencing_token": 9, "holder": b.ME, "transition": o.status.transition}),
        Ev("Normal", "LeaseAcquired", f"resuming {o.status.transition.kind.value} at step {o.status.transition.step.value}"),
    ], 0)


@pytest.mark.parametrize("o,expected,wait", [
    pytest.param(_taken_over(o), expected, wait, id=f"resume-{s}-continues-same-step") for s, o, expected, wait in RESUME
])
def test_resume_continues_same_step(o: obs.Observed, expected: list[Any], wait: float | None) -> None:
    first = decide(o, NOW)
    (write,) = first.find(p.WriteStatus)
    resumed = o.model_copy(update={"status": write.status})
    assert resumed.status.transition == o.status.transition  # same step, same target generation
    check_plan(decide(resumed, NOW), expected, wait)


def test_resume_in_creating_gives_a_number_with_no_pod_up() -> None:
    """Chaos seed 11179: the holder before (token 5) may have sent g8's create, held in the
    network; sent again here, the late one could land after this g8 came and went, a second pod
    of one number. So the resume gives 8 up in the write of its token: Creating g9,
    latestGeneration 9, said in the event; the next pass creates g9 under token 9."""
    o = _taken_over(b.observed(status_=creating(), pods=(), desired_hash=b.HASH2))
    first = decide(o, NOW)
    check_plan(first, [
        p.ConfirmNoPod(name(8)),  # behind our view, g8's pod may be there: then the number is kept
        WS({"fencing_token": 9, "holder": b.ME, "latest_generation": 9, "transition.step": S.CREATING,
            "transition.to": 9, "transition.from_": 7, "Progressing": ("True", "Creating")}),
        Ev("Normal", "LeaseAcquired", "resuming Handoff at step Creating; generation 8 given up (its create may "
           "still be in flight under fencing token 5), generation 9 is created instead"),
    ], 0)
    (write,) = first.find(p.WriteStatus)
    assert write.status.transition is not None and o.status.transition is not None
    assert write.status.transition.step_started_at == o.status.transition.step_started_at  # the budget runs on
    check_plan(decide(o.model_copy(update={"status": write.status}), NOW), [NewPod(gen=9, token=9, template_hash=b.HASH2)], 0)


def test_resume_in_creating_keeps_a_number_given_up_before_above_it() -> None:
    """A number given up before (latestGeneration 12, above every pod and entry) is not reused:
    the new number is one above it."""
    o = _taken_over(b.observed(status_=creating().model_copy(update={"latest_generation": 12}), pods=(),
                               desired_hash=b.HASH2))
    check_plan(decide(o, NOW), [p.ConfirmNoPod(name(8)), WS({"latest_generation": 13, "transition.to": 13}),
                                Ev("Normal", "LeaseAcquired")], 0)


def test_resume_in_creating_with_another_pod_on_the_name_gives_the_number_up_without_reading_it() -> None:
    """A pod of another number holds the name (a stray): no fresh read (it would stop the plan
    each pass); the number is given up, and Creating retires that pod first."""
    o = _taken_over(b.observed(status_=creating(), pods=(b.pod(6, ready=False, serving=False),), desired_hash=b.HASH2))
    check_plan(decide(o, NOW), [WS({"transition.to": 9}), Ev("Normal", "LeaseAcquired", "generation 8 given up")], 0)


def test_a_holder_resuming_its_own_creating_keeps_the_number() -> None:
    """Status carries this Lease's token: nothing was resumed, the create is sent as planned."""
    o = b.observed(status_=creating().model_copy(update={"fencing_token": 9}), pods=(), lease=b.lease_mine(9),
                   desired_hash=b.HASH2)
    check_plan(decide(o, NOW), [NewPod(gen=8, token=9, template_hash=b.HASH2)], 0)


def test_taking_the_lease_again_after_our_own_creating_keeps_the_number() -> None:
    """Status's token 5 was this process's (a Lease released at a name conflict or a refused
    create, then taken again as 9): what its create came to is known here (create_in_doubt),
    so the number is kept; a create of it in doubt is given up by Creating itself."""
    o = _taken_over(b.observed(status_=creating(), pods=(), desired_hash=b.HASH2)).model_copy(
        update={"tokens_here": (5, 9)})
    assert o.status.transition is not None
    check_plan(decide(o, NOW), [
        WS({"fencing_token": 9, "transition": o.status.transition}),
        Ev("Normal", "LeaseAcquired", "resuming Handoff at step Creating"),
    ], 0)
