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
    """`status` with each (type, true, reason, message) change set, in order."""
    conds = status.conditions
    for kind, true, reason, message in changes:
        conds = set_condition(
            conds, kind=kind, true=true, reason=reason, message=message,
            observed_generation=o.meta_generation, now=now,
        )
    return status.model_copy(update={"conditions": conds})


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
    what = f"{st.text(t.kind)} {st.arrow(t)} ({st.text(t.trigger)}): {st.text(t.step)}"
    if t.message:
        what += f"; {t.message}"
    changes: list[Cond] = [(st.ConditionType.PROGRESSING, True, st.text(t.step), what)]
    if t.trigger == st.Trigger.ORPHAN:
        # A stray beside the serving generation: two pods of one runtime exist until it is gone.
        changes.append((st.ConditionType.READY, False, st.Reason.MULTIPLE_PODS, f"{t.from_pod} (uid {t.from_uid}) is retired first; {what}"))
    else:
        changes.append((st.ConditionType.READY, False, st.text(t.step), what))
    return with_conditions(initial_conditions(status, o, now), o, now, *changes)


def condition_true(status: st.ToolRuntimeStatus, kind: st.ConditionType) -> bool:
    """Whether the condition `kind` is present with status True."""
    c = status.condition(kind)
    return c is not None and c.status == "True"
