"""decide() over several passes through a fake executor."""

from __future__ import annotations

import datetime

import pytest

from baton.lifecycle import manifests as mf
from baton.lifecycle import decide
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import check_plan
from .shapes import C, FORCE, NOW, OLD_QUIET, OLD_STUCK, S, at, retiring

pytestmark = pytest.mark.unit


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
    assert w.service_deleted and w.lease_deleted and names.FINALIZER not in w.o.finalizers


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
