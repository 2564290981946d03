"""Idle and wake (spec.idle; issue 43): when the serving generation goes idle, when an idle
runtime wakes, and what each records. Pure and clock-injected: waits are returned as data.

Idle is a RETIRE (trigger Idle) through the normal fenced path whose end sets status.idle.since
and starts nothing; a wake is a CREATE (trigger Wake) whose Creating and Connecting together are
bounded by spec.idle.wakeSeconds. A missed wake is retired as a connect timeout (status.retry backs
the next wake off) and the runtime stays idle: at most one pod, whatever the demand.
"""

from __future__ import annotations

import datetime

from baton.lifecycle import pins as pn
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st

# While calls are in flight or held, activity is looked at again at most this long after: the
# gateway counts idleSeconds from the last call that counts, so a long call may end past it.
BUSY_RECHECK_SECONDS = 30.0
# The shortest wait before idle is due again (the replicas' clocks are read at the ask, not now).
MIN_RECHECK_SECONDS = 1.0


def configured(o: obs.Observed) -> spec_model.Idle | None:
    """spec.idle when it applies: set, with the gateway (which counts and holds the calls; the CRD
    refuses it otherwise), and not suspended."""
    idle = o.spec.idle
    if idle is None or o.spec.suspend or o.spec.service is None or not o.spec.service.gateway:
        return None
    return idle


def idle_since(status: st.ToolRuntimeStatus) -> datetime.datetime | None:
    return status.idle.since if status.idle is not None else None


def keep_awake(o: obs.Observed) -> bool:
    return o.annotations.get(names.ANN_KEEP_AWAKE, "").strip().lower() == "true"


def _kept_awake(o: obs.Observed, current: st.Current, current_pod: obs.PodInfo | None) -> bool:
    """Something other than calls keeps the serving generation: the annotation, a claim pinning it
    (or claims not readable: fail closed), a pod not serving Ready, or a change or reset waiting."""
    if keep_awake(o) or current_pod is None or not (current_pod.ready and current_pod.serving) or current_pod.deleting:
        return True
    if pn.pins(claims=o.claims, runtime=o.name, generation=current.generation, known=o.claims_known).pinned:
        return True
    return o.status.pending is not None or o.status.pending_reset is not None or names.ANN_RESET in o.annotations


def go_idle(
    o: obs.Observed, now: datetime.datetime, current_pod: obs.PodInfo | None
) -> transitions.Start | transitions.Wait | transitions.Nothing:
    """Between transitions, the serving generation as desired: RETIRE it (trigger Idle) once no
    call that counts came for afterSeconds (since it became Ready, too) and none is in flight or
    held; else the seconds until that could be so. Nothing when it cannot go idle; when the
    activity is unknown (a replica could not be read: never idled on a guess), a wait to ask again."""
    idle, current, activity = configured(o), o.status.current, o.activity
    if idle is None or current is None or _kept_awake(o, current, current_pod):
        return transitions.Nothing()
    if activity is None:
        # Unknown: not idled on a guess, but asked again. A replica that died lapses and is then
        # counted gone; nothing of its own (its Lease no longer changes) brings the runtime back.
        return transitions.Wait(min(float(idle.after_seconds), BUSY_RECHECK_SECONDS))
    if activity.inflight > 0 or activity.held > 0:
        return transitions.Wait(min(float(idle.after_seconds), BUSY_RECHECK_SECONDS))
    quiet = activity.idle_seconds
    if current.ready_since is not None:
        quiet = min(quiet, (now - current.ready_since).total_seconds())
    left = idle.after_seconds - quiet
    if left > 0:
        return transitions.Wait(max(left, MIN_RECHECK_SECONDS))
    return transitions.Start(transitions.retiring(
        o, now, kind=st.TransitionKind.RETIRE, trigger=st.Trigger.IDLE, pod=current_pod,
        generation=current.generation, uid=current.uid))


def _parse_time(value: str | None) -> datetime.datetime | None:
    """An RFC 3339 time (kubectl baton wake writes one); None when absent or unreadable."""
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.timezone.utc)


def demanded_by(o: obs.Observed, idle: spec_model.Idle, since: datetime.datetime) -> str | None:
    """Who demands a wake now: the annotation newer than the idle's start (a person, whatever
    wakeOnRequest), else a gateway replica holding calls (with wakeOnRequest); None: nobody."""
    raw = o.annotations.get(names.ANN_WAKE)
    asked = _parse_time(raw)
    if asked is not None and asked > since:
        return f"annotation {names.ANN_WAKE}={raw}"
    if o.wake_demand is not None and idle.wake_on_request:
        return o.wake_demand
    return None


def wake(o: obs.Observed, now: datetime.datetime) -> transitions.Start | transitions.Wait | transitions.Nothing | None:
    """Nothing serves and the runtime is idle: CREATE (trigger Wake) when a wake is demanded and
    no back-off runs; the back-off's seconds when one does; Nothing without a demand. None when
    the runtime is not idle (or spec.idle no longer applies): it starts as any other."""
    idle, since = configured(o), idle_since(o.status)
    if idle is None or since is None:
        return None
    who = demanded_by(o, idle, since)
    if who is None:
        return transitions.Nothing()
    retry = o.status.retry
    if retry is not None and retry.not_before is not None and now < retry.not_before:
        return transitions.Wait(transitions.remaining(retry.not_before, now))
    return transitions.Start(st.Transition(
        kind=st.TransitionKind.CREATE, trigger=st.Trigger.WAKE, to=transitions.next_generation(o),
        step=st.Step.CREATING, started_at=now, step_started_at=now, message=f"wake asked by {who}"))


