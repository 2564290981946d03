"""What a step writes (status stamped by this holder, the next step) and the arithmetic of
budgets, generation numbers and back-offs."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib

from baton.lifecycle import conditions
from baton.lifecycle import plan as p
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st

MAX_BACKOFF_SECONDS = 300.0
HISTORY_LIMIT = 10


# How often a runtime blocked by an object it does not own (a foreign pod holding its name)
# looks again: such objects may carry none of Baton's labels, so no watch event says they went.
FOREIGN_POLL_SECONDS = 5.0


# Back-off of a step the API server refused (pod creation): base, cap, and jitter of ±20 %.
REFUSAL_BACKOFF_BASE_SECONDS = 1.0


REFUSAL_BACKOFF_CAP_SECONDS = 60.0


def stamped(o: obs.Observed, now: datetime.datetime) -> st.ToolRuntimeStatus:
    """Status as this holder writes it: its fencing token, identity and observed generation."""
    token = max(o.status.fencing_token, o.lease.token if o.lease.holder == o.identity else 0)
    pending = o.status.pending_reset
    if pending is not None and pending.value != o.annotations.get(names.ANN_RESET):
        pending = None  # the reset it recorded was consumed or refused
    return o.status.model_copy(
        update={"fencing_token": token, "holder": o.identity, "observed_generation": o.meta_generation,
                "pending_reset": pending}
    )


def seconds(n: float) -> datetime.timedelta:
    """`n` seconds as a timedelta."""
    return datetime.timedelta(seconds=n)


def remaining(deadline: datetime.datetime | None, now: datetime.datetime) -> float:
    """Seconds from `now` until `deadline` (0 when past or None)."""
    if deadline is None:
        return 0.0
    return max(0.0, (deadline - now).total_seconds())


def next_generation(o: obs.Observed) -> int:
    """One above every generation number seen: status, history and the pods in view."""
    seen = [o.status.latest_generation]
    if o.status.current:
        seen.append(o.status.current.generation)
    if o.status.transition and o.status.transition.to:
        seen.append(o.status.transition.to)
    seen += [h.generation for h in o.status.history]
    seen += [pod.generation for pod in o.pods if pod.generation is not None]
    return max(seen) + 1


def number_given_up(o: obs.Observed, t: st.Transition, now: datetime.datetime, *, number: int) -> tuple[st.ToolRuntimeStatus, int]:
    """Status with Creating moved from `number` to the next number, latestGeneration raised with
    it: a create of `number` may still land (ours unanswered, or another holder's), and sent
    again it could land once that pod had come and gone, a second pod of one number."""
    nxt = max(next_generation(o), number + 1)
    moved = t.model_copy(update={"to": nxt, "to_uid": None, "attempt": None, "not_before": None})
    status = stamped(o, now).model_copy(update={"transition": moved,
                                                "latest_generation": max(o.status.latest_generation, nxt)})
    return conditions.step_conditions(status, o, now, moved), nxt


def retiring(
    o: obs.Observed,
    now: datetime.datetime,
    *,
    kind: st.TransitionKind,
    trigger: st.Trigger | str,
    pod: obs.PodInfo | None,
    generation: int | None,
    uid: str | None,
    to: int | None = None,
    started_at: datetime.datetime | None = None,
) -> st.Transition:
    """A transition that begins by retiring `pod` (or, if it is already gone, skips to the end)."""
    return st.Transition(
        kind=kind,
        trigger=trigger,
        from_=generation,
        from_pod=pod.name if pod else (names.pod_name(o.name) if generation else None),
        from_uid=uid,
        from_started_at=(pod.created_at if pod else None) or started_at,
        to=to,
        step=st.Step.STOPPING_ADMISSION,
        started_at=now,
        step_started_at=now,
        deadline=now + seconds(o.spec.budgets.drain_seconds),
    )


def blocked(
    o: obs.Observed, now: datetime.datetime, *, kind: st.ConditionType, reason: st.Reason, message: str,
    wait: float | None,
) -> p.Plan:
    """Say once (condition, Warning event, count) why the transition cannot go on; then wait."""
    c = o.status.condition(kind)
    true = kind != st.ConditionType.READY
    if c is not None and c.status == ("True" if true else "False") and c.reason == reason.value and c.message == message:
        return p.Plan((), wait, message)
    status = conditions.with_conditions(stamped(o, now), o, now, (kind, true, reason, message))
    actions: list[p.Action] = [p.WriteStatus(status), p.Event("Warning", reason.value, message)]
    if reason in (st.Reason.NAME_CONFLICT, st.Reason.MULTIPLE_PODS):
        actions.append(p.Record(p.Metric.NAME_CONFLICTS, (("kind", reason.value),)))
    return p.Plan(tuple(actions), 0, f"blocked: {reason.value}")


def advance(
    o: obs.Observed,
    t: st.Transition,
    now: datetime.datetime,
    step: st.Step,
    *,
    deadline: datetime.datetime | None,
    extra: tuple[p.Action, ...] = (),
    also_conditions: tuple[conditions.Cond, ...] = (),
    **changes: object,
) -> p.Plan:
    """Move `t` to `step` (the step's time, its deadline, further fields) and persist it, with
    the step's duration recorded and `extra` actions after the write."""
    new_t = t.model_copy(update={"step": step, "step_started_at": now, "deadline": deadline, **changes})
    status = stamped(o, now).model_copy(update={"transition": new_t})
    if new_t.to:
        status = status.model_copy(update={"latest_generation": max(status.latest_generation, new_t.to)})
    status = conditions.with_conditions(conditions.step_conditions(status, o, now, new_t), o, now, *also_conditions)
    return p.Plan(
        (p.WriteStatus(status), step_timing(t, now), *extra),
        0,
        f"{st.text(t.step)} -> {step.value}",
    )


def step_timing(t: st.Transition, now: datetime.datetime) -> p.Record:
    """The duration metric of the step `t` is leaving."""
    return p.Record(p.Metric.STEP_DURATION, (("step", st.text(t.step)),),
                    max(0.0, (now - t.step_started_at).total_seconds()))


def backoff_seconds(attempt: int, base: float) -> float:
    """Exponential back-off after a failed start: `base` doubled per attempt, capped."""
    return float(min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1))))


def refusal_backoff_seconds(*, attempt: int, seed: str) -> float:
    """Exponential back-off with ±20 % jitter, derived from `seed` so decide() stays pure and
    replicas agree: runtimes refused together (a quota) do not retry in lockstep."""
    base = min(REFUSAL_BACKOFF_CAP_SECONDS, REFUSAL_BACKOFF_BASE_SECONDS * 2 ** max(0, attempt - 1))
    digest = hashlib.sha256(f"{seed}/{attempt}".encode()).digest()
    return float(base * (0.8 + 0.4 * digest[0] / 255))


# What a helper between transitions answers, for its caller to match on.


@dataclasses.dataclass(frozen=True)
class Start:
    """This transition may begin now."""

    transition: st.Transition


@dataclasses.dataclass(frozen=True)
class Act:
    """Carry out this plan first (a status write, taking the Lease); decide again after it."""

    plan: p.Plan


@dataclasses.dataclass(frozen=True)
class Wait:
    """Nothing to do yet: look again after `seconds`."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Nothing:
    """Nothing to do and nothing to wait for."""
