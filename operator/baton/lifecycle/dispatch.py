"""decide(observed, now) -> Plan: the entry point of every lifecycle decision, pure and clock-injected.

One call returns the next thing to do for one runtime. The executor carries it out and calls
decide() again on a fresh observation; waiting is returned as data (Plan.wait_seconds), never
slept here. Each new step is persisted in status.transition (a WriteStatus) before the pass
that acts on it, so whoever holds the Lease next resumes exactly there. This module holds the
finalizer gate, the choice between idle and in flight, the waits that need no Lease, and the
step table.
"""

from __future__ import annotations

import dataclasses
import datetime

from baton.lifecycle import cleanup
from baton.lifecycle import conditions
from baton.lifecycle import create
from baton.lifecycle import deletion
from baton.lifecycle import hooks
from baton.lifecycle import idle
from baton.lifecycle import lease
from baton.lifecycle import pin_gate
from baton.lifecycle import plan as p
from baton.lifecycle import retire
from baton.lifecycle import steady
from baton.lifecycle import transitions
from baton.lifecycle import verbs
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st


def decide(observed: obs.Observed, now: datetime.datetime) -> p.Plan:
    """The next plan for one runtime as `observed` at `now`: the finalizer first, then idle or
    the transition in flight (a reset seen meanwhile waits for it, bounded)."""
    o = observed
    if not o.deleting and names.FINALIZER not in o.finalizers:
        return p.Plan((p.AddFinalizer(),), 0, "add finalizer")
    if o.deleting and names.FINALIZER not in o.finalizers:
        return p.Plan((), None, "being deleted; nothing of ours is left")
    t = o.status.transition
    if t is None:
        return idle.idle(o, now)
    match verbs.pending_reset(o, t, now):
        case transitions.Act(plan=first):
            return first
        case transitions.Wait(seconds=reset_wait):
            plan = _in_flight(o, t, now)
            if plan.wait_seconds is None or plan.wait_seconds > reset_wait:
                plan = dataclasses.replace(plan, wait_seconds=reset_wait)
            return plan
        case transitions.Nothing():
            return _in_flight(o, t, now)