def is_wake(o: obs.Observed, t: st.Transition) -> bool:
    """`t` starts a wake that spec.idle still bounds."""
    return t.trigger == st.Trigger.WAKE and o.spec.idle is not None


def start_deadline(o: obs.Observed, t: st.Transition) -> datetime.datetime | None:
    """A wake's Creating and Connecting end together wakeSeconds after it began (not the
    connectSeconds of each); None for any other start."""
    if not is_wake(o, t) or o.spec.idle is None:
        return None
    return t.started_at + transitions.seconds(o.spec.idle.wake_seconds)


def began(o: obs.Observed, t: st.Transition, now: datetime.datetime,
          status: st.ToolRuntimeStatus) -> tuple[st.ToolRuntimeStatus, tuple[p.Action, ...]]:
    """As `t` begins: a wake records lastWake (under way) and says so; any other start of an
    idle runtime (spec.idle removed) ends the idle."""
    idle = status.idle
    if t.trigger == st.Trigger.WAKE:
        last = st.LastWake(requested_at=now, message=t.message)
        status = status.model_copy(update={"idle": (idle or st.IdleStatus()).model_copy(update={"last_wake": last})})
        return status, (p.Event("Normal", st.Reason.WAKING.value, f"waking: generation {t.to} starts ({t.message})"),)
    if t.kind == st.TransitionKind.CREATE and idle is not None and idle.since is not None:
        return status.model_copy(update={"idle": idle.model_copy(update={"since": None})}), ()
    return status, ()


def idled(o: obs.Observed, t: st.Transition, now: datetime.datetime,
          status: st.ToolRuntimeStatus) -> tuple[st.ToolRuntimeStatus, tuple[p.Action, ...]]:
    """The end of an Idle retire: status.idle.since, and the Idle event. Not when spec.idle was
    removed (or suspend set) meanwhile: then the runtime is not idle, it starts or stays suspended."""
    idle = configured(o)
    if t.trigger != st.Trigger.IDLE or idle is None:
        return status, ()
    since = st.IdleStatus(since=now, last_wake=status.idle.last_wake if status.idle else None)
    msg = (f"generation {t.from_} retired after {idle.after_seconds}s without a call (spec.idle.afterSeconds); "
           "none runs until a wake")
    return status.model_copy(update={"idle": since}), (p.Event("Normal", st.Reason.IDLE.value, msg),)


def woken(o: obs.Observed, t: st.Transition, now: datetime.datetime,
          status: st.ToolRuntimeStatus) -> tuple[st.ToolRuntimeStatus, tuple[p.Action, ...]]:
    """A generation became Ready: the idle (if any) ends; a wake's lastWake says when and how fast."""
    idle = status.idle
    if idle is None or (idle.since is None and t.trigger != st.Trigger.WAKE):
        return status, ()
    last = idle.last_wake
    if t.trigger != st.Trigger.WAKE or last is None or last.outcome is not None:
        return status.model_copy(update={"idle": idle.model_copy(update={"since": None})}), ()
    took = max(0.0, (now - last.requested_at).total_seconds())
    last = last.model_copy(update={"ready_at": now, "seconds": round(took, 3), "outcome": st.WakeOutcome.WOKEN})
    status = status.model_copy(update={"idle": idle.model_copy(update={"since": None, "last_wake": last})})
    return status, (
        p.Event("Normal", st.Reason.WOKEN.value, f"generation {t.to} woke in {took:.1f}s ({last.message})"),
        p.Record(p.Metric.WAKES, (("outcome", st.WakeOutcome.WOKEN.value),)),
        p.Record(p.Metric.WAKE_SECONDS, (), took),
    )


def wake_failed(o: obs.Observed, t: st.Transition, now: datetime.datetime, status: st.ToolRuntimeStatus,
                message: str) -> tuple[st.ToolRuntimeStatus, tuple[p.Action, ...]]:
    """A wake missed wakeSeconds (or its pod was refused past it): lastWake Failed with the cause,
    said and counted. The runtime stays idle (status.idle.since kept)."""
    idle = status.idle or st.IdleStatus()
    last = idle.last_wake or st.LastWake(requested_at=t.started_at)
    took = max(0.0, (now - last.requested_at).total_seconds())
    last = last.model_copy(update={"seconds": round(took, 3), "outcome": st.WakeOutcome.FAILED, "message": message})
    status = status.model_copy(update={"idle": idle.model_copy(update={"last_wake": last})})
    return status, (p.Event("Warning", st.Reason.WAKE_FAILED.value, message),
                    p.Record(p.Metric.WAKES, (("outcome", st.WakeOutcome.FAILED.value),)))


def steady(o: obs.Observed, status: st.ToolRuntimeStatus) -> st.ToolRuntimeStatus:
    """Between transitions: a runtime suspended (or whose spec.idle was removed) while idle is not
    idle any more (the gateway then refuses its calls as suspended, or a start follows)."""
    if idle_since(status) is None or configured(o) is not None or status.idle is None:
        return status
    return status.model_copy(update={"idle": status.idle.model_copy(update={"since": None})})
