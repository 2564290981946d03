"""The handoff policy: a template change may wait for idle (WhenIdle) or for a reset (Manual)."""

from __future__ import annotations

import dataclasses
import datetime

from baton.lifecycle import conditions
from baton.lifecycle import lease
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st


# While a change waits for idle, the drain probe runs at most this often (each check takes the
# Lease, probes, and hands the Lease back: two writes), however short the probe's period.
PENDING_CHECK_FLOOR_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class PolicyHold:
    """The handoff policy holds a change back: the runtime stays idle; look again after `wait`."""

    wait: float | None


def _what_changed(o: obs.Observed) -> tuple[str, ...]:
    """Which inputs of the hash changed since the current generation: "template", "ConfigMap/x"..."""
    current = o.status.current
    before = current.parts if current is not None else None
    unknown = ("template or referenced config",)
    if not before or not o.desired_parts:
        return unknown
    after = dict(o.desired_parts)
    keys = sorted(set(before) | set(after), key=lambda k: (k != "template", k))
    return tuple(k for k in keys if before.get(k) != after.get(k)) or unknown


def _pending_message(o: obs.Observed, pending: st.PendingChange) -> str:
    """What a change held back by the handoff policy says, and until when it waits."""
    gen = o.status.current.generation if o.status.current else 0
    what = f"{', '.join(pending.changed)} changed since generation {gen} started"
    if o.spec.handoff.policy == spec_model.HandoffPolicy.MANUAL:
        return f'{what}; handoff policy Manual: hands off on annotation {names.ANN_RESET}: "{gen}"'
    until = pending.since + transitions.seconds(o.spec.budgets.pending_seconds)
    return (f"{what}; handoff policy WhenIdle: hands off when the drain probe says idle, at the latest at "
            f"{until.isoformat()} (budgets.pendingSeconds={o.spec.budgets.pending_seconds})")


def _check_interval(o: obs.Observed) -> float:
    """Seconds between drain-probe checks of a change waiting for idle."""
    probe = o.spec.drain.probe
    return max(PENDING_CHECK_FLOOR_SECONDS, float(probe.period_seconds if probe else 0))


def idle_check_due(o: obs.Observed, now: datetime.datetime) -> bool:
    """Whether the Lease holder should probe the serving pod for a change waiting for idle now
    (the worker asks before probing: every pass under the Lease must not dial the pod)."""
    return o.idle_checked_at is None or (now - o.idle_checked_at).total_seconds() >= _check_interval(o)


def handoff_gate(
    o: obs.Observed, now: datetime.datetime, t: st.Transition
) -> transitions.Start | transitions.Act | PolicyHold:
    """A template change under policy WhenIdle or Manual waits; every other trigger (reset,
    suspend, deletion, a lost pod, a stray) goes at once. Start: begin `t` (perhaps with a
    message); Act: a plan first (record the change, or take the Lease to probe); PolicyHold:
    stay idle."""
    policy = o.spec.handoff.policy
    if t.trigger != st.Trigger.TEMPLATE_CHANGED or policy == spec_model.HandoffPolicy.IMMEDIATE:
        return transitions.Start(t)
    pending = o.status.pending
    if pending is None or pending.template_hash != o.desired_hash:
        # Recorded first (a status write under the Lease): the wait is bounded from `since`, kept
        # across replicas and restarts; a further change keeps the first `since`.
        rec = st.PendingChange(template_hash=o.desired_hash, since=pending.since if pending else now,
                               changed=_what_changed(o))
        msg = _pending_message(o, rec)
        reason = st.Reason.WAITING_FOR_RESET if policy == spec_model.HandoffPolicy.MANUAL else st.Reason.WAITING_FOR_IDLE
        status = conditions.with_conditions(transitions.stamped(o, now).model_copy(update={"pending": rec}), o, now,
                                  (st.ConditionType.UPDATE_PENDING, True, reason, msg))
        return transitions.Act(lease.with_lease(o, now, lambda: p.Plan(
            (p.WriteStatus(status), p.Event("Normal", reason.value, msg)), 0, "change held back by the handoff policy")))
    if policy == spec_model.HandoffPolicy.MANUAL:
        return PolicyHold(None)  # until a reset names the current generation (the reset trigger)
    budget = float(o.spec.budgets.pending_seconds)
    waited = (now - pending.since).total_seconds()
    if waited >= budget:
        return transitions.Start(t.model_copy(update={
            "message": f"WhenIdle: not idle within budgets.pendingSeconds={budget:.0f}; handing off anyway"}))
    if o.spec.drain.probe is None or o.drain_idle:
        return transitions.Start(t.model_copy(update={"message": "WhenIdle: the drain probe said idle"
                                                      if o.spec.drain.probe else "WhenIdle: no drain probe to wait for"}))
    left = budget - waited + 0.05
    interval = _check_interval(o)
    if o.idle_checked_at is not None:
        since_check = (now - o.idle_checked_at).total_seconds()
        if since_check < interval:
            # Checked lately (maybe in this very pass) and not idle: the Lease goes back (the
            # steady path below releases it), the next check after the interval.
            return PolicyHold(min(interval - since_check, left))
    if lease.held_here(o):
        return PolicyHold(min(interval, left))  # a check was due but could not run here: look again later
    # Time to check: only the Lease holder probes, so take the Lease first.
    return transitions.Act(lease.with_lease(o, now, lambda: p.Plan((), 0, "WhenIdle: probe")))
