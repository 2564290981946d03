"""decide() for a deleted runtime."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import decide
from baton.lifecycle import plan as p
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st

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


# In a namespace being deleted: no Lease can be created again, nor any pod, by anyone ---------------

TERMINATING = dict(deleting=True, lease=b.NO_LEASE, lease_held_here=False, namespace_terminating=True)


def test_a_deleted_runtime_in_a_terminating_namespace_is_retired_without_the_lease() -> None:
    o = b.observed(status_=retiring(S.TERMINATING, kind=K.DELETE), pods=(OLD_QUIET,), **TERMINATING)
    planned = decide(o, b.NOW)
    assert planned.lease_free
    assert not planned.find(p.AcquireLease) and not planned.find(p.CreatePod)
    assert [a.uid for a in planned.find(p.DeletePod)] == ["uid-7"]


def test_the_finalizer_goes_without_the_lease_once_nothing_stands() -> None:
    o = b.observed(status_=b.in_flight(DEL_FIN, gen=None), pods=(), **TERMINATING)
    planned = decide(o, b.NOW)
    assert planned.lease_free
    assert planned.kinds() == ["ConfirmNoPod", "DeleteLease", "RemoveFinalizer"]


@pytest.mark.parametrize("what", ["not-deleted", "namespace-not-terminating", "lease-held-by-another"])
def test_anything_else_still_needs_the_lease(what: str) -> None:
    fields: dict[str, Any] = dict(TERMINATING)
    if what == "not-deleted":
        fields["deleting"] = False
    elif what == "namespace-not-terminating":
        fields["namespace_terminating"] = False
    else:
        fields["lease"] = b.lease_other(renewed=0.0)
    o = b.observed(status_=retiring(S.TERMINATING, kind=K.DELETE), pods=(OLD_QUIET,), **fields)
    planned = decide(o, b.NOW)
    assert not planned.lease_free
    assert not planned.find(p.DeletePod)


@pytest.mark.parametrize("step", [S.STOPPING_ADMISSION, S.DRAINING, S.TERMINATING, S.AWAITING_POD_GONE])
def test_a_deletion_whose_pod_was_disowned_records_it_orphaned_and_finishes(step: Any) -> None:
    # kubectl delete --cascade=orphan: the garbage collector strips the pod's ownerReference.
    disowned = b.pod(7, serving=False).model_copy(update={"owned": False})
    o = b.observed(deleting=True, status_=retiring(step, kind=K.DELETE), pods=(disowned,))
    planned = decide(o, b.NOW)
    [write] = planned.find(p.WriteStatus)
    t = write.status.transition
    assert t is not None and t.step == S.FINALIZING
    entry = write.status.history[-1]
    assert (entry.generation, entry.uid, entry.outcome) == (7, "uid-7", "Orphaned")
    assert "left in place" in (entry.message or "")
    assert not planned.find(p.DeletePod) and not planned.find(p.SetServing)


def test_a_handoff_whose_pod_was_disowned_still_blocks_and_touches_nothing() -> None:
    disowned = b.pod(7, serving=False).model_copy(update={"owned": False})
    o = b.observed(status_=retiring(S.DRAINING), pods=(disowned,), desired_hash=b.HASH2)
    planned = decide(o, b.NOW)
    assert not planned.find(p.DeletePod) and not planned.find(p.CreatePod)
    [write] = planned.find(p.WriteStatus)
    degraded = write.status.condition(st.ConditionType.DEGRADED)
    assert degraded is not None and (degraded.status, degraded.reason) == ("True", "NameConflict")
    assert write.status.transition is not None and write.status.transition.step == S.DRAINING
