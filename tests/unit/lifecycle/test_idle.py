"""decide() between transitions: the first things, the initial create, what starts a handoff, and verbs."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import decide
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, NewPod, Unannotate, case, check_decide, step_time
from .shapes import K, NOW, OLD_DELETING, RESET, S, T, at, connecting, handoff, name, retiring, stale, started, stopped_and_started

pytestmark = pytest.mark.unit


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
    check_decide(o, now, expected, wait)


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
              "Degraded.message": "missing: ConfigMap/search-config", "Ready": ("True", "GenerationReady"),
              "Progressing": ("False", "ConfigRefMissing")}),
          Ev("Warning", "ConfigRefMissing", "ConfigMap/search-config")], 0),
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
    check_decide(o, now, expected, wait)


def test_a_refused_service_is_said_once_before_it_is_tried_again() -> None:
    from baton.model import status as status_mod
    o = b.observed(spec_=b.spec(service=True), service_error="422 Invalid: quota exceeded")
    planned = decide(o, b.NOW)
    kinds = planned.kinds()
    assert kinds.index("WriteStatus") < kinds.index("Event") < kinds.index("EnsureService"), kinds
    [write] = planned.find(p.WriteStatus)
    degraded = write.status.condition(status_mod.ConditionType.DEGRADED)
    assert degraded is not None and (degraded.status, degraded.reason) == ("True", "ServiceError")
    assert "quota exceeded" in degraded.message
    [event] = planned.find(p.Event)
    assert (event.type, event.reason) == ("Warning", "ServiceError")
    # Once said, the next pass (the condition in status) writes nothing new and says nothing.
    again = decide(o.model_copy(update={"status": write.status}), b.NOW)
    assert not again.find(p.WriteStatus) and not again.find(p.Event)
    assert again.find(p.EnsureService)
