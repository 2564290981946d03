"""decide(observed, now) -> Plan, table-driven against a frozen clock.

Every row names one situation, the exact actions expected (type, in order, with key fields) and
the wait. Builders default to: runtime agents/search-mcp serving generation 7 (pod
search-mcp-g7, uid-7), fencing token 5, Lease held by this process (baton-a) with token 5.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import conditions as conds
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.lifecycle import decide, transitions
from baton.model import observed as obs
from baton.model import status as st

from . import builders as b
from .expect import WS, Ev, NewPod, Rec, Unannotate, check_plan, step_time

pytestmark = pytest.mark.unit

S, K, T, C = st.Step, st.TransitionKind, st.Trigger, st.ConditionType
M = p.Metric
NOW, at, name, uid = b.NOW, b.at, b.name, b.uid
RESET, FORCE = mf.ANN_RESET, mf.ANN_FORCE_RECOVERY


def case(id: str, o: obs.Observed, expected: list[Any], wait: float | None, now: datetime.datetime = NOW) -> Any:
    return pytest.param(o, now, expected, wait, id=id)


def run(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_plan(decide(o, now), expected, wait)


def started(kind: str) -> list[Any]:
    return [Ev("Normal", "TransitionStarted"), Rec(M.TRANSITIONS, (("kind", kind),))]


def stopped_and_started(kind: str) -> list[Any]:
    """A retire of the serving g7 that nothing pins: its label flip goes in the plan that
    persists StoppingAdmission, after the status write and what records it (events, metrics)."""
    return [*started(kind), p.SetServing(name(7), "uid-7", False, pins_of=7)]


def stale(verb: str) -> list[Any]:
    reason, key = ("StaleReset", RESET) if verb == "reset" else ("StaleForceRecovery", FORCE)
    return [Unannotate(key), Ev("Warning", reason), Rec(M.STALE_VERBS, (("verb", verb),))]


def handoff(**kw: Any) -> dict[str, Any]:
    """Fields of a freshly begun Handoff 7 -> 8 (TemplateChanged unless given)."""
    fields = {
        "transition.kind": "Handoff", "transition.trigger": "TemplateChanged",
        "transition.from_": 7, "transition.from_uid": "uid-7", "transition.from_pod": name(7),
        "transition.to": 8, "transition.step": "StoppingAdmission",
        "transition.started_at": NOW, "transition.deadline": at(30),  # drainSeconds
        "latest_generation": 8, "current.generation": 7,
        "Ready": ("False", "StoppingAdmission"), "Progressing": ("True", "StoppingAdmission"),
    }
    fields.update(kw)
    return fields


# Shared shapes ----------------------------------------------------------------------------------

OLD_QUIET = b.pod(7, serving=False)  # admission already stopped
OLD_DELETING = b.pod(7, serving=False, ready=False, deleting=True)
OLD_STUCK = b.pod(7, serving=False, ready=False, deleting=True, finalizers=("example.com/hold",))


def retiring(step: st.Step, **kw: Any) -> st.ToolRuntimeStatus:
    """Handoff 7 -> 8 at a retire step; current is still g7 until its pod is confirmed gone."""
    extra = {k: kw.pop(k) for k in list(kw) if k in {"last_cleanup_failure", "retry", "history", "conditions", "token"}}
    return b.in_flight(b.transition(step, **kw), **extra)


def creating(**kw: Any) -> st.ToolRuntimeStatus:
    """Handoff 7 -> 8 whose old pod is gone: at Creating, current cleared, g7 in history."""
    return b.in_flight(b.transition(S.CREATING, deadline=None, **kw), gen=None, latest=8, history=b.history(7))


def connecting(deadline: float = 40.0, **kw: Any) -> st.ToolRuntimeStatus:
    extra = {k: kw.pop(k) for k in list(kw) if k in {"retry", "history", "token"}}
    extra.setdefault("history", b.history(7))
    return b.in_flight(b.transition(S.CONNECTING, to_uid="uid-8", deadline=deadline, template_hash=b.HASH2, **kw),
                       gen=None, latest=8, **extra)


FAILURE = st.CleanupFailure(generation=7, pod=name(7), uid="uid-7", reason=st.Reason.POD_STUCK_TERMINATING,
                            message="stuck", at=at(-100))
FAILED_CONDS = b.steady_conditions(
    7,
    Ready=b.cond(C.READY, False, "CleanupFailed"),
    Progressing=b.cond(C.PROGRESSING, True, "CleanupFailed"),
    CleanupFailed=b.cond(C.CLEANUP_FAILED, True, "PodStuckTerminating"),
)


def held(**kw: Any) -> st.ToolRuntimeStatus:
    """Handoff 7 -> 8 stopped at CleanupFailed for generation 7 (its pod is stuck terminating)."""
    return retiring(S.CLEANUP_FAILED, deadline=None, last_cleanup_failure=FAILURE, conditions=FAILED_CONDS, **kw)


# 1. First things and the initial create ----------------------------------------------------------

INITIAL = [
    case("finalizer-added-before-anything", b.observed(finalizers=(), desired_hash=b.HASH2),
         [p.AddFinalizer()], 0),
    case("finalizer-added-even-mid-transition", b.observed(finalizers=(), status_=retiring(S.DRAINING)),
         [p.AddFinalizer()], 0),
    case("deleted-and-finalizer-gone-does-nothing", b.observed(finalizers=(), deleting=True),
         [], None),
    case("create-acquires-lease-token-1", b.fresh(),
         [p.AcquireLease(token=1)], 0),
    case("create-acquire-token-above-status", b.observed(status_=st.ToolRuntimeStatus(fencing_token=7), pods=(),
                                                         lease=b.lease_free(3)),
         [p.AcquireLease(token=8)], 0),
    case("create-acquire-token-above-lease", b.observed(status_=st.ToolRuntimeStatus(fencing_token=4), pods=(),
                                                        lease=b.lease_free(9)),
         [p.AcquireLease(token=10)], 0),
    case("create-begin-writes-status-before-pod",
         b.observed(status_=st.ToolRuntimeStatus(), pods=(), lease=b.lease_mine(1)),
         [WS({"fencing_token": 1, "holder": b.ME, "observed_generation": b.META_GEN, "latest_generation": 1,
              "current": None, "transition.kind": "Create", "transition.trigger": "Initial",
              "transition.from_": None, "transition.to": 1, "transition.step": "Creating",
              "transition.started_at": NOW, "transition.deadline": None,
              "Ready": ("False", "Creating"), "Progressing": ("True", "Creating"),
              "CleanupFailed": ("False", "Clean"), "Degraded": ("False", "Healthy"),
              "Suspended": ("False", "Active"), "Ready.last_transition_time": NOW}),
          *started("Create")], 0),
    case("create-pod-manifest-labels-annotations-owner",
         b.observed(status_=b.in_flight(b.transition(S.CREATING, kind=K.CREATE, trigger=T.INITIAL, from_=None, to=1,
                                                     deadline=None), gen=None, token=1),
                    pods=(), lease=b.lease_mine(1)),
         [NewPod(gen=1, token=1)], 0),
    case("create-pod-error-retries-after-1s",
         b.observed(status_=b.in_flight(b.transition(S.CREATING, kind=K.CREATE, trigger=T.INITIAL, from_=None, to=1,
                                                     deadline=None), gen=None, token=1),
                    pods=(), lease=b.lease_mine(1), last_error="quota exceeded"),
         [NewPod(gen=1, token=1)], 1.0),
    case("create-pod-seen-advances-to-connecting",
         b.observed(status_=b.in_flight(b.transition(S.CREATING, kind=K.CREATE, trigger=T.INITIAL, from_=None, to=1,
                                                     deadline=None), gen=None, token=1),
                    pods=(b.pending(1),), lease=b.lease_mine(1)),
         [WS({"transition.step": "Connecting", "transition.to": 1, "transition.to_uid": "uid-1",
              "transition.deadline": at(60), "transition.step_started_at": NOW, "transition.template_hash": b.HASH,
              "Ready": ("False", "Connecting"), "Progressing": ("True", "Connecting")}),
          step_time("Creating", 10.0)], 0),
    case("connecting-waits-for-ready-until-deadline",
         b.observed(status_=connecting(deadline=45.0), pods=(b.pending(8),), desired_hash=b.HASH2),
         [], 45.0),
    case("connecting-ready-pod-joins-service",
         b.observed(status_=connecting(), pods=(b.pod(8, serving=False),), desired_hash=b.HASH2),
         [p.SetServing(name(8), "uid-8", True)], 0),
    case("connecting-serving-pod-becomes-current",
         b.observed(status_=connecting(retry=st.Retry(attempt=2)), pods=(b.pod(8, template_hash=b.HASH2),),
                    desired_hash=b.HASH2),
         [WS({"current.generation": 8, "current.pod": name(8), "current.uid": "uid-8",
              "current.template_hash": b.HASH2, "current.ready_since": NOW, "transition": None, "retry": None,
              "Ready": ("True", "GenerationReady"), "Progressing": ("False", "Idle"),
              "latest_generation": 8}),
          step_time("Connecting"), Ev("Normal", "GenerationReady", "generation 8")], 0),
    case("idle-steady-releases-lease", b.observed(),
         [p.ReleaseLease()], None),
    case("idle-steady-without-lease-does-nothing", b.observed(lease=b.lease_free()),
         [], None),
    case("idle-steady-under-foreign-lease-does-nothing", b.observed(lease=b.lease_other()),
         [], None),
    case("idle-ensures-missing-service", b.observed(spec_=b.spec(service=True), lease=b.lease_free()),
         [p.EnsureService(mf.build_service(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, service=b.SERVICE))],
         None),
    case("idle-service-removed-from-spec", b.observed(service=obs.ServiceInfo(exists=True), lease=b.lease_free()),
         [p.DeleteService()], None),
]


@pytest.mark.parametrize("o,now,expected,wait", INITIAL)
def test_initial_and_idle(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


# 2. What starts a handoff, and verbs --------------------------------------------------------------

START = [
    case("template-change-acquires-lease-first", b.observed(desired_hash=b.HASH2, lease=b.lease_free(5)),
         [p.AcquireLease(token=6)], 0),
    case("template-change-begins-handoff",
         b.observed(desired_hash=b.HASH2, lease=b.lease_mine(6)),
         [WS(handoff(fencing_token=6, **{
             "Ready.last_transition_time": NOW,  # True -> False: flips
             "Progressing.last_transition_time": NOW,  # False -> True: flips
             "CleanupFailed.last_transition_time": b.EARLIER,  # unchanged
             "Degraded.last_transition_time": b.EARLIER})),
          *stopped_and_started("Handoff")], 0),
    case("template-change-with-missing-config-keeps-old-generation",
         b.observed(desired_hash=b.HASH2, missing_config_refs=("ConfigMap/search-config",)),
         [WS({"transition": None, "current.generation": 7, "Degraded": ("True", "ConfigRefMissing"),
              "Degraded.message": "missing: ConfigMap/search-config", "Ready": ("True", "GenerationReady")})], 0),
    case("reset-valid-hands-off-same-template",
         b.observed(annotations={RESET: "7"}),
         [WS(handoff(**{"transition.trigger": "Reset"})), *stopped_and_started("Handoff"), Unannotate(RESET, "7")], 0),
    case("reset-valid-needs-lease-first", b.observed(annotations={RESET: "7"}, lease=b.lease_free(5)),
         [p.AcquireLease(token=6)], 0),
    case("reset-stale-older-generation", b.observed(annotations={RESET: "6"}),
         stale("reset"), 0),
    case("reset-stale-never-used-number", b.observed(annotations={RESET: "42"}),
         stale("reset"), 0),
    case("reset-stale-not-a-number", b.observed(annotations={RESET: "latest"}, lease=b.lease_other()),
         stale("reset"), 0),
    case("reset-stale-when-nothing-serves",
         b.observed(annotations={RESET: "7"}, spec_=b.spec(suspend=True), pods=(),
                    status_=b.status(gen=None, latest=7, history=b.history(7))),
         stale("reset"), 0),
    case("pod-lost-gone-hands-off-to-new-number", b.observed(pods=()),
         [WS(handoff(**{"transition.trigger": "PodLost"})), *started("Handoff"),
          Ev("Warning", "PodLost", "handing off to g8")], 0),
    case("pod-lost-failed-phase", b.observed(pods=(b.pod(7, phase="Failed", ready=False),)),
         [WS(handoff(**{"transition.trigger": "PodLost"})), *started("Handoff"), Ev("Warning", "PodLost"),
          p.SetServing(name(7), "uid-7", False)], 0),
    case("pod-lost-deleted-by-someone-else", b.observed(pods=(OLD_DELETING,)),
         [WS(handoff(**{"transition.trigger": "PodLost"})), *started("Handoff"), Ev("Warning", "PodLost")], 0),
    case("numbers-next-above-latest-generation", b.observed(pods=(), status_=b.status(latest=12)),
         [WS(handoff(**{"transition.trigger": "PodLost", "transition.to": 13, "latest_generation": 13})),
          *started("Handoff"), Ev("Warning", "PodLost")], 0),
    case("numbers-next-above-history", b.observed(desired_hash=b.HASH2, status_=b.status(history=b.history(5, 9))),
         [WS(handoff(**{"transition.to": 10, "latest_generation": 10})), *stopped_and_started("Handoff")], 0),
    case("numbers-next-above-any-pod-label",
         b.observed(status_=connecting(deadline=40.0),
                    pods=(b.pod(8, phase="Failed", ready=False, serving=False),
                          b.pod(11, pod_name="search-mcp-g11", deleting=True, serving=False)),
                    desired_hash=b.HASH2),
         [WS({"transition.kind": "Handoff", "transition.trigger": "PodLost", "transition.from_": 8,
              "transition.from_uid": "uid-8", "transition.to": 12, "transition.step": "StoppingAdmission",
              "latest_generation": 12}),
          Ev("Warning", "PodLost", "next is g12")], 0),
    case("numbers-new-pod-vanished-before-ready",
         b.observed(status_=connecting(deadline=40.0), pods=(), desired_hash=b.HASH2),
         [WS({"transition.step": "Creating", "transition.to": 9, "transition.to_uid": None,
              "latest_generation": 9, "history#gens": (7, 8), "history[-1].outcome": "Lost"}),
          Ev("Warning", "PodLost", "next is g9")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", START)
def test_handoff_starts_and_verbs(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


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
              "CleanupFailed.last_transition_time": NOW,
              "last_cleanup_failure.reason": "PodStuckTerminating", "last_cleanup_failure.generation": 7,
              "last_cleanup_failure.pod": name(7), "last_cleanup_failure.uid": "uid-7",
              "last_cleanup_failure.at": NOW, "current.generation": 7}),
          step_time("AwaitingPodGone"), Ev("Warning", "CleanupFailed", "example.com/hold"),
          Rec(M.CLEANUP_FAILURES, (("reason", "PodStuckTerminating"),))], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", RETIRE)
def test_retire_steps(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


# 4. Cleanup failure: hold, force recovery, Force policy -----------------------------------------

FORCED_AWAIT = {"transition.step": "AwaitingPodGone", "transition.forced": True, "transition.deadline": at(60),
                "transition.to": 8, "CleanupFailed": ("False", "ForceRecovered"),
                "last_cleanup_failure.generation": 7}

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
    run(o, now, expected, wait)


# 5. Connect timeout and retry back-off ---------------------------------------------------------


def timed_out_retire(attempt: int) -> obs.Observed:
    t = b.transition(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.CONNECT_TIMEOUT, from_=8, to=None, deadline=30.0)
    return b.observed(status_=b.in_flight(t, gen=None, latest=8, retry=st.Retry(attempt=attempt),
                                          history=b.history(7)),
                      pods=(), desired_hash=b.HASH2)


def backing_off(not_before: datetime.datetime, **kw: Any) -> obs.Observed:
    ready = b.cond(C.READY, False, "BackingOff", f"retrying after a failed start at {not_before.isoformat()}")
    s = b.status(gen=None, latest=8, retry=st.Retry(attempt=2, not_before=not_before), history=b.history(7, 8),
                 conditions=b.steady_conditions(None, Ready=ready,
                                                Degraded=b.cond(C.DEGRADED, True, "ConnectTimeout")))
    return b.observed(status_=s, pods=(), desired_hash=b.HASH2, **kw)


BACKOFF = [
    case("connect-timeout-degraded-and-retires-that-generation",
         b.observed(status_=connecting(deadline=0.0), pods=(b.pending(8),), desired_hash=b.HASH2),
         [WS({"transition.kind": "Retire", "transition.trigger": "ConnectTimeout", "transition.from_": 8,
              "transition.from_uid": "uid-8", "transition.from_pod": name(8), "transition.to": None,
              "transition.step": "StoppingAdmission", "transition.deadline": at(30),
              "retry.attempt": 1, "retry.not_before": None,
              "Degraded": ("True", "ConnectTimeout"), "Ready": ("False", "StoppingAdmission")}),
          step_time("Connecting"), Ev("Warning", "ConnectTimeout", "attempt 1"), Rec(M.CONNECT_TIMEOUTS)], 0),
    case("connect-serve-label-failing-past-deadline-is-a-connect-timeout",
         b.observed(status_=connecting(deadline=0.0), pods=(b.pod(8, serving=False),), desired_hash=b.HASH2,
                    last_error="500 InternalError"),
         [WS({"transition.kind": "Retire", "transition.trigger": "ConnectTimeout", "transition.from_": 8,
              "transition.from_uid": "uid-8", "Degraded": ("True", "ConnectTimeout")}),
          step_time("Connecting"), Ev("Warning", "ConnectTimeout", "attempt 1"), Rec(M.CONNECT_TIMEOUTS)], 0),
    case("connect-serve-label-failing-before-deadline-retries-after-a-second",
         b.observed(status_=connecting(deadline=10.0), pods=(b.pod(8, serving=False),), desired_hash=b.HASH2,
                    last_error="500 InternalError"),
         [p.SetServing(name(8), "uid-8", True)], 1.0),
    case("connect-timeout-counts-attempts",
         b.observed(status_=connecting(deadline=-5.0, retry=st.Retry(attempt=2, not_before=at(-70))),
                    pods=(b.pending(8),), desired_hash=b.HASH2),
         [WS({"transition.trigger": "ConnectTimeout", "retry.attempt": 3, "Degraded": ("True", "ConnectTimeout")}),
          step_time("Connecting"), Ev("Warning", "ConnectTimeout", "attempt 3"), Rec(M.CONNECT_TIMEOUTS)], 0),
    *[
        case(f"backoff-attempt-{n}-waits-{w}s", timed_out_retire(n),
             [WS({"transition": None, "current": None, "retry.attempt": n, "retry.not_before": at(w),
                  "Ready": ("False", "BackingOff"), "Progressing": ("False", "Idle"),
                  "history[-1].generation": 8, "history[-1].outcome": "ConnectTimeout"}),
              step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "ConnectTimeout"),))], 0)
        for n, w in [(1, 5), (2, 10), (3, 20), (4, 40), (6, 160), (7, 300), (30, 300)]
    ],
    case("backoff-not-before-respected-no-lease", backing_off(at(12), lease=b.lease_free()),
         [], 12.0),
    case("backoff-not-before-respected-releases-lease", backing_off(at(12)),
         [p.ReleaseLease()], 12.0),
    case("backoff-elapsed-retries-with-new-number", backing_off(at(0)),
         [WS({"transition.kind": "Create", "transition.trigger": "Retry", "transition.to": 9,
              "latest_generation": 9, "retry.attempt": 2}), *started("Create")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", BACKOFF)
def test_connect_timeout_and_backoff(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


def test_backoff_formula_doubles_and_caps() -> None:
    got = [transitions.backoff_seconds(n, 5.0) for n in range(1, 10)]
    assert got == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]


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
]


@pytest.mark.parametrize("o,now,expected,wait", LEASE)
def test_lease_and_fencing(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


# 7. Resume from every persisted step with a fresh Lease ------------------------------------------
# (step, snapshot with status token 5 written by OTHER, what the same step does next)

DEL_FIN = b.transition(S.FINALIZING, kind=K.DELETE, trigger=T.DELETED, from_=7, to=None, deadline=None)
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
    ("Creating", b.observed(status_=creating(), pods=(), desired_hash=b.HASH2),
     [NewPod(gen=8, token=9, template_hash=b.HASH2)], 0),
    ("Connecting", b.observed(status_=connecting(deadline=40.0), pods=(b.pending(8),), desired_hash=b.HASH2),
     [], 40.0),
    ("Finalizing", b.observed(status_=b.in_flight(DEL_FIN, gen=None), pods=(), deleting=True),
     [p.ConfirmNoPod(mf.pod_name(b.RT)), p.DeleteLease(), p.RemoveFinalizer()], None),
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


# 8. Deletion -------------------------------------------------------------------------------------

DELETE = [
    case("delete-idle-retires-current-generation",
         b.observed(deleting=True),
         [WS({"transition.kind": "Delete", "transition.trigger": "Deleted", "transition.from_": 7,
              "transition.from_uid": "uid-7", "transition.to": None, "transition.step": "StoppingAdmission",
              "transition.deadline": at(30), "latest_generation": 7}), *stopped_and_started("Delete")], 0),
    case("delete-idle-nothing-runs-goes-to-finalizing",
         b.observed(deleting=True, pods=(), status_=b.status(gen=None, latest=7, history=b.history(7))),
         [WS({"transition.kind": "Delete", "transition.step": "Finalizing", "transition.to": None}),
          *started("Delete")], 0),
    case("delete-mid-handoff-retiring-step-converts",
         b.observed(deleting=True, status_=retiring(S.DRAINING), pods=(OLD_QUIET,), desired_hash=b.HASH2),
         [WS({"transition.kind": "Delete", "transition.step": "Draining", "transition.from_": 7,
              "transition.from_uid": "uid-7", "transition.deadline": at(20)})], 0),
    case("delete-mid-handoff-creating-no-pod-goes-to-finalizing",
         b.observed(deleting=True, status_=creating(), pods=(), desired_hash=b.HASH2),
         [WS({"transition.kind": "Delete", "transition.trigger": "Deleted", "transition.step": "Finalizing",
              "transition.to": None})], 0),
    case("delete-mid-handoff-connecting-retires-new-pod",
         b.observed(deleting=True, status_=connecting(), pods=(b.pending(8),), desired_hash=b.HASH2),
         [WS({"transition.kind": "Delete", "transition.trigger": "Deleted", "transition.step": "StoppingAdmission",
              "transition.from_": 8, "transition.from_uid": "uid-8", "transition.to": None})], 0),
    case("delete-converted-handoff-retire-done-creates-nothing",
         b.observed(deleting=True, status_=retiring(S.AWAITING_POD_GONE, kind=K.DELETE), pods=(),
                    desired_hash=b.HASH2),
         [WS({"transition.kind": "Delete", "transition.step": "Finalizing", "current": None,
              "history[-1].generation": 7, "history[-1].outcome": "Deleted"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Deleted"),))], 0),
    case("delete-finalizing-removes-service-lease-finalizer",
         b.observed(deleting=True, status_=b.in_flight(DEL_FIN, gen=None), pods=(),
                    service=obs.ServiceInfo(exists=True), spec_=b.spec(service=True)),
         [p.ConfirmNoPod(mf.pod_name(b.RT)), p.DeleteService(), p.DeleteLease(), p.RemoveFinalizer()], None),
    case("delete-finalizing-stray-pod-retired-first",
         b.observed(deleting=True, status_=b.in_flight(DEL_FIN, gen=None), pods=(b.pod(9, serving=False),)),
         [WS({"transition.kind": "Delete", "transition.step": "StoppingAdmission", "transition.from_": 9,
              "transition.from_uid": "uid-9"})], 0),
    case("delete-waits-for-lease-held-by-other",
         b.observed(deleting=True, lease=b.lease_other(renewed=-3.0)),
         [], 10.05),  # lock budget (10 s) comes before the Lease expiry (12 s)
]


@pytest.mark.parametrize("o,now,expected,wait", DELETE)
def test_deletion(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


# 9. Invariant 1 guard, suspend, shutdown ---------------------------------------------------------

GUARDS = [
    case("inv1-creating-while-old-pod-stands-retires-it-no-create",
         b.observed(status_=creating(), pods=(OLD_DELETING,), desired_hash=b.HASH2),
         [WS({"transition.kind": "Handoff", "transition.step": "StoppingAdmission", "transition.from_": 7,
              "transition.from_uid": "uid-7", "transition.to": 8})], 0),
    case("inv1-creating-while-foreign-pod-stands",
         b.observed(status_=creating(), pods=(b.pod(None, pod_name="search-mcp-debug"),), desired_hash=b.HASH2),
         [WS({"transition.step": "StoppingAdmission", "transition.from_": None,
              "transition.from_pod": "search-mcp-debug", "transition.from_uid": "uid-search-mcp-debug",
              "transition.to": 8})], 0),
    case("inv1-creating-same-name-other-generation-label",
         b.observed(status_=creating(), pods=(b.pod(3, pod_name=name(8)),), desired_hash=b.HASH2),
         [WS({"transition.step": "StoppingAdmission", "transition.from_": 3, "transition.from_uid": "uid-3",
              "transition.to": 8})], 0),
    case("inv1-idle-stray-pod-retired-as-orphan",
         b.observed(pods=(b.pod(7), b.pod(6, serving=False))),
         [WS({"transition.kind": "Retire", "transition.trigger": "Orphan", "transition.from_": 6,
              "transition.from_uid": "uid-6", "transition.to": None, "current.generation": 7,
              "Ready": ("False", "MultiplePods"), "Progressing": ("True", "StoppingAdmission")}),
          *started("Retire"), Ev("Warning", "MultiplePods", "uid-6"), Rec(M.NAME_CONFLICTS, (("kind", "MultiplePods"),))], 0),
    case("inv1-orphan-retire-done-current-stays-ready",
         b.observed(status_=b.in_flight(b.transition(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.ORPHAN, from_=6,
                                                     to=None)),
                    pods=(b.pod(7),)),
         [WS({"transition": None, "current.generation": 7, "current.uid": "uid-7",
              "Ready": ("True", "GenerationReady"), "Progressing": ("False", "Idle"),
              "history[-1].generation": 6, "history[-1].outcome": "Retired"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),))], 0),
    case("inv1-orphan-with-current-generation-label-keeps-current",
         b.observed(status_=b.in_flight(b.transition(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.ORPHAN, from_=7,
                                                     to=None, from_uid="uid-7-copy")),
                    pods=(b.pod(7),)),
         [WS({"transition": None, "current.generation": 7, "current.uid": "uid-7",
              "Ready": ("True", "GenerationReady"), "history[-1].uid": "uid-7-copy",
              "history[-1].template_hash": None}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),))], 0),
    case("suspend-retires-current",
         b.observed(spec_=b.spec(suspend=True)),
         [WS({"transition.kind": "Retire", "transition.trigger": "Suspended", "transition.from_": 7,
              "transition.to": None, "transition.step": "StoppingAdmission"}), *stopped_and_started("Retire")], 0),
    case("suspend-retire-done-starts-none",
         b.observed(spec_=b.spec(suspend=True), pods=(),
                    status_=retiring(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.SUSPENDED, to=None)),
         [WS({"transition": None, "current": None, "Ready": ("False", "Suspended"),
              "Suspended": ("True", "Suspended"), "Progressing": ("False", "Idle"),
              "history[-1].outcome": "Suspended"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Suspended"),))], 0),
    case("suspend-during-handoff-retire-done-starts-none",
         b.observed(spec_=b.spec(suspend=True), pods=(), status_=retiring(S.AWAITING_POD_GONE),
                    desired_hash=b.HASH2),
         [WS({"transition": None, "current": None, "Ready": ("False", "Suspended"),
              "Suspended": ("True", "Suspended")}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),))], 0),
    case("suspend-at-creating-gives-number-up-once-the-name-is-read",
         # The create may have landed unseen (label edited off): ConfirmNoPod first (seed 600024).
         b.observed(spec_=b.spec(suspend=True), pods=(), status_=creating(), desired_hash=b.HASH2),
         [p.ConfirmNoPod(name(8)), WS({"transition": None, "latest_generation": 8, "Suspended": ("True", "Suspended"),
              "Ready": ("False", "Suspended"), "Progressing": ("False", "Idle")})], 0),
    case("suspended-steady-does-nothing",
         b.observed(spec_=b.spec(suspend=True), pods=(), lease=b.lease_free(),
                    status_=b.status(gen=None, latest=7, history=b.history(7), conditions=b.steady_conditions(
                        None, Ready=b.cond(C.READY, False, "Suspended", "suspended"),
                        Suspended=b.cond(C.SUSPENDED, True, "Suspended", "spec.suspend is true: no generation runs")))),
         [], None),
    case("unsuspend-starts-new-generation",
         b.observed(pods=(), status_=b.status(gen=None, latest=7, history=b.history(7))),
         [WS({"transition.kind": "Create", "transition.trigger": "Resumed", "transition.to": 8,
              "latest_generation": 8}), *started("Create")], 0),
    case("shutting-down-starts-no-transition-releases-lease",
         b.observed(desired_hash=b.HASH2, shutting_down=True),
         [p.ReleaseLease()], None),
    case("shutting-down-starts-no-transition-without-lease",
         b.observed(desired_hash=b.HASH2, shutting_down=True, lease=b.lease_free()),
         [], None),
    case("shutting-down-mid-transition-hands-lease-back",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), shutting_down=True, desired_hash=b.HASH2),
         [p.ReleaseLease()], None),
    case("shutting-down-mid-transition-does-not-acquire",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), shutting_down=True, lease=b.lease_free(),
                    desired_hash=b.HASH2),
         [], None),
    case("shutting-down-does-not-write-status",
         b.observed(meta_generation=4, shutting_down=True, lease=b.lease_free()),
         [], None),
]


@pytest.mark.parametrize("o,now,expected,wait", GUARDS)
def test_guards_suspend_shutdown(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


# 10. Status writes and conditions ----------------------------------------------------------------

WRITES = [
    case("steady-status-not-rewritten", b.observed(lease=b.lease_free()), [], None),
    case("steady-status-with-correct-service-no-actions",
         b.observed(spec_=b.spec(service=True), lease=b.lease_free(), service=obs.ServiceInfo(
             exists=True, selector=mf.service_selector(b.RT), ports=b.SERVICE.ports, session_affinity="ClientIP")),
         [], None),
    case("spec-generation-bump-rewrites-observed-generation",
         b.observed(meta_generation=4),
         [WS({"observed_generation": 4, "Progressing.observed_generation": 4, "Ready.observed_generation": 4,
              "Progressing.last_transition_time": b.EARLIER, "fencing_token": 5})], 0),
    case("steady-write-under-fresh-lease-carries-new-token",
         b.observed(meta_generation=4, lease=b.lease_mine(6), status_=b.status(holder=b.OTHER)),
         [WS({"observed_generation": 4, "fencing_token": 6, "holder": b.ME, "transition": None})], 0),
    case("serving-pod-turns-unready-is-reported-not-handed-off",
         b.observed(pods=(b.pod(7, ready=False),)),
         [WS({"Ready": ("False", "PodNotReady"), "transition": None})], 0),
    case("serving-pod-ready-again-is-reported",
         b.observed(status_=b.status(conditions=b.steady_conditions(7, Ready=b.cond(C.READY, False, "PodNotReady")))),
         [WS({"Ready": ("True", "GenerationReady")})], 0),
    case("unreadable-secret-is-degraded-but-blocks-nothing",
         b.observed(unreadable_config_refs=("Secret/api-key",)),
         [WS({"Degraded": ("True", "ConfigRefUnreadable"), "Ready": ("True", "GenerationReady")})], 0),
    case("unreadable-secret-does-not-block-the-first-generation",
         b.fresh().model_copy(update={"unreadable_config_refs": ("Secret/api-key",),
                                      "lease": b.lease_mine(1), "lease_held_here": True}),
         [WS({"transition.kind": "Create", "transition.to": 1}), *started("Create")], 0),
    case("spec-generation-bump-needs-lease", b.observed(meta_generation=4, lease=b.lease_free(5)),
         [p.AcquireLease(token=6)], 0),
    case("step-change-keeps-progressing-since",
         b.observed(status_=retiring(S.STOPPING_ADMISSION, conditions=b.steady_conditions(
             7, Ready=b.cond(C.READY, False, "StoppingAdmission", since=at(-30)),
             Progressing=b.cond(C.PROGRESSING, True, "StoppingAdmission", since=at(-30)))),
             pods=(OLD_QUIET,), spec_=b.spec(probe=True), desired_hash=b.HASH2),
         [WS({"transition.step": "Draining", "Progressing": ("True", "Draining"),
              "Progressing.last_transition_time": at(-30), "Ready.last_transition_time": at(-30)}),
          step_time("StoppingAdmission")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", WRITES)
def test_status_writes(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    run(o, now, expected, wait)


@pytest.mark.parametrize("old,true,reason,want_since", [
    pytest.param(None, True, "GenerationReady", NOW, id="ltt-new-condition-is-now"),
    pytest.param(("False", "Connecting"), True, "GenerationReady", NOW, id="ltt-flip-false-to-true-is-now"),
    pytest.param(("True", "Draining"), True, "Terminating", b.EARLIER, id="ltt-same-status-new-reason-kept"),
    pytest.param(("False", "Idle"), False, "Idle", b.EARLIER, id="ltt-unchanged-kept"),
])
def test_last_transition_time_moves_only_on_flip(
    old: tuple[str, str] | None, true: bool, reason: str, want_since: datetime.datetime
) -> None:
    before = () if old is None else (b.cond(C.PROGRESSING, old[0] == "True", old[1]),)
    after = conds.set_condition(before, kind=C.PROGRESSING, true=true, reason=reason, message="m",
                                observed_generation=4, now=NOW)
    (c,) = after
    assert (c.status, c.reason, c.observed_generation, c.last_transition_time) == (
        "True" if true else "False", reason, 4, want_since)


# 11. Multi-pass scenarios through a fake executor -------------------------------------------------


def drive(w: b.World, now: datetime.datetime, limit: int = 20) -> list[list[str]]:
    """Decide and apply until decide asks to wait (wait != 0); the action kinds of each pass."""
    passes = []
    for _ in range(limit):
        w.renew(now)
        plan = decide(w.o, now)
        passes.append(plan.kinds())
        w.apply(plan, now)
        if plan.wait_seconds != 0:
            return passes
    raise AssertionError(f"no wait after {limit} passes: {passes}")


def test_scenario_initial_create_to_idle() -> None:
    w = b.World(b.fresh().model_copy(update={"finalizers": ()}))
    assert drive(w, NOW) == [
        ["AddFinalizer"], ["AcquireLease"], ["WriteStatus", "Event", "Record"], ["CreatePod"],
        ["WriteStatus", "Record"], [],
    ]
    w.pod_event(ready=True)
    assert drive(w, at(5)) == [["SetServing"], ["WriteStatus", "Record", "Event"], ["ReleaseLease"]]
    assert w.o.status.current is not None and w.o.status.current.generation == 1
    assert w.o.status.fencing_token == 1 and w.o.status.latest_generation == 1
    # Steady: nothing more to write, nothing to wait for.
    check_plan(decide(w.o, at(6)), [], None)


def test_scenario_handoff_retires_before_creating() -> None:
    w = b.World(b.observed(spec_=b.spec(service=True, probe=True), desired_hash=b.HASH2, lease=b.lease_free(5),
                           service=obs.ServiceInfo(exists=True, selector=mf.service_selector(b.RT),
                                                   ports=b.SERVICE.ports, session_affinity="ClientIP")))
    assert drive(w, NOW) == [["AcquireLease"], ["WriteStatus", "Event", "Record", "SetServing"],
                             ["WriteStatus", "Record"], []]  # Draining: probe not idle yet
    w.o = w.o.model_copy(update={"drain_idle": True})
    assert drive(w, at(2)) == [["WriteStatus", "Record", "DeletePod"], ["WriteStatus", "Record"], []]
    assert [q.generation for q in w.o.pods] == [7]  # nothing new while g7 terminates
    w.pod_event("uid-7", gone=True)
    assert drive(w, at(10)) == [["WriteStatus", "Record", "Record", "CreatePod"], ["WriteStatus", "Record"], []]
    assert w.o.status.history[-1].generation == 7 and w.o.status.transition is not None
    assert w.o.status.transition.to == 8
    w.pod_event(ready=True)
    assert drive(w, at(20)) == [["SetServing"], ["WriteStatus", "Record", "Event"], ["ReleaseLease"]]
    assert w.o.status.current is not None and w.o.status.current.generation == 8
    check_plan(decide(w.o, at(21)), [], None)


def test_scenario_delete_mid_handoff_finalizes_without_creating() -> None:
    w = b.World(b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), desired_hash=b.HASH2, deleting=True,
                           service=obs.ServiceInfo(exists=True)))
    kinds = drive(w, NOW)
    assert kinds[:2] == [["WriteStatus"], ["WriteStatus", "Record", "DeletePod"]]
    w.pod_event("uid-7", gone=True)
    kinds += drive(w, at(5))
    assert not any("CreatePod" in k for k in kinds)
    assert kinds[-1] == ["ConfirmNoPod", "DeleteService", "DeleteLease", "RemoveFinalizer"]
    assert w.service_deleted and w.lease_deleted and mf.FINALIZER not in w.o.finalizers


def test_scenario_cleanup_failure_held_until_force_recovery() -> None:
    w = b.World(b.observed(status_=retiring(S.AWAITING_POD_GONE, deadline=0.0), pods=(OLD_STUCK,),
                           desired_hash=b.HASH2))
    assert drive(w, NOW) == [["WriteStatus", "Record", "Event", "Record"], ["ReleaseLease"]]
    # Held: a restart, a spec change or time passing does not clear it, and no pod is created.
    w.o = w.o.model_copy(update={"desired_hash": "hash-c", "meta_generation": 4})
    assert drive(w, at(600)) == [[]]
    failed = w.o.status
    assert resolve_ready(failed, C.CLEANUP_FAILED) == ("True", "PodStuckTerminating")
    assert failed.last_cleanup_failure is not None and failed.last_cleanup_failure.uid == "uid-7"
    # A person names the failed generation.
    w.o = w.o.model_copy(update={"annotations": {FORCE: "7"}})
    assert drive(w, at(601)) == [
        ["AcquireLease"], ["WriteStatus", "Event"],  # fresh Lease: token first
        ["WriteStatus", "Record", "Event", "Record", "RemoveAnnotation"], ["ForceDeletePod"],
    ]
    assert drive(w, at(602)) == [["WriteStatus", "Record", "Record", "CreatePod"], ["WriteStatus", "Record"], []]
    s = w.o.status
    assert s.history[-1].outcome == st.Outcome.FORCE_RECOVERED and s.history[-1].uid == "uid-7"
    assert s.last_cleanup_failure == failed.last_cleanup_failure  # kept as the record
    assert [q.generation for q in w.o.pods] == [8] and FORCE not in w.o.annotations


def test_scenario_orphan_retire_keeps_current_ready() -> None:
    """A stray pod beside a serving generation is retired; the serving generation stays Ready."""
    w = b.World(b.observed(pods=(b.pod(7), b.pod(6, serving=False))))
    drive(w, NOW)
    w.pod_event("uid-6", gone=True)
    drive(w, at(1))
    s = w.o.status
    assert s.transition is None and s.current is not None and s.current.generation == 7
    assert resolve_ready(s) == ("True", "GenerationReady")
    check_plan(decide(w.o, at(2)), [], None)


def test_scenario_lock_timeout_then_other_replica_finished() -> None:
    """LockTimeout is written once while waiting; once the Lease is free and nothing is due, it clears."""
    w = b.World(b.observed(desired_hash=b.HASH2, lease=b.lease_other(5, renewed=0.0), lock_wait_since=at(-11)))
    assert drive(w, NOW) == [["WriteStatus", "Event", "Record"]]
    assert drive(w, at(1)) == [[]]  # not again
    # Meanwhile the other replica did the handoff itself and released the Lease.
    other_done = w.o.status.model_copy(update={
        "fencing_token": 6, "current": b.current(8, template_hash=b.HASH2), "latest_generation": 8})
    w.o = w.o.model_copy(update={"status": other_done, "pods": (b.pod(8, template_hash=b.HASH2),),
                                 "lease": b.lease_free(6), "lock_wait_since": None})
    assert drive(w, at(20)) == [["AcquireLease"], ["WriteStatus"], ["ReleaseLease"]]
    assert resolve_ready(w.o.status, C.DEGRADED) == ("False", "Healthy")


def resolve_ready(s: st.ToolRuntimeStatus, kind: st.ConditionType = C.READY) -> tuple[str, str]:
    c = s.condition(kind)
    assert c is not None
    return (c.status, c.reason)


def test_case_count() -> None:
    """The brief asks for at least 40 table cases."""
    tables = [INITIAL, START, RETIRE, RECOVERY, BACKOFF, LEASE, DELETE, GUARDS, WRITES]
    assert sum(len(t) for t in tables) + 2 * len(RESUME) >= 40


def test_connecting_whose_pod_is_lost_retires_another_pod_holding_the_name() -> None:
    """Model seed 800036: the write of Connecting with the first create's UID was held in the
    network, a second create of the same number landed (another UID), then the held write
    arrived. The transition's pod is gone, and this pass read the name: another pod of the
    runtime holds it. It is retired (by its UID) before any create; the lost UID is recorded."""
    other = b.pod(8, uid_="uid-8b", ready=False, serving=False)
    plan = decide(b.observed(status_=connecting(), pods=(other,), desired_hash=b.HASH2), NOW)
    writes = plan.find(p.WriteStatus)
    assert len(writes) == 1 and not plan.find(p.CreatePod), plan
    ws = writes[0]
    t = ws.status.transition
    assert t is not None and t.step != st.Step.CREATING and t.from_uid == "uid-8b" and t.to == 9, t
    assert any(h.uid == "uid-8" and h.outcome == st.Outcome.LOST for h in ws.status.history), ws.status.history


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
