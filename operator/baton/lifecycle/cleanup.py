"""After the old pod's delete: Terminating until it is deleting, AwaitingPodGone until its UID
is gone, and CleanupFailed when that does not happen within cleanupSeconds (held for a person,
or force-recovered). Recording it gone is baton.lifecycle.retire's."""

from __future__ import annotations

import dataclasses
import datetime

from baton.lifecycle import hooks
from baton.lifecycle import plan as p
from baton.lifecycle import retire
from baton.lifecycle import transitions
from baton.lifecycle import verbs
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st


def terminating(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """Terminating: delete the old pod (by UID) until it is deleting; a delete failing past
    cleanupSeconds is a cleanup failure."""
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return retire.retire_done(o, t, now)
    if old.deleting:
        return transitions.advance(o, t, now, st.Step.AWAITING_POD_GONE, deadline=t.deadline)
    if o.last_error is not None and t.deadline is not None and now >= t.deadline:
        return _cleanup_failure(o, t, now, old, reason=st.Reason.DELETE_REJECTED,
                                message=f"delete of {old.name} failed: {o.last_error}")
    grace = o.spec.budgets.termination_grace_seconds
    return p.Plan((p.DeletePod(old.name, old.uid, grace),), 0 if o.last_error is None else 1.0, "delete old pod")


def awaiting_pod_gone(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """AwaitingPodGone: wait for the old pod's UID to be gone, bounded by cleanupSeconds (a
    forced recovery deletes it with grace 0)."""
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return retire.retire_done(o, t, now)
    if t.forced:
        if t.deadline is not None and now >= t.deadline:
            # Bounded too: a finalizer that keeps coming back (a controller re-adding it) would
            # have this force delete sent every second, forever. Said, and held for a person.
            return _cleanup_failure(
                o, t, now, old, reason=st.Reason.POD_STUCK_TERMINATING,
                message=f"pod {old.name} (uid {old.uid}) still exists {o.spec.budgets.cleanup_seconds}s after its "
                "forced delete" + (f"; finalizers: {', '.join(old.finalizers)}" if old.finalizers else ""),
            )
        wait = min(1.0, transitions.remaining(t.deadline, now)) if t.deadline is not None else 1.0
        if old.finalizers or not old.deleting:
            return p.Plan((p.ForceDeletePod(old.name, old.uid),), wait, "force delete (recorded)")
        return p.Plan((), wait, "force-deleted; awaiting pod gone")
    if t.deadline is not None and now >= t.deadline:
        return _cleanup_failure(
            o, t, now, old, reason=st.Reason.POD_STUCK_TERMINATING,
            message=f"pod {old.name} (uid {old.uid}) still exists {o.spec.budgets.cleanup_seconds}s after its delete"
            + (f"; finalizers: {', '.join(old.finalizers)}" if old.finalizers else ""),
        )
    wait = transitions.remaining(t.deadline, now)
    if not old.labelled:
        # Its labels were edited away: no watch event of ours says when it goes. Look again.
        wait = min(wait, 1.0)
    return p.Plan((), wait, "awaiting pod gone")


def _cleanup_failure(
    o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo, *, reason: st.Reason, message: str
) -> p.Plan:
    """Advance to CleanupFailed: the condition, a Warning event, a count, and the failure recorded
    in status.lastCleanupFailure."""
    failure = st.CleanupFailure(generation=t.from_ or 0, pod=old.name, uid=old.uid, reason=reason, message=message, at=now)
    hint = (
        "force-deleting (recovery.onCleanupFailure=Force)"
        if o.spec.recovery.on_cleanup_failure == spec_model.OnCleanupFailure.FORCE
        else f'held: annotate baton.dev/force-recovery="{t.from_}" to abandon the pod'
    )
    plan = transitions.advance(
        o, t, now, st.Step.CLEANUP_FAILED, deadline=None,
        also_conditions=((st.ConditionType.CLEANUP_FAILED, True, reason, f"{message}; {hint}"),),
        extra=(
            p.Event("Warning", st.Reason.CLEANUP_FAILED.value, f"{message}; {hint}"),
            p.Record(p.Metric.CLEANUP_FAILURES, (("reason", reason.value),)),
        ),
    )
    write = plan.actions[0]
    assert isinstance(write, p.WriteStatus)
    with_failure = p.WriteStatus(write.status.model_copy(update={"last_cleanup_failure": failure}))
    return dataclasses.replace(plan, actions=(with_failure, *plan.actions[1:]))


def cleanup_failed(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """CleanupFailed: held until the pod is gone, a force-recovery naming its generation, or
    policy Force; other values are refused as stale. A failed preRetire hook holds it too
    (baton.lifecycle.hooks): released only by its retry or a force recovery."""
    if hooks.held(t, st.HookName.PRE_RETIRE):
        return retire.hook_failed(o, t, now)
    old = o.pod_by_uid(t.from_uid)
    failed = o.status.last_cleanup_failure
    failed_gen = failed.generation if failed else (t.from_ or 0)
    if old is None:
        done = retire.retire_done(o, t, now, cleanup=(st.ConditionType.CLEANUP_FAILED, False, st.Reason.POD_GONE,
                                                 f"generation {failed_gen}'s pod is gone after its cleanup failure"))
        return done
    value = o.annotations.get(names.ANN_FORCE_RECOVERY)
    force_policy = o.spec.recovery.on_cleanup_failure == spec_model.OnCleanupFailure.FORCE
    named = value is not None and value.strip() == str(failed_gen)
    if force_policy and value is not None and not named:
        # The policy recovers anyway; a wrong number is still refused as stale, and said so.
        return p.Plan(tuple(verbs.stale_force_recovery(o, value, f"the cleanup failure is for generation {failed_gen}")), 0,
                      "stale force-recovery")
    if force_policy or named:
        by = f"annotation baton.dev/force-recovery={value}" if named else "recovery.onCleanupFailure=Force"
        msg = f"abandoned pod {old.name} (uid {old.uid}) of generation {failed_gen} by {by}"
        extra: list[p.Action] = [
            p.Event("Normal", st.Reason.FORCE_RECOVERED.value, msg),
            p.Record(p.Metric.FORCE_RECOVERIES),
        ]
        if value is not None:
            extra.append(p.RemoveAnnotation(names.ANN_FORCE_RECOVERY, value))
        return transitions.advance(
            o, t, now, st.Step.AWAITING_POD_GONE,
            deadline=now + transitions.seconds(o.spec.budgets.cleanup_seconds),
            forced=True, message=msg,
            also_conditions=((st.ConditionType.CLEANUP_FAILED, False, st.Reason.FORCE_RECOVERED, msg),),
            extra=tuple(extra),
        )
    if value is not None:
        return p.Plan(tuple(verbs.stale_force_recovery(o, value, f"the cleanup failure is for generation {failed_gen}")), 0, "stale force-recovery")
    return p.Plan((p.ReleaseLease(),), None, "cleanup failed: held for a person")
