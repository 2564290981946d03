"""Between transitions: which transition is due, starting it, and the steady path otherwise."""

from __future__ import annotations

import datetime

from baton.lifecycle import conditions
from baton.lifecycle import dormancy
from baton.lifecycle import lease
from baton.lifecycle import pin_gate
from baton.lifecycle import pins as pn
from baton.lifecycle import plan as p
from baton.lifecycle import policy
from baton.lifecycle import retire
from baton.lifecycle import steady
from baton.lifecycle import transitions
from baton.lifecycle import verbs
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st


def idle(o: obs.Observed, now: datetime.datetime) -> p.Plan:
    """Nothing in flight: refuse stale verbs, begin the transition due (if the handoff policy lets
    it), else keep status, the Service and claim phases as they should be."""
    status = o.status
    current = status.current
    current_pod = o.pod_by_uid(current.uid) if current else None

    stale = verbs.stale_verbs(o, current_pod)
    if stale:
        return p.Plan(stale, 0, "stale verb refused")

    wait: float | None = None  # seconds until a back-off or the handoff policy's hold ends
    match _intent(o, now, current_pod):
        case transitions.Start(transition=due):
            if o.shutting_down:
                return _stand_down(o, now, "shutting down: no new transition")
            match policy.handoff_gate(o, now, due):
                case transitions.Act(plan=first):
                    return first
                case transitions.Start(transition=go):
                    return lease.with_lease(o, now, lambda: _begin(o, now, go))
                case policy.PolicyHold(wait=held):
                    wait = held  # held back by the handoff policy: the steady path below, then wait
        case transitions.Wait(seconds=backoff):
            wait = backoff
        case transitions.Nothing():
            pass

    service_actions = steady.service_actions(o)
    desired = steady.steady_status(o, now, current_pod)
    if steady.foreign_name_holders(o) or steady.foreign_claimants(o):
        # Such objects may carry none of our labels: no watch event says when they go.
        wait = transitions.FOREIGN_POLL_SECONDS if wait is None else min(wait, transitions.FOREIGN_POLL_SECONDS)
    if desired != status and not o.shutting_down:
        # Written under the Lease, so stamped with this holder's token (the API server's fence).
        stamped = desired.model_copy(update={"fencing_token": transitions.stamped(o, now).fencing_token, "holder": o.identity,
                                             "pending_reset": None})
        warnings = steady.new_warnings(status, stamped)
        # The warnings before the Service write: a refused Service stops the plan, and its
        # ServiceError must still be said.
        return lease.with_lease(o, now, lambda: p.Plan((p.WriteStatus(stamped), *warnings, *service_actions), 0,
                                                  "steady status"))
    claim_phases = steady.claim_phases(o, now)
    if claim_phases and not o.shutting_down:
        # Said once: the claims' own watch events wake the runtime again; a write that failed is
        # retried on the next wake-up, never in a loop. The Lease goes back at once.
        return lease.with_lease(o, now, lambda: p.Plan((*service_actions, *claim_phases, p.ReleaseLease()), wait,
                                                  "claim phases"))
    if o.lease.holder == o.identity:
        return p.Plan((*service_actions, p.ReleaseLease()), wait, "idle: release Lease")
    return p.Plan(service_actions, wait, "idle")


def _stand_down(o: obs.Observed, now: datetime.datetime, note: str) -> p.Plan:
    """Begin nothing; hand the Lease back if it names us."""
    if o.lease.holder == o.identity:
        return p.Plan((p.ReleaseLease(),), None, note)
    return p.Plan((), None, note)


