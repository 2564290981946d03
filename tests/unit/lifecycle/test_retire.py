"""decide() retiring a generation: every retire step; cleanup failure, force recovery, the Force policy."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.lifecycle import decide
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, NewPod, Rec, Unannotate, case, check_decide, step_time
from .shapes import FAILURE, FORCE, FORCED_AWAIT, M, NOW, OLD_DELETING, OLD_QUIET, OLD_STUCK, S, at, creating, held, name, retiring, stale

pytestmark = pytest.mark.unit


# 3. Every retire step ----------------------------------------------------------------------------

RETIRE = [
    case("stopping-admission-flips-old-pod-to-not-serving",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), desired_hash=b.HASH2),
         [p.SetServing(name(7), "uid-7", False, pins_of=7)], 0),
    case("stopping-admission-label-error-retries-within-deadline",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), last_error="conflict", desired_hash=b.HASH2),
         [p.SetServing(name(7), "uid-7", False, pins_of=7)], 0),
    case("stopping-admission-label-error-past-deadline-terminates",
         b.observed(status_=retiring(S.STOPPING_ADMISSION, deadline=-1.0), last_error="webhook denied",
                    desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": True, "transition.deadline": at(60)}),
          step_time("StoppingAdmission"), Ev("Warning", "DrainIncomplete", "could not be taken out of the Service"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("stopping-admission-waits-for-endpointslices",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), pods=(OLD_QUIET,), spec_=b.spec(service=True),
                    endpoints_list_retiring_pod=True, desired_hash=b.HASH2),
         [], 20.0),
    case("stopping-admission-endpointslices-clear-advances-to-draining",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), pods=(OLD_QUIET,), spec_=b.spec(service=True, probe=True),
                    endpoints_list_retiring_pod=False, desired_hash=b.HASH2),
         [WS({"transition.step": "Draining", "transition.deadline": at(20), "transition.to": 8,
              "transition.step_started_at": NOW, "Ready": ("False", "Draining")}),
          step_time("StoppingAdmission", 10.0)], 0),
    # No probe: nothing to drain, so Draining is not written; Terminating and the delete go in
    # one plan (the delete is sent only once Terminating is persisted).
    case("stopping-admission-endpointslices-clear-no-probe-terminates",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), pods=(OLD_QUIET,), spec_=b.spec(service=True),
                    endpoints_list_retiring_pod=False, desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.deadline": at(60), "transition.drain_incomplete": False,
              "Ready": ("False", "Terminating")}),
          step_time("StoppingAdmission", 10.0), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("stopping-admission-without-service-or-probe-terminates",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), pods=(OLD_QUIET,), desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.deadline": at(60)}), step_time("StoppingAdmission"),
          p.DeletePod(name(7), "uid-7", 30)], 0),
    case("stopping-admission-drain-deadline-passes-drain-incomplete",
         b.observed(status_=retiring(S.STOPPING_ADMISSION, deadline=-1.0), pods=(OLD_QUIET,),
                    spec_=b.spec(service=True), endpoints_list_retiring_pod=True, desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": True,
              "transition.deadline": at(60)}),  # cleanupSeconds from here
          step_time("StoppingAdmission"), Ev("Warning", "DrainIncomplete", "EndpointSlices"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("draining-waits-probe-period",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), spec_=b.spec(probe=True),
                    drain_idle=False, desired_hash=b.HASH2),
         [], 1.0),
    case("draining-wait-never-beyond-deadline",
         b.observed(status_=retiring(S.DRAINING, deadline=0.5), pods=(OLD_QUIET,), spec_=b.spec(probe=True),
                    drain_idle=None, desired_hash=b.HASH2),
         [], 0.5),
    case("draining-probe-200-advances-to-terminating",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), spec_=b.spec(probe=True),
                    drain_idle=True, desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": False,
              "transition.deadline": at(60), "Ready": ("False", "Terminating")}),
          step_time("Draining", 10.0), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("draining-without-probe-advances",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": False}), step_time("Draining"),
          p.DeletePod(name(7), "uid-7", 30)], 0),
    case("draining-deadline-records-drain-incomplete",
         b.observed(status_=retiring(S.DRAINING, deadline=0.0), pods=(OLD_QUIET,), spec_=b.spec(probe=True),
                    drain_idle=False, desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": True, "transition.deadline": at(60)}),
          step_time("Draining"), Ev("Warning", "DrainIncomplete", "drain probe"), Rec(M.DRAIN_INCOMPLETE),
          p.DeletePod(name(7), "uid-7", 30)], 0),
    case("terminating-deletes-by-uid-with-grace",
         b.observed(status_=retiring(S.TERMINATING, deadline=90.0), pods=(OLD_QUIET,),
                    spec_=b.spec(termination_grace_seconds=45, cleanup_seconds=90), desired_hash=b.HASH2),
         [p.DeletePod(name(7), "uid-7", 45)], 0),
    case("terminating-delete-error-retries-within-deadline",
         b.observed(status_=retiring(S.TERMINATING, deadline=60.0), pods=(OLD_QUIET,), last_error="timeout",
                    desired_hash=b.HASH2),
         [p.DeletePod(name(7), "uid-7", 30)], 1.0),
    case("terminating-pod-deleting-advances-to-awaiting",
         b.observed(status_=retiring(S.TERMINATING, deadline=55.0), pods=(OLD_DELETING,), desired_hash=b.HASH2),
         [WS({"transition.step": "AwaitingPodGone", "transition.deadline": at(55),
              "Ready": ("False", "AwaitingPodGone")}),
          step_time("Terminating")], 0),
    case("terminating-delete-rejected-past-deadline",
         b.observed(status_=retiring(S.TERMINATING, deadline=-1.0), pods=(OLD_QUIET,),
                    last_error="admission webhook denied", desired_hash=b.HASH2),
         [WS({"transition.step": "CleanupFailed", "transition.deadline": None,
              "CleanupFailed": ("True", "DeleteRejected"), "last_cleanup_failure.reason": "DeleteRejected",
              "last_cleanup_failure.generation": 7, "last_cleanup_failure.uid": "uid-7",
              "last_cleanup_failure.at": NOW, "current.generation": 7}),
          step_time("Terminating"), Ev("Warning", "CleanupFailed", "admission webhook denied"),
          Rec(M.CLEANUP_FAILURES, (("reason", "DeleteRejected"),))], 0),
    case("awaiting-pod-gone-waits-until-cleanup-deadline",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=40.0), pods=(OLD_DELETING,), desired_hash=b.HASH2),
         [], 40.0),
    case("awaiting-pod-gone-uid-gone-records-then-creating",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=40.0), pods=(), desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "transition.to": 8, "transition.deadline": None, "current": None,
              "latest_generation": 8, "history[-1].generation": 7, "history[-1].uid": "uid-7",
              "history[-1].outcome": "Retired", "history[-1].retired_at": NOW, "history[-1].template_hash": b.HASH,
              "Ready": ("False", "Creating")}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("awaiting-pod-gone-same-name-other-uid-counts-as-gone",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=40.0), pods=(b.pod(7, uid_="uid-7-again"),),
                    desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "transition.to": 8, "current": None, "history[-1].uid": "uid-7"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),))], 0),
    case("awaiting-pod-gone-drain-incomplete-noted-in-history",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, drain_incomplete=True), pods=(), desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "history[-1].message": "drain incomplete"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("retire-done-history-keeps-last-10",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, history=b.history(*range(1, 7)) + b.history(*range(96, 100))),
                    pods=(), desired_hash=b.HASH2),
         [WS({"history#gens": (2, 3, 4, 5, 6, 96, 97, 98, 99, 7), "transition.to": 8}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("cleanup-deadline-pod-stuck-terminating",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=0.0), pods=(OLD_STUCK,), desired_hash=b.HASH2),
         [WS({"transition.step": "CleanupFailed", "transition.deadline": None, "transition.to": 8,
              "CleanupFailed": ("True", "PodStuckTerminating"), "Ready": ("False", "CleanupFailed"),
              # While the failure holds nothing moves (a Deployment's ProgressDeadlineExceeded):
              # Progressing=False, and both carry the failure's message.
              "Progressing": ("False", "CleanupFailed"),
              "Progressing.message": 'pod search-mcp (uid uid-7) still exists 60s after its delete; finalizers: '
                                     'example.com/hold; held: annotate baton.dev/force-recovery="7" to abandon the pod',
              "Ready.message": 'pod search-mcp (uid uid-7) still exists 60s after its delete; finalizers: '
                               'example.com/hold; held: annotate baton.dev/force-recovery="7" to abandon the pod',
              "CleanupFailed.last_transition_time": NOW,
              "last_cleanup_failure.reason": "PodStuckTerminating", "last_cleanup_failure.generation": 7,
              "last_cleanup_failure.pod": name(7), "last_cleanup_failure.uid": "uid-7",
              "last_cleanup_failure.at": NOW, "current.generation": 7}),
          step_time("AwaitingPodGone"), Ev("Warning", "CleanupFailed", "example.com/hold"),
          Rec(M.CLEANUP_FAILURES, (("reason", "PodStuckTerminating"),))], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", RETIRE)
def test_retire_steps(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


# 4. Cleanup failure: hold, force recovery, Force policy -----------------------------------------


RECOVERY = [
    case("hold-no-annotation-releases-lease-does-nothing",
         b.observed(status_=held(), pods=(OLD_STUCK,), desired_hash=b.HASH2),
         [p.ReleaseLease()], None),
    case("hold-no-annotation-no-lease-needed",
         b.observed(status_=held(), pods=(OLD_STUCK,), lease=b.lease_free(), desired_hash=b.HASH2),
         [], None),
    case("hold-survives-spec-change-and-suspend",
         b.observed(status_=held(), pods=(OLD_STUCK,), lease=b.lease_free(), desired_hash="hash-c",
                    spec_=b.spec(suspend=True), meta_generation=9),
         [], None),
    case("force-recovery-acquires-lease-first",
         b.observed(status_=held(), pods=(OLD_STUCK,), lease=b.lease_free(5), annotations={FORCE: "7"},
                    desired_hash=b.HASH2),
         [p.AcquireLease(token=6)], 0),
    case("force-recovery-naming-failed-generation-is-recorded",
         b.observed(status_=held(), pods=(OLD_STUCK,), annotations={FORCE: "7"}, desired_hash=b.HASH2),
         [WS(FORCED_AWAIT), step_time("CleanupFailed"),
          Ev("Normal", "ForceRecovered", "uid uid-7"), Rec(M.FORCE_RECOVERIES), Unannotate(FORCE, "7")], 0),
    case("force-recovery-stale-value-touches-nothing",
         b.observed(status_=held(), pods=(OLD_STUCK,), annotations={FORCE: "6"}, desired_hash=b.HASH2),
         stale("force-recovery"), 0),
    case("force-recovery-when-idle-is-stale",
         b.observed(annotations={FORCE: "7"}),
         stale("force-recovery"), 0),
    case("force-recovery-premature-mid-retire-is-stale",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), annotations={FORCE: "7"}, desired_hash=b.HASH2),
         stale("force-recovery"), 0),
    case("force-recovery-after-pod-gone-is-stale",
         b.observed(status_=creating(), pods=(), annotations={FORCE: "7"}, desired_hash=b.HASH2),
         stale("force-recovery"), 0),
    case("forced-await-force-deletes-pod",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, forced=True, deadline=60.0, last_cleanup_failure=FAILURE),
                    pods=(OLD_STUCK,), desired_hash=b.HASH2),
         [p.ForceDeletePod(name(7), "uid-7")], 1.0),
    case("forced-pod-gone-history-records-abandoned-uid",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, forced=True, deadline=60.0, last_cleanup_failure=FAILURE),
                    pods=(), desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "transition.to": 8, "current": None,
              "history[-1].outcome": "ForceRecovered", "history[-1].uid": "uid-7",
              "last_cleanup_failure.uid": "uid-7"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "ForceRecovered"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("force-policy-records-failure-first",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=0.0), pods=(OLD_STUCK,),
                    spec_=b.spec(force=True), desired_hash=b.HASH2),
         [WS({"transition.step": "CleanupFailed", "CleanupFailed": ("True", "PodStuckTerminating"),
              "last_cleanup_failure.generation": 7}),
          step_time("AwaitingPodGone"), Ev("Warning", "CleanupFailed", "recovery.onCleanupFailure=Force"),
          Rec(M.CLEANUP_FAILURES, (("reason", "PodStuckTerminating"),))], 0),
    case("force-policy-then-recovers-without-annotation",
         b.observed(status_=held(), pods=(OLD_STUCK,), spec_=b.spec(force=True), desired_hash=b.HASH2),
         [WS(FORCED_AWAIT), step_time("CleanupFailed"),
          Ev("Normal", "ForceRecovered", "recovery.onCleanupFailure=Force"), Rec(M.FORCE_RECOVERIES)], 0),
    case("force-policy-wrong-number-is-still-stale",
         b.observed(status_=held(), pods=(OLD_STUCK,), spec_=b.spec(force=True), annotations={FORCE: "6"},
                    desired_hash=b.HASH2),
         stale("force-recovery"), 0),
    case("hold-pod-finally-gone-needs-lease",
         b.observed(status_=held(), pods=(), lease=b.lease_free(5), desired_hash=b.HASH2),
         [p.AcquireLease(token=6)], 0),
    case("hold-pod-finally-gone-clears-and-continues",
         b.observed(status_=held(), pods=(), desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "transition.to": 8, "CleanupFailed": ("False", "PodGone"),
              "last_cleanup_failure.generation": 7, "history[-1].outcome": "Retired"}),
          step_time("CleanupFailed"), Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", RECOVERY)
def test_cleanup_failure_and_recovery(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


@pytest.mark.parametrize(("from_", "from_uid", "gen", "outcome"), [
    pytest.param(7, "uid-7", 7, st.Outcome.RESET, id="the-reset-generation"),
    pytest.param(5, "uid-5", None, st.Outcome.RETIRED, id="a-stray-retired-on-the-way"),
])
def test_only_the_generation_a_reset_named_is_recorded_as_reset(
        from_: int, from_uid: str, gen: int | None, outcome: st.Outcome) -> None:
    """Model seed 1000020: a reset's handoff found, before its create, another pod of the runtime
    holding the name (a create of g5, held in the network, landed late) and retired it first. That
    pod was recorded as Reset, yet the reset named the serving generation. Now only the pod that
    was `current` ends as Reset; a stray retired on the way ends as Retired."""
    t = b.transition(S.AWAITING_POD_GONE, trigger=st.Trigger.RESET, from_=from_, from_uid=from_uid, deadline=40.0)
    plan = decide(b.observed(status_=b.in_flight(t, gen=gen, latest=8), pods=(), desired_hash=b.HASH2), NOW)
    writes = plan.find(p.WriteStatus)
    assert len(writes) == 1, plan
    entries = [h for h in writes[0].status.history if h.uid == from_uid]
    assert [(h.generation, h.outcome) for h in entries] == [(from_, outcome)], writes[0].status.history
    assert writes[0].status.transition is not None and writes[0].status.transition.step == S.CREATING


def test_a_forced_delete_whose_finalizer_keeps_coming_back_is_bounded_by_cleanup_seconds() -> None:
    stuck = b.pod(7, serving=False, ready=False, deleting=True, finalizers=("example.com/keeps-coming-back",))
    before = b.observed(status_=retiring(S.AWAITING_POD_GONE, forced=True, deadline=60.0, last_cleanup_failure=FAILURE),
                        pods=(stuck,), desired_hash=b.HASH2)
    sent = decide(before, NOW)
    assert sent.find(p.ForceDeletePod) and sent.wait_seconds == 1.0
    # Past the forced step's deadline (cleanupSeconds after the force recovery): no more force
    # deletes every second; CleanupFailed again, said, and held for a person.
    past = decide(before, at(61))
    assert not past.find(p.ForceDeletePod)
    [write] = past.find(p.WriteStatus)
    assert write.status.transition is not None and write.status.transition.step == S.CLEANUP_FAILED
    failed = write.status.condition(st.ConditionType.CLEANUP_FAILED)
    assert failed is not None and (failed.status, failed.reason) == ("True", "PodStuckTerminating")
    assert "forced delete" in failed.message and "keeps-coming-back" in failed.message
    assert [e.reason for e in past.find(p.Event)] == ["CleanupFailed"]
