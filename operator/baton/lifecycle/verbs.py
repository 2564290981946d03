"""Annotation verbs: stale ones refused, and a reset that arrives mid-transition waiting for it."""

from __future__ import annotations

import datetime

from baton.lifecycle import hooks
from baton.lifecycle import lease
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st


def pending_reset(
    o: obs.Observed, t: st.Transition, now: datetime.datetime
) -> transitions.Act | transitions.Wait | transitions.Nothing:
    """A reset that arrives mid-transition waits for it, bounded by lockSeconds.

    When it is first seen, the holder persists it with the time (status.pendingReset), so the
    bound holds across replicas and restarts. Within the bound: seconds left (it is re-checked
    against the then-current generation once the transition ends). Past it: refused as stale,
    touching nothing. The reset a Reset transition carries out (its value is the transition's
    `from`) is removed without a word. No reset annotation: Nothing.
    """
    value = o.annotations.get(names.ANN_RESET)
    if value is None:
        return transitions.Nothing()
    if t.trigger == st.Trigger.RESET and value.strip() == str(t.from_):
        # The reset this transition carries out: its begin plan failed after the status write,
        # before removing the annotation. Consumed, not stale.
        return transitions.Act(p.Plan((p.RemoveAnnotation(names.ANN_RESET, value),), 0,
                                      "reset under way: annotation consumed"))
    pending = o.status.pending_reset
    if pending is None or pending.value != value:
        if o.shutting_down and not lease.held_here(o):
            return transitions.Nothing()
        recorded = transitions.stamped(o, now).model_copy(update={"pending_reset": st.PendingReset(value=value, since=now)})
        return transitions.Act(lease.with_lease(
            o, now, lambda: p.Plan((p.WriteStatus(recorded),), 0, "reset seen mid-transition: recorded")))
    budget = float(o.spec.budgets.lock_seconds)
    waited = (now - pending.since).total_seconds()
    if waited < budget:
        return transitions.Wait(budget - waited + 0.05)
    return transitions.Act(p.Plan(
        (
            p.RemoveAnnotation(names.ANN_RESET, value, consumes=True),
            p.Event("Warning", st.Reason.STALE_RESET.value,
                    f"reset names generation {value}, but {st.text(t.kind)} {st.arrow(t)} was still under way after "
                    f"lockSeconds={o.spec.budgets.lock_seconds}: nothing touched"),
            p.Record(p.Metric.STALE_VERBS, (("verb", "reset"),)),
        ),
        0,
        "reset waited past lockSeconds",
    ))


def stale_verbs(o: obs.Observed, current_pod: obs.PodInfo | None) -> tuple[p.Action, ...]:
    """Between transitions: refuse a reset not naming the serving generation, and any
    force-recovery or force-retire (nothing waits for them)."""
    actions: list[p.Action] = []
    current = o.status.current
    reset = o.annotations.get(names.ANN_RESET)
    if reset is not None:
        valid = (
            current is not None
            and current_pod is not None
            and current_pod.owned
            and not o.spec.suspend
            and not o.deleting
            and reset.strip() == str(current.generation)
        )
        if not valid:
            now_gen = str(current.generation) if current else "none"
            actions += [
                p.RemoveAnnotation(names.ANN_RESET, reset, consumes=True),
                p.Event("Warning", st.Reason.STALE_RESET.value,
                        f"reset names generation {reset!s}, but the current generation is {now_gen}: nothing touched"),
                p.Record(p.Metric.STALE_VERBS, (("verb", "reset"),)),
            ]
    force = o.annotations.get(names.ANN_FORCE_RECOVERY)
    if force is not None:
        actions += stale_force_recovery(o, force, "no cleanup failure is pending")
    retire = o.annotations.get(names.ANN_FORCE_RETIRE)
    if retire is not None:
        actions += stale_force_retire(retire, "no retire waits for pins")
    retry = o.annotations.get(names.ANN_RETRY_HOOK)
    if retry is not None:
        actions += hooks.stale_retry(retry, "no failed hook is pending")
    return tuple(actions)


def stale_force_recovery(o: obs.Observed, value: str, why: str) -> list[p.Action]:
    """Refuse a force-recovery annotation: remove it, say why, count it."""
    return [
        p.RemoveAnnotation(names.ANN_FORCE_RECOVERY, value, consumes=True),
        p.Event("Warning", st.Reason.STALE_FORCE_RECOVERY.value,
                f"force-recovery names generation {value!s}, but {why}: nothing touched"),
        p.Record(p.Metric.STALE_VERBS, (("verb", "force-recovery"),)),
    ]


def stale_force_retire(value: str, why: str) -> list[p.Action]:
    """Refuse a force-retire annotation: remove it, say why, count it."""
    return [
        p.RemoveAnnotation(names.ANN_FORCE_RETIRE, value, consumes=True),
        p.Event("Warning", st.Reason.STALE_FORCE_RETIRE.value,
                f"force-retire names generation {value!s}, but {why}: nothing touched"),
        p.Record(p.Metric.STALE_VERBS, (("verb", "force-retire"),)),
    ]