def _intent(
    o: obs.Observed, now: datetime.datetime, current_pod: obs.PodInfo | None
) -> transitions.Start | transitions.Wait | transitions.Nothing:
    """The transition due now (Start), or seconds until one may start (Wait), or Nothing."""
    status, current = o.status, o.status.current
    kinds = st.TransitionKind
    trig = st.Trigger
    owned = o.owned_pods()
    if o.deleting:
        victim = current_pod if current_pod is not None and current_pod.owned else (owned[0] if owned else None)
        if victim is not None:
            return transitions.Start(transitions.retiring(o, now, kind=kinds.DELETE, trigger=trig.DELETED, pod=victim,
                             generation=victim.generation, uid=victim.uid))
        return transitions.Start(st.Transition(kind=kinds.DELETE, trigger=trig.DELETED, step=st.Step.FINALIZING,
                             started_at=now, step_started_at=now))
    if current_pod is not None and not current_pod.owned:
        return transitions.Nothing()  # the serving pod was disowned: never touched; Degraded NameConflict says so
    strays = [pod for pod in owned if current_pod is None or pod.uid != current_pod.uid]
    if strays:
        stray = strays[0]
        return transitions.Start(transitions.retiring(o, now, kind=kinds.RETIRE, trigger=trig.ORPHAN, pod=stray,
                         generation=stray.generation, uid=stray.uid))
    if o.spec.suspend:
        if current_pod is not None and current is not None:
            return transitions.Start(transitions.retiring(o, now, kind=kinds.RETIRE, trigger=trig.SUSPENDED, pod=current_pod,
                             generation=current.generation, uid=current.uid))
        return transitions.Nothing()
    if steady.foreign_claimants(o) or o.spec_error is not None:
        return transitions.Nothing()  # nothing new while a foreign pod claims the runtime, or the spec is unreadable
    nxt = transitions.next_generation(o)
    if current is not None:
        lost = current_pod is None or current_pod.phase in ("Failed", "Succeeded") or current_pod.deleting
        if lost:
            handoff = transitions.retiring(o, now, kind=kinds.HANDOFF, trigger=trig.POD_LOST, pod=current_pod,
                                           generation=current.generation, uid=current.uid, to=nxt,
                                           started_at=current.started_at)
            if current_pod is not None and current_pod.terminated:
                # Why it ended (a stdio child's exit status and last stderr lines): the
                # conditions and the PodLost event quote it.
                handoff = handoff.model_copy(update={"message": current_pod.terminated})
            return transitions.Start(handoff)
        if o.annotations.get(names.ANN_RESET, "").strip() == str(current.generation):
            return transitions.Start(transitions.retiring(o, now, kind=kinds.HANDOFF, trigger=trig.RESET, pod=current_pod,
                             generation=current.generation, uid=current.uid, to=nxt))
        if current.template_hash != o.desired_hash:
            if o.missing_config_refs:
                return transitions.Nothing()  # keep serving the old one; Degraded says why
            return transitions.Start(transitions.retiring(o, now, kind=kinds.HANDOFF, trigger=trig.TEMPLATE_CHANGED, pod=current_pod,
                             generation=current.generation, uid=current.uid, to=nxt))
        return dormancy.go_idle(o, now, current_pod)
    # Nothing serves: start a generation, unless backing off, the config is incomplete, or a
    # foreign pod holds the name (a foreign Service only goes unmanaged: Degraded says so).
    if o.missing_config_refs or steady.foreign_blocking_create(o):
        return transitions.Nothing()
    woke = dormancy.wake(o, now)
    if woke is not None:
        return woke  # idle: only a demanded wake starts a generation
    if status.retry and status.retry.not_before and now < status.retry.not_before:
        return transitions.Wait(transitions.remaining(status.retry.not_before, now))
    trigger = trig.RETRY if status.retry else (trig.RESUMED if status.history else trig.INITIAL)
    return transitions.Start(st.Transition(kind=kinds.CREATE, trigger=trigger, to=nxt, step=st.Step.CREATING,
                         started_at=now, step_started_at=now))


def _stop_admission_now(o: obs.Observed, t: st.Transition, now: datetime.datetime,
                        old: obs.PodInfo | None) -> tuple[p.Action, ...]:
    """The label flip the next pass would make at once (StoppingAdmission, nothing pins the
    generation, no verb to answer first), sent in the plan that persists the step: a handoff's
    critical path is one pass shorter. `o` carries the status being written."""
    if old is None or t.step != st.Step.STOPPING_ADMISSION or t.pin_wait_since is not None:
        return ()
    then = retire.stopping_admission(o, t, now)
    flips = [a for a in then.actions if isinstance(a, p.SetServing) and a.uid == old.uid and not a.serving]
    return then.actions if then.actions == tuple(flips) and len(flips) == 1 else ()


