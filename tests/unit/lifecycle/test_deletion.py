"""decide() for a deleted runtime."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.model import names, observed as obs

from .. import builders as b
from ..expect import WS, Rec, case, check_decide, step_time
from .shapes import DEL_FIN, K, M, OLD_QUIET, S, at, connecting, creating, retiring, started, stopped_and_started

pytestmark = pytest.mark.unit


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
         [p.ConfirmNoPod(names.pod_name(b.RT)), p.DeleteService(), p.DeleteLease(), p.RemoveFinalizer()], None),
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
    check_decide(o, now, expected, wait)
