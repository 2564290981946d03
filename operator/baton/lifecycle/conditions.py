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
    old = next((c for c in conditions if c.type == kind), None)
    since = old.last_transition_time if old is not None and old.status == value else now
    new = status.Condition(
        type=kind,
        status=value,
        reason=reason_text,
        message=message,
        observed_generation=observed_generation,
        last_transition_time=since,
    )
    others = tuple(c for c in conditions if c.type != kind)
    order = list(status.ConditionType)
    return tuple(sorted(others + (new,), key=lambda c: order.index(c.type)))
