"""Condition bookkeeping: lastTransitionTime moves only when a condition's status flips."""

from __future__ import annotations

import datetime

from baton.model import status


def set_condition(
    conditions: tuple[status.Condition, ...],
    *,
    kind: status.ConditionType,
    true: bool,
    reason: status.Reason | str,
    message: str,
    observed_generation: int,
    now: datetime.datetime,
) -> tuple[status.Condition, ...]:
    value = "True" if true else "False"
    reason_text = reason.value if isinstance(reason, status.Reason) else reason
    old = next((c for c in conditions if c.type == kind.value), None)
    since = old.last_transition_time if old is not None and old.status == value else now
    new = status.Condition(
        type=kind.value,
        status=value,
        reason=reason_text,
        message=message,
        observed_generation=observed_generation,
        last_transition_time=since,
    )
    others = tuple(c for c in conditions if c.type != kind.value)
    # Ours in a fixed order, then other tools' conditions as they were (kept, never dropped).
    order = [k.value for k in status.ConditionType]
    ours = sorted((c for c in others + (new,) if c.type in order), key=lambda c: order.index(c.type))
    return tuple(ours) + tuple(c for c in others if c.type not in order)
