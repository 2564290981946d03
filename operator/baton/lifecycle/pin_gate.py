"""Pins (ToolRuntimeClaims) hold a retire before admission stops, bounded by budgets.pinSeconds."""

from __future__ import annotations

import datetime

from baton.lifecycle import conditions
from baton.lifecycle import pins as pn
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.lifecycle import verbs
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st


def applies(t: st.Transition, old: obs.PodInfo) -> bool:
    """Pins hold a retire only before admission stops, and only of a pod that still serves: a
    pod already lost (failed, deleted, or the PodLost trigger) cannot be pinned."""
    return (t.step == st.Step.STOPPING_ADMISSION and t.from_ is not None and t.trigger != st.Trigger.POD_LOST
            and old.owned and old.serving and not old.deleting and old.phase not in ("Failed", "Succeeded"))


def pins_of(o: obs.Observed, t: st.Transition) -> pn.Pins:
    """The claims pinning the retiring generation `t.from_`."""
    return pn.pins(claims=o.claims, runtime=o.name, generation=t.from_ or 0, known=o.claims_known)


def _deadline(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> datetime.datetime:
    """When the pins' wait ends: pinSeconds after it began (or from now)."""
    return (t.pin_wait_since or now) + transitions.seconds(o.spec.budgets.pin_seconds)


def wait_message(o: obs.Observed, t: st.Transition, pins: pn.Pins, now: datetime.datetime) -> str:
    """What a retire waiting for its pins says (status message and event)."""
    return (f"retiring generation {t.from_} ({st.text(t.trigger)}) waits for {pins.describe()} (CommitEligible or "
            f"Committed) before admission stops, at most budgets.pinSeconds={o.spec.budgets.pin_seconds} (until "
            f"{_deadline(o, t, now).isoformat()}); generation {t.from_} keeps serving")


def _blocked_message(o: obs.Observed, t: st.Transition, pins: pn.Pins) -> str:
    """What a retire blocked by pins past pinSeconds says."""
    return (f"generation {t.from_} is pinned by {pins.describe()} past budgets.pinSeconds="
            f"{o.spec.budgets.pin_seconds}: not retired ({st.text(t.trigger)}), it keeps serving; it proceeds when the "
            f'claims are Released or Abandoned, or on annotation {names.ANN_FORCE_RETIRE}: "{t.from_}"')


def external_wait(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> tuple[str, float | None] | None:
    """A retire waiting for pins, its status already saying so: no Lease needed (claim events wake it)."""
    if t.step != st.Step.STOPPING_ADMISSION or t.pin_wait_since is None or names.ANN_FORCE_RETIRE in o.annotations:
        return None
    old = o.pod_by_uid(t.from_uid)
    if old is None or not applies(t, old):
        return None
    pins = pins_of(o, t)
    if not pins.pinned:
        return None
    if t.pin_blocked:
        return ("retirement blocked by pins", None) if t.message == _blocked_message(o, t, pins) else None
    deadline = _deadline(o, t, now)
    if now < deadline and t.message == wait_message(o, t, pins, now):
        return "awaiting pin release", transitions.remaining(deadline, now)
    return None


def _resume_retire(o: obs.Observed, t: st.Transition, now: datetime.datetime, why: str, *,
                   force_retired: str | None = None, extra: tuple[p.Action, ...] = ()) -> p.Plan:
    """The pins resolved (or a person overrode them): stop admission now, the drain budget from now."""
    new_t = t.model_copy(update={"step_started_at": now, "deadline": now + transitions.seconds(o.spec.budgets.drain_seconds),
                                 "pin_wait_since": None, "pin_blocked": False, "message": why,
                                 "force_retired": force_retired or t.force_retired})
    status = conditions.step_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
    if status.condition(st.ConditionType.RETIREMENT_BLOCKED) is not None:
        status = conditions.with_conditions(status, o, now, (st.ConditionType.RETIREMENT_BLOCKED, False, st.Reason.NOT_BLOCKED, why))
    return p.Plan((p.WriteStatus(status), transitions.step_timing(t, now), *extra), 0, f"pins: {why}")


def gate(o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo) -> p.Plan | None:
    """Before admission stops: wait for the pins of generation t.from_, bounded by pinSeconds;
    past it, RetirementBlocked (fail closed: the generation keeps serving)."""
    if not applies(t, old) or t.force_retired:
        return None  # a person retired it past its pins: they never hold it again
    gen = t.from_
    pins = pins_of(o, t)
    force = o.annotations.get(names.ANN_FORCE_RETIRE)
    if force is not None:
        if force.strip() == str(gen) and t.pin_wait_since is not None:
            msg = (f"generation {gen} force-retired past pins ({pins.describe() if pins.pinned else 'none left'}) "
                   f'by annotation {names.ANN_FORCE_RETIRE}: "{force}"')
            return _resume_retire(o, t, now, msg, force_retired=msg, extra=(
                p.Event("Normal", st.Reason.FORCE_RETIRED.value, msg), p.RemoveAnnotation(names.ANN_FORCE_RETIRE, force),
                p.Record(p.Metric.FORCE_RETIRES)))
        return p.Plan(tuple(verbs.stale_force_retire(force, f"generation {gen}'s retire is not waiting for pins")), 0,
                      "stale force-retire")
    if not pins.pinned:
        if t.pin_wait_since is None:
            return None  # the fast path: nothing pins it
        return _resume_retire(o, t, now, f"pins of generation {gen} released")
    if t.pin_wait_since is None:
        # Pinned after the transition was recorded (a claim arrived meanwhile): wait from now.
        msg = wait_message(o, t, pins, now)
        new_t = t.model_copy(update={"pin_wait_since": now, "message": msg})
        status = conditions.with_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now,
                                  (st.ConditionType.PROGRESSING, True, st.Reason.AWAITING_PIN_RELEASE, msg))
        return p.Plan((p.WriteStatus(status), p.Event("Normal", st.Reason.AWAITING_PIN_RELEASE.value, msg)), 0, "pinned")
    deadline = _deadline(o, t, now)
    if t.pin_blocked or now >= deadline:
        msg = _blocked_message(o, t, pins)
        if t.pin_blocked and t.message == msg:
            return p.Plan((p.ReleaseLease(),), None, "retirement blocked by pins; Lease released")
        new_t = t.model_copy(update={"pin_blocked": True, "message": msg})
        status = conditions.with_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now,
                                  (st.ConditionType.PROGRESSING, True, st.Reason.AWAITING_PIN_RELEASE, msg),
                                  (st.ConditionType.RETIREMENT_BLOCKED, True, st.Reason.PINNED_BY_COMMIT_ELIGIBLE_CLAIM, msg))
        actions: list[p.Action] = [p.WriteStatus(status), p.Event("Warning", st.Reason.PINNED_BY_COMMIT_ELIGIBLE_CLAIM.value, msg)]
        if not t.pin_blocked:
            actions.append(p.Record(p.Metric.RETIREMENTS_BLOCKED))
        return p.Plan(tuple(actions), 0, "retirement blocked by pins")
    msg = wait_message(o, t, pins, now)
    if t.message != msg:
        # Other claims pin it now: say which (the wait stays bounded from pinWaitSince).
        new_t = t.model_copy(update={"message": msg})
        status = conditions.with_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now,
                                  (st.ConditionType.PROGRESSING, True, st.Reason.AWAITING_PIN_RELEASE, msg))
        return p.Plan((p.WriteStatus(status),), 0, "pins changed")
    return p.Plan((p.ReleaseLease(),), transitions.remaining(deadline, now), "awaiting pin release; Lease released")
