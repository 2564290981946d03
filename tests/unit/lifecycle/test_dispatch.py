"""decide()'s guards: invariant 1, suspend, shutdown."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.model import observed as obs

from .. import builders as b
from ..expect import WS, Ev, Rec, case, check_decide, step_time
from .shapes import C, K, M, OLD_DELETING, OLD_QUIET, S, T, creating, name, retiring, started, stopped_and_started

pytestmark = pytest.mark.unit


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
    check_decide(o, now, expected, wait)
