"""Condition bookkeeping: lastTransitionTime moves only when a condition's status flips; the
conditions a step or the first write sets."""

from __future__ import annotations

import datetime

from baton.model import observed as obs
from baton.model import status as st


def set_condition(
    conditions: tuple[st.Condition, ...],
    *,
    kind: st.ConditionType,
    true: bool,
    reason: st.Reason | str,
    message: str,
    observed_generation: int,
    now: datetime.datetime,
) -> tuple[st.Condition, ...]:
    """Set one condition of ours; its lastTransitionTime stays unless its status flips."""
    value = "True" if true else "False"
    reason_text = reason.value if isinstance(reason, st.Reason) else reason
    old = next((c for c in conditions if c.type == kind.value), None)
    since = old.last_transition_time if old is not None and old.status == value else now
    new = st.Condition(
        type=kind.value,
        status=value,
        reason=reason_text,
        message=message,
        observed_generation=observed_generation,
        last_transition_time=since,
    )
    others = tuple(c for c in conditions if c.type != kind.value)
    # Ours in a fixed order, then other tools' conditions as they were (kept, never dropped).
    order = [k.value for k in st.ConditionType]
    ours = sorted((c for c in others + (new,) if c.type in order), key=lambda c: order.index(c.type))
    return tuple(ours) + tuple(c for c in others if c.type not in order)


Cond = tuple[st.ConditionType, bool, st.Reason | str, str]


def with_conditions(
    status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime, *changes: Cond
) -> st.ToolRuntimeStatus:
    """`status` with each (type, true, reason, message) change set, in order, then Ready and
    Progressing summarised from the failures that hold (`summarised`)."""
    conds = status.conditions
    for kind, true, reason, message in changes:
        conds = set_condition(
            conds, kind=kind, true=true, reason=reason, message=message,
            observed_generation=o.meta_generation, now=now,
        )
    return summarised(status.model_copy(update={"conditions": conds}), o, now)


# Degraded reasons that stop a generation from starting or becoming Ready: while nothing serves,
# Ready carries the cause (its reason and message) instead of saying only that nothing serves.
# Not here, because they stop nothing from serving: ConfigRefUnreadable (Baton cannot read the
# object; the kubelet can), ServiceError (the pod serves; only the Service was refused),
# DrainProbeMisconfigured (set as a generation becomes Ready), LockTimeout and LeaseOutsideView
# (another holder works on it), UnknownStep (the transition resumed), and NameConflict (Ready says
# NameConflict itself when a pod holds the name; a foreign Service alone blocks no pod).
BLOCKING = (st.Reason.CONFIG_REF_MISSING, st.Reason.INVALID_SPEC, st.Reason.POD_REJECTED, st.Reason.CONNECT_TIMEOUT,
            st.Reason.WAKE_FAILED)
# Ready reasons that only say nothing serves yet (or a transition's step): a cause replaces them.
_NOTHING_SERVES = {st.Reason.NO_GENERATION.value, st.Reason.BACKING_OFF.value, *(s.value for s in st.Step),
                   *(r.value for r in BLOCKING)}


def blocking_cause(status: st.ToolRuntimeStatus) -> tuple[str, str] | None:
    """(reason, message) of the failure that stops the runtime from serving, if one holds: a
    cleanup failure holding its transition, else a Degraded condition of a BLOCKING reason."""
    t = status.transition
    cleanup = status.condition(st.ConditionType.CLEANUP_FAILED)
    if t is not None and t.step == st.Step.CLEANUP_FAILED and cleanup is not None and cleanup.status == "True":
        return st.Reason.CLEANUP_FAILED.value, cleanup.message
    degraded = status.condition(st.ConditionType.DEGRADED)
    if degraded is not None and degraded.status == "True" and degraded.reason in {r.value for r in BLOCKING}:
        return degraded.reason, degraded.message
    return None


def _stalled(status: st.ToolRuntimeStatus, cause: tuple[str, str] | None) -> tuple[str, str] | None:
    """(reason, message) for Progressing=False while a failure holds the work (a Deployment's
    ProgressDeadlineExceeded): a held cleanup failure, a pod create refused and backing off,
    or, between transitions, a BLOCKING cause. None while work moves."""
    t = status.transition
    if cause is None:
        return None
    if t is None:
        return cause
    if t.step == st.Step.CLEANUP_FAILED and cause[0] == st.Reason.CLEANUP_FAILED.value:
        return cause
    if t.step == st.Step.CREATING and t.attempt and cause[0] == st.Reason.POD_REJECTED.value:
        return cause
    return None