def _begin(o: obs.Observed, now: datetime.datetime, t: st.Transition) -> p.Plan:
    """Persist the transition `t` (with status under this holder) and say so; a pinned retire
    is recorded waiting for its pins, an unpinned one sends its first label flip at once."""
    status = transitions.stamped(o, now)
    degraded = status.condition(st.ConditionType.DEGRADED)
    changes: list[conditions.Cond] = []
    if degraded and degraded.reason in (st.Reason.LOCK_TIMEOUT.value, st.Reason.LEASE_OUTSIDE_VIEW.value):
        changes.append((st.ConditionType.DEGRADED, False, st.Reason.HEALTHY, "lifecycle Lease acquired"))
    elif degraded and degraded.status == "True" and (
            (degraded.reason == st.Reason.CONFIG_REF_MISSING.value and not o.missing_config_refs)
            or (degraded.reason == st.Reason.INVALID_SPEC.value and o.spec_error is None)):
        # What held the start is gone: Degraded (and Ready, which carried it) say so as it begins.
        changes.append((st.ConditionType.DEGRADED, False, st.Reason.HEALTHY, "referenced config present, spec readable"))
    latest = max(status.latest_generation, t.to or 0)
    update: dict[str, object] = {"transition": t, "latest_generation": latest}
    if t.trigger != st.Trigger.ORPHAN and (status.pending is not None or conditions.condition_true(status, st.ConditionType.UPDATE_PENDING)):
        # Any transition of the serving generation takes the held-back change up.
        update["pending"] = None
        changes.append((st.ConditionType.UPDATE_PENDING, False, st.Reason.UP_TO_DATE, f"taken up by {st.text(t.kind)} {st.arrow(t)} ({st.text(t.trigger)})"))
    if t.trigger == st.Trigger.RESET:
        update["pending_reset"] = None
    old = o.pod_by_uid(t.from_uid) if t.from_uid else None
    pins = pin_gate.pins_of(o, t) if old is not None and pin_gate.applies(t, old) else pn.Pins()
    pin_events: list[p.Action] = []
    if pins.pinned:
        # Pinned: the transition is recorded, but admission is not stopped; N keeps serving.
        msg = pin_gate.wait_message(o, t, pins, now)
        t = t.model_copy(update={"pin_wait_since": now, "message": msg})
        update["transition"] = t
        status = status.model_copy(update=update)
        status = conditions.with_conditions(conditions.initial_conditions(status, o, now), o, now, *changes,
                                  (st.ConditionType.PROGRESSING, True, st.Reason.AWAITING_PIN_RELEASE, msg))
        pin_events.append(p.Event("Normal", st.Reason.AWAITING_PIN_RELEASE.value, msg))
    else:
        status = status.model_copy(update=update)
        status = conditions.with_conditions(conditions.step_conditions(status, o, now, t), o, now, *changes)
    status, woke = dormancy.began(o, t, now, status)
    pin_events.extend(woke)
    # Events and metrics record what WriteStatus persisted, so they come right after it: they are
    # queued, never fail, and an API call failing later in the plan cannot lose them (the next
    # pass finds the transition begun and does not begin it again).
    actions: list[p.Action] = [
        p.WriteStatus(status),
        *pin_events,
        p.Event("Normal", st.Reason.TRANSITION_STARTED.value,
                f"{st.text(t.kind)} {st.arrow(t)} ({st.text(t.trigger)}) by {o.identity}, fencing token {status.fencing_token}"),
        p.Record(p.Metric.TRANSITIONS, (("kind", st.text(t.kind)),)),
    ]
    if t.trigger == st.Trigger.POD_LOST:
        actions.append(p.Event("Warning", st.Reason.POD_LOST.value,
                               f"pod {t.from_pod} of generation {t.from_} is gone or failed; handing off to g{t.to}"
                               + (f"; {t.message}" if t.message else "")))
    if t.trigger == st.Trigger.ORPHAN:
        actions += [p.Event("Warning", st.Reason.MULTIPLE_PODS.value,
                            f"pod {t.from_pod} (uid {t.from_uid}) is not the current generation's: retiring it "
                            "before anything else"),
                    p.Record(p.Metric.NAME_CONFLICTS, (("kind", st.Reason.MULTIPLE_PODS.value),))]
    actions += [
        *_stop_admission_now(o.model_copy(update={"status": status}), t, now, old),
        # The Service exists before the first generation is Ready (it selects nothing until then).
        *steady.service_actions(o),
    ]
    if t.trigger == st.Trigger.RESET:
        actions.append(p.RemoveAnnotation(names.ANN_RESET, o.annotations.get(names.ANN_RESET, "")))
    return p.Plan(tuple(actions), 0, f"begin {st.text(t.kind)} {st.arrow(t)}")
