"""Retiring the old pod: StoppingAdmission -> Draining -> the delete (advancing to Terminating),
then recording it gone. The steps after the delete (Terminating, AwaitingPodGone, CleanupFailed)
are in baton.lifecycle.cleanup."""

from __future__ import annotations

import dataclasses
import datetime

from baton.lifecycle import conditions
from baton.lifecycle import create
from baton.lifecycle import dormancy
from baton.lifecycle import hooks
from baton.lifecycle import pin_gate
from baton.lifecycle import plan as p
from baton.lifecycle import steady
from baton.lifecycle import transitions
from baton.model import observed as obs
from baton.model import status as st


def _drain_incomplete(o: obs.Observed, t: st.Transition, why: str) -> tuple[p.Action, ...]:
    """The Warning event and count of a drain that did not finish within drainSeconds."""
    return (
        p.Event("Warning", st.Reason.DRAIN_INCOMPLETE.value,
                f"generation {t.from_} ({t.from_pod}): {why} within drainSeconds={o.spec.budgets.drain_seconds}; terminating anyway"),
        p.Record(p.Metric.DRAIN_INCOMPLETE),
    )


# How often a retire routed through the gateway asks the gateway replicas again (a seal not yet
# confirmed, calls still in flight): each ask is one small admin call per replica, and the handoff
# should end within about this long of the last call finishing.
GATEWAY_POLL_SECONDS = 0.5
# A drain note (history) names at most this many gateway replicas.
NAMED_REPLICAS = 5
# Trimmed to fit status.transition.drainNote (the CRD's maxLength).
DRAIN_NOTE_LIMIT = 400


def _gateway(o: obs.Observed) -> bool:
    """The runtime's Service is routed through the gateway (spec.service.gateway)."""
    return o.spec.service is not None and o.spec.service.gateway


def _replicas(o: obs.Observed) -> str:
    """The gateway replicas that did not answer, named (a few), or why none could be asked."""
    who = o.gateway_unconfirmed
    if who:
        more = len(who) - NAMED_REPLICAS
        return ", ".join(who[:NAMED_REPLICAS]) + (f" and {more} more" if more > 0 else "")
    return o.gateway_error or "not asked yet"


def _sessions(o: obs.Observed, t: st.Transition) -> int | None:
    """The sessions the gateway replicas last forwarded to the retiring pod, for its history
    entry: this pass's count, else the one status recorded during the drain, else the one kept
    when the drain ended; None without the gateway or when no count was known."""
    if not _gateway(o):
        return None
    for calls in (o.gateway_calls, t.gateway_calls):
        if calls is not None and calls.sessions is not None:
            return calls.sessions
    return t.sessions_to_rebind


def _note(text: str) -> str:
    return text if len(text) <= DRAIN_NOTE_LIMIT else text[:DRAIN_NOTE_LIMIT - 1] + "…"


def _with_calls(o: obs.Observed, t: st.Transition, now: datetime.datetime, plan: p.Plan) -> p.Plan:
    """`plan` (a wait), with the gateway replicas' last answer recorded in the transition for
    `kubectl baton status` when it differs from what status says: a write only on a change, so a
    drain that polls every half second writes when a count moves, not on every poll."""
    calls = o.gateway_calls
    if calls is None or calls == t.gateway_calls:
        return plan
    status = transitions.stamped(o, now).model_copy(update={"transition": t.model_copy(update={"gateway_calls": calls})})
    return p.Plan((p.WriteStatus(status), *plan.actions), plan.wait_seconds, plan.note)


# Said in history when a retire did not wait for calls in flight: nothing could count them.
NOT_DRAINED = "not drained: no drain probe and no gateway, so calls in flight were not waited for"