def summarised(status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime) -> st.ToolRuntimeStatus:
    """Ready and Progressing as the failures that hold say (a pure function of the status, so a
    status rebuilt from the same facts is equal and not written again):
    - nothing serves and a cause blocks it (`blocking_cause`): Ready=False with its reason and
      message; once the cause is gone, a Ready that still names it goes back to what it says
      without one (the step, BackingOff, or NoGeneration);
    - a failure holds the work (`_stalled`): Progressing=False with its reason and message."""
    ready = status.condition(st.ConditionType.READY)
    progressing = status.condition(st.ConditionType.PROGRESSING)
    if ready is None or progressing is None:
        return status  # not written yet: the first write sets every condition
    cause = blocking_cause(status)
    changes: list[Cond] = []
    if ready.status == "False" and ready.reason in _NOTHING_SERVES:
        if cause is not None:
            reason, message = cause
            if status.transition is None and status.retry is not None and status.retry.not_before is not None:
                message += f"; next try at {status.retry.not_before.isoformat()}"
            changes.append((st.ConditionType.READY, False, reason, message))
        elif ready.reason in {r.value for r in BLOCKING}:
            changes.append((st.ConditionType.READY, False, *_without_cause(status)))
    stalled = _stalled(status, cause)
    if stalled is not None:
        changes.append((st.ConditionType.PROGRESSING, False, *stalled))
    conds = status.conditions
    for kind, true, reason, message in changes:
        conds = set_condition(conds, kind=kind, true=true, reason=reason, message=message,
                              observed_generation=o.meta_generation, now=now)
    return status.model_copy(update={"conditions": conds}) if conds != status.conditions else status


def _without_cause(status: st.ToolRuntimeStatus) -> tuple[str, str]:
    """Ready's (reason, message) while nothing serves and no cause blocks it."""
    t = status.transition
    if t is not None:
        return st.text(t.step), _step_text(t)
    if status.retry is not None and status.retry.not_before is not None:
        return st.Reason.BACKING_OFF.value, f"retrying after a failed start at {status.retry.not_before.isoformat()}"
    return st.Reason.NO_GENERATION.value, "no generation serves yet"


def _step_text(t: st.Transition) -> str:
    what = f"{st.text(t.kind)} {st.arrow(t)} ({st.text(t.trigger)}): {st.text(t.step)}"
    return f"{what}; {t.message}" if t.message else what


def initial_conditions(status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime) -> st.ToolRuntimeStatus:
    """Every condition type is present from the first write on, each with a reason."""
    missing: list[Cond] = []
    if status.condition(st.ConditionType.READY) is None:
        missing.append((st.ConditionType.READY, False, st.Reason.NO_GENERATION, "no generation serves yet"))
    if status.condition(st.ConditionType.PROGRESSING) is None:
        missing.append((st.ConditionType.PROGRESSING, False, st.Reason.IDLE, ""))
    if status.condition(st.ConditionType.CLEANUP_FAILED) is None:
        missing.append((st.ConditionType.CLEANUP_FAILED, False, st.Reason.CLEAN, ""))
    if status.condition(st.ConditionType.DEGRADED) is None:
        missing.append((st.ConditionType.DEGRADED, False, st.Reason.HEALTHY, ""))
    if status.condition(st.ConditionType.SUSPENDED) is None:
        missing.append((st.ConditionType.SUSPENDED, False, st.Reason.ACTIVE, ""))
    return with_conditions(status, o, now, *missing)


def step_conditions(status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime, t: st.Transition) -> st.ToolRuntimeStatus:
    """Progressing and Ready as a transition at step `t.step` reports them (all types present)."""
    what = _step_text(t)
    changes: list[Cond] = [(st.ConditionType.PROGRESSING, True, st.text(t.step), what)]
    if t.trigger == st.Trigger.ORPHAN:
        # A stray beside the serving generation: two pods of one runtime exist until it is gone.
        changes.append((st.ConditionType.READY, False, st.Reason.MULTIPLE_PODS, f"{t.from_pod} (uid {t.from_uid}) is retired first; {what}"))
    elif t.trigger == st.Trigger.WAKE and t.step in (st.Step.CREATING, st.Step.CONNECTING):
        changes.append((st.ConditionType.READY, False, st.Reason.WAKING, what))  # an idle runtime's wake
    else:
        changes.append((st.ConditionType.READY, False, st.text(t.step), what))
    return with_conditions(initial_conditions(status, o, now), o, now, *changes)


def condition_true(status: st.ToolRuntimeStatus, kind: st.ConditionType) -> bool:
    """Whether the condition `kind` is present with status True."""
    c = status.condition(kind)
    return c is not None and c.status == "True"