def _in_flight(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """A transition in flight: a wait that needs no Lease, or the step under the Lease."""
    parked = _external_wait(o, t, now)
    if parked is not None:
        note, wait = parked
        if lease.held_here(o):
            return p.Plan((p.ReleaseLease(),), wait, f"{note}; Lease released")
        return p.Plan((), wait, note)
    if o.shutting_down and not lease.held_here(o):
        # Do not take the Lease (a new token, a status write) only to hand it back.
        return p.Plan((), None, "shutting down: the transition is left to the next holder")
    return lease.with_lease(o, now, lambda: _step(o, t, now))


def _external_wait(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> tuple[str, float | None] | None:
    """(note, wait) when the transition waits on something outside Baton and its status
    already says so: then it needs no Lease (an idle wait costs no writes)."""
    if names.ANN_RETRY_HOOK in o.annotations:
        return None  # acted on, or refused as stale, under the Lease
    if t.step == st.Step.CLEANUP_FAILED and hooks.held(t, st.HookName.PRE_RETIRE):
        if names.ANN_FORCE_RECOVERY in o.annotations:
            return None
        return f"preRetire hook failed; waiting for {names.ANN_RETRY_HOOK} or {names.ANN_FORCE_RECOVERY}", None
    if t.step == st.Step.CONNECTING and hooks.held(t, st.HookName.POST_READY):
        pod = o.pod_by_uid(t.to_uid)
        if pod is not None and pod.ready and not pod.deleting and names.ANN_FORCE_RECOVERY not in o.annotations:
            return f"postReady hook failed; waiting for {names.ANN_RETRY_HOOK}", None
    if t.step == st.Step.CLEANUP_FAILED:
        if (o.spec.recovery.on_cleanup_failure == spec_model.OnCleanupFailure.FORCE
                or names.ANN_FORCE_RECOVERY in o.annotations or o.pod_by_uid(t.from_uid) is None):
            return None
        return "cleanup failed; waiting for baton.dev/force-recovery", None
    if o.deleting and t.kind != st.TransitionKind.DELETE:
        return None
    pin_wait = pin_gate.external_wait(o, t, now)
    if pin_wait is not None:
        return pin_wait
    degraded = o.status.condition(st.ConditionType.DEGRADED)
    said = (degraded.reason if degraded is not None and degraded.status == "True" else None)
    old = o.pod_by_uid(t.from_uid) if t.retiring else None
    if old is not None and not old.owned and t.kind != st.TransitionKind.DELETE:
        return ("retiring pod disowned; waiting for it to go", transitions.FOREIGN_POLL_SECONDS) if said == st.Reason.NAME_CONFLICT.value else None
    if t.step == st.Step.CREATING:
        if steady.foreign_blocking_create(o):
            return ("a foreign object holds the name", transitions.FOREIGN_POLL_SECONDS) if said == st.Reason.NAME_CONFLICT.value else None
        if o.spec_error is not None:
            return ("spec unreadable", None) if said == st.Reason.INVALID_SPEC.value else None
        if t.not_before is not None and now < t.not_before and o.pod_rejected is None:
            return "pod creation refused; backing off", transitions.remaining(t.not_before, now)
    return None


def _step(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """The transition's step under the Lease: a deletion converts it, stale verbs are refused,
    a disowned pod blocks it, otherwise the step's handler decides."""
    if o.deleting and t.kind != st.TransitionKind.DELETE:
        return deletion.convert_to_delete(o, t, now)
    if o.shutting_down:
        # Everything up to here is persisted: hand the transition back for the next holder.
        return p.Plan((p.ReleaseLease(),), None, "shutting down: Lease handed back")
    force = o.annotations.get(names.ANN_FORCE_RECOVERY)
    if force is not None and t.step != st.Step.CLEANUP_FAILED:
        # Allowed only while CleanupFailed=True for that generation: never kept for later.
        return p.Plan(tuple(verbs.stale_force_recovery(o, force, f"no cleanup failure is pending ({st.text(t.step)})")), 0,
                      "stale force-recovery")
    force_retire = o.annotations.get(names.ANN_FORCE_RETIRE)
    if force_retire is not None and not (t.step == st.Step.STOPPING_ADMISSION and t.pin_wait_since is not None
                                         and force_retire.strip() == str(t.from_)):
        return p.Plan(tuple(verbs.stale_force_retire(
            force_retire, f"no retire of that generation waits for pins ({st.text(t.kind)} {st.arrow(t)} at {st.text(t.step)})")), 0,
            "stale force-retire")
    retry, named = hooks.retry_named(o, t)
    if retry is not None and not named:
        failed = t.hook if t.hook is not None and t.hook.outcome == st.HookOutcome.FAILED else None
        why = (f"the failed hook is generation {failed.generation}'s" if failed is not None
               else f"no failed hook holds {st.text(t.kind)} {st.arrow(t)} ({st.text(t.step)})")
        return p.Plan(hooks.stale_retry(retry, why), 0, "stale retry-hook")
    if not isinstance(t.step, st.Step):
        return _unknown_step(o, t, now)
    ours = o.pod_by_uid(t.from_uid) if t.retiring else (o.pod_by_uid(t.to_uid) if t.step == st.Step.CONNECTING else None)
    if ours is not None and not ours.owned:
        # Someone removed our ownerReference: the pod is not ours to relabel or delete any more.
        if t.kind == st.TransitionKind.DELETE and t.retiring:
            return retire.orphaned(o, t, now)
        return transitions.blocked(
            o, now, kind=st.ConditionType.DEGRADED, reason=st.Reason.NAME_CONFLICT,
            message=steady.name_conflict_message([f"pod {o.namespace}/{ours.name} (uid {ours.uid})"]),
            wait=transitions.FOREIGN_POLL_SECONDS)
    handler = {
        st.Step.STOPPING_ADMISSION: retire.stopping_admission,
        st.Step.DRAINING: retire.draining,
        st.Step.TERMINATING: cleanup.terminating,
        st.Step.AWAITING_POD_GONE: cleanup.awaiting_pod_gone,
        st.Step.CLEANUP_FAILED: cleanup.cleanup_failed,
        st.Step.PRE_RETIRE_HOOK: retire.pre_retire_hook,
        st.Step.CREATING: create.creating,
        st.Step.CONNECTING: create.connecting,
        st.Step.FINALIZING: deletion.finalizing,
    }[t.step]
    return handler(o, t, now)


def _unknown_step(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """A step this version does not know (a newer Baton wrote it before a rollback): resume
    from the last step that is safe to repeat, never skipping the old pod's retirement."""
    old = o.pod_by_uid(t.from_uid)
    if old is not None:
        new_t: st.Transition | None = t.model_copy(update={
            "step": st.Step.STOPPING_ADMISSION, "step_started_at": now,
            "deadline": now + transitions.seconds(o.spec.budgets.drain_seconds)})
    elif t.to:
        new_t = t.model_copy(update={"step": st.Step.CREATING, "step_started_at": now, "deadline": None,
                                     "gateway_calls": None})
    else:
        new_t = None
    msg = f"step {st.text(t.step)!r} is unknown to this version of Baton; resumed at " + (st.text(new_t.step) if new_t else "idle")
    status = transitions.stamped(o, now).model_copy(update={"transition": new_t})
    status = conditions.step_conditions(status, o, now, new_t) if new_t is not None else status
    status = conditions.with_conditions(status, o, now, (st.ConditionType.DEGRADED, True, st.Reason.UNKNOWN_STEP, msg))
    return p.Plan((p.WriteStatus(status), p.Event("Warning", st.Reason.UNKNOWN_STEP.value, msg)), 0, "unknown step")