def stopping_admission(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """StoppingAdmission: pins first, then take the pod out of the Service and wait for the
    EndpointSlices to drop it; with the gateway, wait until every live gateway replica confirmed
    the seal (it forwards no new call to the pod). Draining next (or Terminating, with neither a
    probe nor the gateway to ask)."""
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return retire_done(o, t, now)
    gate = pin_gate.gate(o, t, now, old)
    if gate is not None:
        return gate
    if old.serving:
        if o.last_error is not None and t.deadline is not None and now >= t.deadline:
            # The label flip keeps failing: the drain budget bounds this step too.
            return _terminate(o, t, now, old, drain_incomplete=True,
                              extra=_drain_incomplete(o, t, "the pod could not be taken out of the Service"))
        gated = pin_gate.applies(t, old) and not t.force_retired
        return p.Plan((p.SetServing(old.name, old.uid, False, pins_of=t.from_ if gated else None),), 0,
                      "stop admission")
    if o.spec.service is not None and o.endpoints_list_retiring_pod:
        if t.deadline is not None and now >= t.deadline:
            return _terminate(o, t, now, old, drain_incomplete=True,
                              extra=_drain_incomplete(o, t, "EndpointSlices still listed the pod"))
        return p.Plan((), transitions.remaining(t.deadline, now), "waiting for EndpointSlices to drop the pod")
    if _gateway(o):
        if not o.gateway_sealed:
            # The seal invariant: this step completes only when no live gateway replica can
            # forward a new call to the pod. Bounded by the drain budget; past it, said and named.
            if t.deadline is not None and now >= t.deadline:
                why = f"gateway replicas did not confirm the seal ({_replicas(o)})"
                return _terminate(o, t, now, old, drain_incomplete=True, message=why, drain_note=_note(why),
                                  extra=_drain_incomplete(o, t, why))
            return _with_calls(o, t, now, p.Plan(
                steady.unreachable_replicas_out(o), min(GATEWAY_POLL_SECONDS, transitions.remaining(t.deadline, now)),
                "waiting for the gateway replicas to confirm the seal"))
        # Sealed: Draining counts the calls still in flight, probe or not.
        return transitions.advance(o, t, now, st.Step.DRAINING, deadline=t.deadline,
                                   gateway_calls=o.gateway_calls or t.gateway_calls)
    if o.spec.drain.probe is None:
        # Nothing to drain (no probe to ask): Draining would end at once, so it is not written.
        quiet = t.trigger in (st.Trigger.POD_LOST, st.Trigger.CONNECT_TIMEOUT)  # it never served, or is gone
        return _terminate(o, t, now, old, drain_note=None if quiet else NOT_DRAINED)
    return transitions.advance(o, t, now, st.Step.DRAINING, deadline=t.deadline)


def draining(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """Draining: wait until the drain probe says idle and, with the gateway, no call is in flight
    on the pod at any live gateway replica (an unreadable count is busy); bounded by
    drainSeconds; then terminate."""
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return retire_done(o, t, now)
    probe = o.spec.drain.probe
    gateway = _gateway(o)
    misconfigured = probe is not None and o.drain_probe_misconfigured
    # A probe the tool has no endpoint for is not a busy tool: it is said, and not waited for.
    probe_idle = probe is None or bool(o.drain_idle) or misconfigured
    calls_done = not gateway or o.gateway_inflight == 0
    if probe is None and not gateway:
        return _terminate(o, t, now, old, drain_note=NOT_DRAINED)  # resumed after the gateway was turned off
    if probe_idle and calls_done:
        if misconfigured:
            msg = create.drain_probe_misconfigured_message(o)
            return _terminate(o, t, now, old, message=msg,
                              drain_note=None if gateway else _note(f"not drained: {msg}"),
                              extra=(p.Event("Warning", st.Reason.DRAIN_PROBE_MISCONFIGURED.value, msg),))
        return _terminate(o, t, now, old)
    if t.deadline is not None and now >= t.deadline:
        parts: list[str] = []
        if not calls_done:
            n = o.gateway_inflight
            parts.append(f"{n} call{'' if n == 1 else 's'} still in flight at the gateway" if n is not None
                         else f"the gateway's in-flight count could not be read ({_replicas(o)})")
        if not probe_idle:
            parts.append("the drain probe did not answer 200"
                         + (f" (last: {o.drain_probe_error})" if o.drain_probe_error else ""))
        why = "; ".join(parts)
        return _terminate(o, t, now, old, drain_incomplete=True, message=why,
                          drain_note=_note(why) if not calls_done else None, extra=_drain_incomplete(o, t, why))
    period = float(probe.period_seconds) if probe is not None and not probe_idle else GATEWAY_POLL_SECONDS
    if gateway:
        period = min(period, GATEWAY_POLL_SECONDS)
    wait = p.Plan(steady.unreachable_replicas_out(o) if gateway else (), min(period, transitions.remaining(t.deadline, now)),
                  "draining")
    return _with_calls(o, t, now, wait) if gateway else wait


def _terminate(o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo, *,
               extra: tuple[p.Action, ...] = (), drain_incomplete: bool = False, message: str | None = None,
               drain_note: str | None = None) -> p.Plan:
    """Advance to Terminating and delete the old pod in the same plan: the executor sends the
    delete only after the Terminating step is persisted (it stops at the first failure), which
    is all the guarantee asks; one pass fewer on every handoff's critical path. `drain_note`
    (calls cut, or not waited for) goes into the generation's history entry. The gateway's
    counts are cleared: nobody asks again after the drain, so they would only grow stale; their
    session count is kept for the history entry."""
    grace = o.spec.budgets.termination_grace_seconds
    drained = t.model_copy(update={
        "drain_incomplete": drain_incomplete, "gateway_calls": None, "sessions_to_rebind": _sessions(o, t),
        "message": t.message if message is None else message,
        "drain_note": t.drain_note if drain_note is None else drain_note})
    if hooks.pre_retire_due(o, t):
        # The drain ended: spec.hooks.preRetire runs before the delete (its run persisted first).
        return hooks.start_pre_retire(o, t, drained, now, extra=extra)
    return transitions.advance(o, t, now, st.Step.TERMINATING, deadline=now + transitions.seconds(o.spec.budgets.cleanup_seconds),
                    extra=(*extra, p.DeletePod(old.name, old.uid, grace)), drain_incomplete=drained.drain_incomplete,
                    gateway_calls=None, sessions_to_rebind=drained.sessions_to_rebind, message=drained.message,
                    drain_note=drained.drain_note)


def _after_hook(o: obs.Observed, t: st.Transition, now: datetime.datetime, said: tuple[p.Action, ...]) -> p.Plan:
    """The preRetire hook ended (its end in `t`): the delete, persisted with it (Terminating)."""
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        done = retire_done(o, t, now)
        return dataclasses.replace(done, actions=(*done.actions, *said))
    return transitions.advance(o, t, now, st.Step.TERMINATING, deadline=now + transitions.seconds(o.spec.budgets.cleanup_seconds),
                               extra=(*said, p.DeletePod(old.name, old.uid, o.spec.budgets.termination_grace_seconds)))


def pre_retire_hook(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """Step PreRetireHook (baton.lifecycle.hooks): then the delete."""
    return hooks.pre_retire(o, t, now, then=_after_hook)


def hook_failed(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """CleanupFailed held by a failed preRetire hook (baton.lifecycle.hooks): then the delete."""
    return hooks.held_pre_retire(o, t, now, then=_after_hook)


def _outcome(o: obs.Observed, t: st.Transition, *, retired_current: bool) -> st.Outcome:
    """How the retired generation's history entry ends."""
    if t.forced:
        return st.Outcome.FORCE_RECOVERED
    if o.deleting or t.kind == st.TransitionKind.DELETE:
        return st.Outcome.DELETED
    if t.trigger == st.Trigger.RESET and not retired_current:
        # A reset names the serving generation. Another pod retired on the way (a late create,
        # a pod found holding the name) was not reset.
        return st.Outcome.RETIRED
    outcomes: dict[st.Trigger | str, st.Outcome] = {
        st.Trigger.RESET: st.Outcome.RESET,
        st.Trigger.POD_LOST: st.Outcome.LOST,
        st.Trigger.CONNECT_TIMEOUT: st.Outcome.CONNECT_TIMEOUT,
        st.Trigger.SUSPENDED: st.Outcome.SUSPENDED,
        st.Trigger.IDLE: st.Outcome.IDLED,
    }
    return outcomes.get(t.trigger, st.Outcome.RETIRED)


def orphaned(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """A deletion whose retiring pod lost its ownerReference (`kubectl delete --cascade=orphan`,
    or a person removing it): the pod is no longer Baton's to retire, and whoever disowned it
    meant it to stay. Record it as Orphaned and finish the deletion; never wait for it."""
    return retire_done(o, t, now, orphaned_pod=True)


def retire_done(o: obs.Observed, t: st.Transition, now: datetime.datetime, cleanup: conditions.Cond | None = None,
                 *, orphaned_pod: bool = False) -> p.Plan:
    """The old pod is confirmed gone (or abandoned by a recorded force recovery, or disowned in
    a deletion): record it."""
    status = transitions.stamped(o, now)
    current = status.current
    # Only the pod with that UID ends `current`: a stray may carry the same generation label.
    retired_current = current is not None and current.uid == t.from_uid
    outcome = st.Outcome.ORPHANED if orphaned_pod else _outcome(o, t, retired_current=retired_current)
    entry = st.HistoryEntry(
        generation=t.from_ or 0,
        pod=t.from_pod,
        uid=t.from_uid,
        template_hash=current.template_hash if current and retired_current else None,
        started_at=t.from_started_at,
        retired_at=now,
        outcome=outcome,
        message="; ".join(m for m in (
            t.force_retired,
            (f"drain incomplete: {t.drain_note}" if t.drain_note else "drain incomplete") if t.drain_incomplete
            else t.drain_note,
            f"pod {t.from_pod} left in place: its ownerReference was removed" if orphaned_pod else None) if m) or None,
        sessions_to_rebind=_sessions(o, t),
        hooks=((current.hooks if current and retired_current else ()) + t.hooks)[-st.HOOK_RECORDS_LIMIT:],
    )
    history = status.history
    if t.from_:
        history = (history + (entry,))[-transitions.HISTORY_LIMIT:]
    if retired_current:
        current = None
    status = status.model_copy(update={"history": history, "current": current})
    actions: list[p.Action] = [
        transitions.step_timing(t, now),
        p.Record(p.Metric.HANDOFFS, (("outcome", outcome.value),)),
    ]
    extra_conds: list[conditions.Cond] = [cleanup] if cleanup else []
    kinds = st.TransitionKind
    if o.deleting or t.kind == kinds.DELETE:
        new_t = t.model_copy(update={"kind": kinds.DELETE, "step": st.Step.FINALIZING, "step_started_at": now, "deadline": None,
                                     "gateway_calls": None, "sessions_to_rebind": None})
        status = conditions.step_conditions(status.model_copy(update={"transition": new_t}), o, now, new_t)
    elif t.kind == kinds.HANDOFF and not o.spec.suspend:
        to = t.to or transitions.next_generation(o)
        new_t = t.model_copy(update={"to": to, "step": st.Step.CREATING, "step_started_at": now, "deadline": None,
                                     "gateway_calls": None, "sessions_to_rebind": None, "hook": None, "hooks": ()})
        status = status.model_copy(update={"latest_generation": max(status.latest_generation, to)})
        status = conditions.step_conditions(status.model_copy(update={"transition": new_t}), o, now, new_t)
    else:
        retry = status.retry
        if t.trigger == st.Trigger.CONNECT_TIMEOUT and retry is not None:
            wait = transitions.backoff_seconds(retry.attempt, o.backoff_base_seconds)
            retry = retry.model_copy(update={"not_before": now + transitions.seconds(wait)})
        status = status.model_copy(update={"transition": None, "retry": retry})
        status, said = dormancy.idled(o, t, now, status)
        actions += said
        why = (st.Reason.SUSPENDED if o.spec.suspend else st.Reason.IDLE if said
               else st.Reason.BACKING_OFF if retry else st.Reason.NO_GENERATION)
        current_pod = o.pod_by_uid(current.uid) if current else None
        extra_conds += [
            (st.ConditionType.PROGRESSING, False, st.Reason.IDLE, ""),
            # A stray was retired beside a serving generation: that one is still Ready.
            (st.ConditionType.READY, True, st.Reason.GENERATION_READY, f"generation {current.generation} serves ({current.pod})")
            if current and current_pod and current_pod.ready and not o.spec.suspend
            else (st.ConditionType.READY, False, why, f"generation {t.from_} retired ({outcome.value}); none serving"
                  + ("" if not said else " until a wake")),
        ]
        if o.spec.suspend:
            extra_conds.append((st.ConditionType.SUSPENDED, True, st.Reason.SUSPENDED, "spec.suspend is true: no generation runs"))
    status = conditions.with_conditions(status, o, now, *extra_conds)
    if status.transition is not None and status.transition.step == st.Step.CREATING and o.last_error is None:
        # The create the next pass would send at once, sent once Creating is persisted (the
        # old pod is confirmed gone by this pass's reads): one pass fewer on the critical path.
        then = create.creating(o.model_copy(update={"status": status}), status.transition, now)
        if then.kinds() == ["CreatePod"]:
            actions += then.actions
    return p.Plan((p.WriteStatus(status), *actions), 0, f"g{t.from_} confirmed gone ({outcome.value})")
