"""decide(observed, now) -> Plan: every lifecycle decision, pure and clock-injected.

One call returns the next thing to do for one runtime. The executor carries it out and calls
decide() again on a fresh observation; waiting is returned as data (Plan.wait_seconds), never
slept here. Each new step is persisted in status.transition (a WriteStatus) before the pass
that acts on it, so whoever holds the Lease next resumes exactly there.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
from typing import Callable

from baton.lifecycle import conditions as cond
from baton.lifecycle import manifests as mf
from baton.lifecycle import pins as pn
from baton.lifecycle import plan as p
from baton.model import claims as claims_model
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st

S = st.Step
R = st.Reason
C = st.ConditionType

MAX_BACKOFF_SECONDS = 300.0
HISTORY_LIMIT = 10
# Wake a little after a foreign Lease should have expired, so takeover is prompt.
LEASE_EXPIRY_SLACK = 0.2
# How often a runtime blocked by an object it does not own (a foreign pod holding its name)
# looks again: such objects may carry none of Baton's labels, so no watch event says they went.
FOREIGN_POLL_SECONDS = 5.0
# Back-off of a step the API server refused (pod creation): base, cap, and jitter of ±20 %.
REFUSAL_BACKOFF_BASE_SECONDS = 1.0
REFUSAL_BACKOFF_CAP_SECONDS = 60.0


def _v(value: enum.Enum | str) -> str:
    """The wire text of a known enum member or of a value this version does not know."""
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def decide(observed: obs.Observed, now: datetime.datetime) -> p.Plan:
    o = observed
    if not o.deleting and mf.FINALIZER not in o.finalizers:
        return p.Plan((p.AddFinalizer(),), 0, "add finalizer")
    if o.deleting and mf.FINALIZER not in o.finalizers:
        return p.Plan((), None, "being deleted; nothing of ours is left")
    t = o.status.transition
    if t is None:
        return _idle(o, now)
    reset_wait = _pending_reset(o, t, now)
    if isinstance(reset_wait, p.Plan):
        return reset_wait
    plan = _in_flight(o, t, now)
    if reset_wait is not None and (plan.wait_seconds is None or plan.wait_seconds > reset_wait):
        plan = dataclasses.replace(plan, wait_seconds=reset_wait)
    return plan


def _pending_reset(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan | float | None:
    """A reset that arrives mid-transition waits for it, bounded by lockSeconds.

    When it is first seen, the holder persists it with the time (status.pendingReset), so the
    bound holds across replicas and restarts. Within the bound: seconds left (it is re-checked
    against the then-current generation once the transition ends). Past it: refused as stale,
    touching nothing.
    """
    value = o.annotations.get(mf.ANN_RESET)
    if value is None:
        return None
    pending = o.status.pending_reset
    if pending is None or pending.value != value:
        if o.shutting_down and not _held_by_me(o):
            return None
        recorded = _base(o, now).model_copy(update={"pending_reset": st.PendingReset(value=value, since=now)})
        return _with_lease(o, now, lambda: p.Plan((p.WriteStatus(recorded),), 0, "reset seen mid-transition: recorded"))
    budget = float(o.spec.budgets.lock_seconds)
    waited = (now - pending.since).total_seconds()
    if waited < budget:
        return budget - waited + 0.05
    return p.Plan(
        (
            p.RemoveAnnotation(mf.ANN_RESET, value, consumes=True),
            p.Event("Warning", R.STALE_RESET.value,
                    f"reset names generation {value}, but {_v(t.kind)} {_arrow(t)} was still under way after "
                    f"lockSeconds={o.spec.budgets.lock_seconds}: nothing touched"),
            p.Record(p.Metric.STALE_VERBS, (("verb", "reset"),)),
        ),
        0,
        "reset waited past lockSeconds",
    )


def _in_flight(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    parked = _parked(o, t, now)
    if parked is not None:
        note, wait = parked
        if _held_by_me(o):
            return p.Plan((p.ReleaseLease(),), wait, f"{note}; Lease released")
        return p.Plan((), wait, note)
    if o.shutting_down and not _held_by_me(o):
        # Do not take the Lease (a new token, a status write) only to hand it back.
        return p.Plan((), None, "shutting down: the transition is left to the next holder")
    return _with_lease(o, now, lambda: _step(o, t, now))


# --- the Lease ------------------------------------------------------------------------------


def _held_by_me(o: obs.Observed) -> bool:
    # lease_held_here is the executor's own judgement: renewed in time by the local monotonic
    # clock, with a safety margin. Timestamps in the Lease are never compared with our clock.
    return o.lease.holder == o.identity and o.lease_held_here


def _with_lease(o: obs.Observed, now: datetime.datetime, then: Callable[[], p.Plan]) -> p.Plan:
    lease, status = o.lease, o.status
    if _held_by_me(o):
        if status.fencing_token > lease.token:
            # Status carries a token above the Lease we hold. Either our view of the Lease is
            # stale (another took it and wrote status: the compare-and-swap below fails and we
            # stand back), or the Lease was deleted and created again below a token its holder
            # had written (a person deleted it between that holder's acquire and our create):
            # take our own Lease up past the status first, never act on the lower token. Waiting
            # instead would hold that Lease, renewed, and do nothing, for good.
            token = status.fencing_token + 1
            return p.Plan((p.AcquireLease(token=token),), 0, f"fenced out: take the Lease up to token {token}")
        if status.fencing_token < lease.token and status.transition is not None:
            # Resuming someone's transition: write our token before any step is acted on.
            resumed = _base(o, now)
            return p.Plan(
                (
                    p.WriteStatus(resumed),
                    p.Event(
                        "Normal",
                        R.LEASE_ACQUIRED.value,
                        f"{o.identity} holds the lifecycle Lease (fencing token {lease.token}); "
                        f"resuming {_v(status.transition.kind)} at step {_v(status.transition.step)}",
                    ),
                ),
                0,
                "write fencing token before resuming",
            )
        return then()
    if lease.free() or lease.holder == o.identity:
        # Free, expired, or naming this identity without this process holding it (a restart
        # under the same name): take it with a new token, so older writes stay fenced.
        token = max(lease.token, status.fencing_token) + 1
        return p.Plan((p.AcquireLease(token=token),), 0, f"acquire Lease (token {token})")
    # Held by another process that is still renewing.
    wait = LEASE_EXPIRY_SLACK + lease.seconds_until_free()
    since = o.lock_wait_since or now
    waited = (now - since).total_seconds()
    budget = o.spec.budgets.lock_seconds
    actions: list[p.Action] = []
    if status.transition is None:
        # Nobody visibly works on this runtime, yet the Lease is held: that is a lock timeout.
        degraded = status.condition(C.DEGRADED)
        if waited >= budget and not (degraded and degraded.reason == R.LOCK_TIMEOUT.value):
            new = _with_conditions(
                status,
                o,
                now,
                (C.DEGRADED, True, R.LOCK_TIMEOUT, f"lifecycle Lease held by {lease.holder} for more than lockSeconds={budget}; retrying"),
            )
            actions += [
                p.WriteStatus(new),
                p.Event("Warning", R.LOCK_TIMEOUT.value, f"waited {waited:.0f}s for the lifecycle Lease held by {lease.holder}"),
                p.Record(p.Metric.LOCK_TIMEOUTS),
            ]
        elif waited < budget:
            wait = min(wait, budget - waited + 0.05)
    return p.Plan(tuple(actions), wait, f"Lease held by {lease.holder}", lease_wait=True)


# --- status helpers --------------------------------------------------------------------------


def _base(o: obs.Observed, now: datetime.datetime) -> st.ToolRuntimeStatus:
    """Status as this holder writes it: its fencing token, identity and observed generation."""
    token = max(o.status.fencing_token, o.lease.token if o.lease.holder == o.identity else 0)
    pending = o.status.pending_reset
    if pending is not None and pending.value != o.annotations.get(mf.ANN_RESET):
        pending = None  # the reset it recorded was consumed or refused
    return o.status.model_copy(
        update={"fencing_token": token, "holder": o.identity, "observed_generation": o.meta_generation,
                "pending_reset": pending}
    )


Cond = tuple[st.ConditionType, bool, st.Reason | str, str]


def _with_conditions(
    status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime, *changes: Cond
) -> st.ToolRuntimeStatus:
    conds = status.conditions
    for kind, true, reason, message in changes:
        conds = cond.set_condition(
            conds, kind=kind, true=true, reason=reason, message=message,
            observed_generation=o.meta_generation, now=now,
        )
    return status.model_copy(update={"conditions": conds})


def _initial_conditions(status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime) -> st.ToolRuntimeStatus:
    """Every condition type is present from the first write on, each with a reason."""
    missing: list[Cond] = []
    if status.condition(C.READY) is None:
        missing.append((C.READY, False, R.NO_GENERATION, "no generation serves yet"))
    if status.condition(C.PROGRESSING) is None:
        missing.append((C.PROGRESSING, False, R.IDLE, ""))
    if status.condition(C.CLEANUP_FAILED) is None:
        missing.append((C.CLEANUP_FAILED, False, R.CLEAN, ""))
    if status.condition(C.DEGRADED) is None:
        missing.append((C.DEGRADED, False, R.HEALTHY, ""))
    if status.condition(C.SUSPENDED) is None:
        missing.append((C.SUSPENDED, False, R.ACTIVE, ""))
    return _with_conditions(status, o, now, *missing)


def _step_conditions(status: st.ToolRuntimeStatus, o: obs.Observed, now: datetime.datetime, t: st.Transition) -> st.ToolRuntimeStatus:
    what = f"{_v(t.kind)} {_arrow(t)} ({_v(t.trigger)}): {_v(t.step)}"
    if t.message:
        what += f"; {t.message}"
    changes: list[Cond] = [(C.PROGRESSING, True, _v(t.step), what)]
    if t.trigger == st.Trigger.ORPHAN:
        # A stray beside the serving generation: two pods of one runtime exist until it is gone.
        changes.append((C.READY, False, R.MULTIPLE_PODS, f"{t.from_pod} (uid {t.from_uid}) is retired first; {what}"))
    else:
        changes.append((C.READY, False, _v(t.step), what))
    return _with_conditions(_initial_conditions(status, o, now), o, now, *changes)


def _arrow(t: st.Transition) -> str:
    a = f"g{t.from_}" if t.from_ else "-"
    b = f"g{t.to}" if t.to else "-"
    return f"{a}→{b}"


def _seconds(n: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=n)


def _remaining(deadline: datetime.datetime | None, now: datetime.datetime) -> float:
    if deadline is None:
        return 0.0
    return max(0.0, (deadline - now).total_seconds())


def _next_generation(o: obs.Observed) -> int:
    seen = [o.status.latest_generation]
    if o.status.current:
        seen.append(o.status.current.generation)
    if o.status.transition and o.status.transition.to:
        seen.append(o.status.transition.to)
    seen += [h.generation for h in o.status.history]
    seen += [pod.generation for pod in o.pods if pod.generation is not None]
    return max(seen) + 1


def _retiring(
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
        from_pod=pod.name if pod else (mf.pod_name(o.name) if generation else None),
        from_uid=uid,
        from_started_at=(pod.created_at if pod else None) or started_at,
        to=to,
        step=S.STOPPING_ADMISSION,
        started_at=now,
        step_started_at=now,
        deadline=now + _seconds(o.spec.budgets.drain_seconds),
    )


# --- idle: nothing in flight -----------------------------------------------------------------


def _squatters(o: obs.Observed) -> list[str]:
    """Objects holding one of the runtime's names that the runtime does not own."""
    found = []
    named = o.pod_by_name(mf.pod_name(o.name))
    if named is not None and not named.owned:
        found.append(f"pod {o.namespace}/{named.name} (uid {named.uid})")
    if o.spec.service is not None and o.service.exists and not o.service.owned:
        found.append(f"Service {o.namespace}/{o.name}")
    return found


def _foreign_claimants(o: obs.Observed) -> list[obs.PodInfo]:
    """Pods labelled for this runtime under another name that it does not own (never touched)."""
    return [pod for pod in o.pods if not pod.owned and pod.labelled and pod.name != mf.pod_name(o.name)]


def _name_conflict_message(squatters: list[str]) -> str:
    return (", ".join(squatters) + " has this runtime's name but is not owned by it: Baton does not "
            "touch it and starts no generation under that name until it is gone")


def _multiple_pods_message(o: obs.Observed, claimants: list[obs.PodInfo]) -> str:
    names = ", ".join(f"{pod.name} (uid {pod.uid})" for pod in claimants)
    return (f"pods labelled {mf.LABEL_RUNTIME}={o.name} but not owned by it: {names}; nothing is created "
            "until only one pod of the runtime remains")


def _idle(o: obs.Observed, now: datetime.datetime) -> p.Plan:
    status = o.status
    current = status.current
    current_pod = o.pod_by_uid(current.uid) if current else None

    stale = _stale_verbs(o, current_pod)
    if stale:
        return p.Plan(stale, 0, "stale verb refused")

    start: st.Transition | float | None = _intent(o, now, current_pod)
    if isinstance(start, st.Transition):
        if o.shutting_down:
            return _park(o, now, "shutting down: no new transition")
        gate = _handoff_gate(o, now, start)
        if isinstance(gate, p.Plan):
            return gate
        if isinstance(gate, st.Transition):
            return _with_lease(o, now, lambda: _begin(o, now, gate))
        start = gate.wait  # held back by the handoff policy: the steady path below, then wait

    service_actions = _service_actions(o)
    desired = _steady_status(o, now, current_pod)
    wait = start  # None, or seconds until a back-off ends
    if _squatters(o) or _foreign_claimants(o):
        # Such objects may carry none of our labels: no watch event says when they go.
        wait = FOREIGN_POLL_SECONDS if wait is None else min(wait, FOREIGN_POLL_SECONDS)
    if desired != status and not o.shutting_down:
        # Written under the Lease, so stamped with this holder's token (the API server's fence).
        stamped = desired.model_copy(update={"fencing_token": _base(o, now).fencing_token, "holder": o.identity,
                                             "pending_reset": None})
        warnings = _new_warnings(status, stamped)
        return _with_lease(o, now, lambda: p.Plan((p.WriteStatus(stamped), *service_actions, *warnings), 0,
                                                  "steady status"))
    claim_phases = _claim_phases(o)
    if claim_phases and not o.shutting_down:
        # Said once: the claims' own watch events wake the runtime again; a write that failed is
        # retried on the next wake-up, never in a loop. The Lease goes back at once.
        return _with_lease(o, now, lambda: p.Plan((*service_actions, *claim_phases, p.ReleaseLease()), wait,
                                                  "claim phases"))
    if o.lease.holder == o.identity:
        return p.Plan((*service_actions, p.ReleaseLease()), wait, "idle: release Lease")
    return p.Plan(service_actions, wait, "idle")


def _claim_phases(o: obs.Observed) -> tuple[p.Action, ...]:
    """Bound while the claimed generation exists; Stale once it is gone (it then pins nothing).
    Written only between transitions, each claim once per change."""
    current = o.status.current
    live = {pod.generation for pod in o.owned_pods() if pod.generation is not None}
    if current is not None:
        live.add(current.generation)
    allocated = max([o.status.latest_generation, *live, 0])
    actions: list[p.Action] = []
    for c in o.claims:
        if c.generation in live:
            want, msg = claims_model.ClaimPhase.BOUND, f"generation {c.generation} of {o.name} exists"
        elif c.generation <= allocated:
            want, msg = claims_model.ClaimPhase.STALE, (
                f"generation {c.generation} of {o.name} is gone" + (f" (now {current.generation})" if current else ""))
        else:
            continue  # a generation not started yet: nothing to say
        if c.phase != want.value and c.uid:
            actions.append(p.SetClaimPhase(c.name, c.uid, want.value, msg))
    return tuple(actions)


def _new_warnings(old: st.ToolRuntimeStatus, new: st.ToolRuntimeStatus) -> tuple[p.Action, ...]:
    """A Warning event (and a count) when a condition newly reports a conflict: said once."""
    actions: list[p.Action] = []
    for kind, reason in ((C.DEGRADED, R.NAME_CONFLICT), (C.READY, R.MULTIPLE_PODS), (C.DEGRADED, R.INVALID_SPEC)):
        before, after = old.condition(kind), new.condition(kind)
        if after is not None and after.reason == reason.value and (
            before is None or before.reason != reason.value or before.message != after.message
        ):
            actions.append(p.Event("Warning", reason.value, after.message))
            if reason != R.INVALID_SPEC:
                actions.append(p.Record(p.Metric.NAME_CONFLICTS, (("kind", reason.value),)))
    return tuple(actions)


def _park(o: obs.Observed, now: datetime.datetime, note: str) -> p.Plan:
    if o.lease.holder == o.identity:
        return p.Plan((p.ReleaseLease(),), None, note)
    return p.Plan((), None, note)


def _stale_verbs(o: obs.Observed, current_pod: obs.PodInfo | None) -> tuple[p.Action, ...]:
    actions: list[p.Action] = []
    current = o.status.current
    reset = o.annotations.get(mf.ANN_RESET)
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
                p.RemoveAnnotation(mf.ANN_RESET, reset, consumes=True),
                p.Event("Warning", R.STALE_RESET.value,
                        f"reset names generation {reset!s}, but the current generation is {now_gen}: nothing touched"),
                p.Record(p.Metric.STALE_VERBS, (("verb", "reset"),)),
            ]
    force = o.annotations.get(mf.ANN_FORCE_RECOVERY)
    if force is not None:
        actions += _stale_force(o, force, "no cleanup failure is pending")
    retire = o.annotations.get(mf.ANN_FORCE_RETIRE)
    if retire is not None:
        actions += _stale_force_retire(retire, "no retire waits for pins")
    return tuple(actions)


def _stale_force(o: obs.Observed, value: str, why: str) -> list[p.Action]:
    return [
        p.RemoveAnnotation(mf.ANN_FORCE_RECOVERY, value, consumes=True),
        p.Event("Warning", R.STALE_FORCE_RECOVERY.value,
                f"force-recovery names generation {value!s}, but {why}: nothing touched"),
        p.Record(p.Metric.STALE_VERBS, (("verb", "force-recovery"),)),
    ]


def _intent(o: obs.Observed, now: datetime.datetime, current_pod: obs.PodInfo | None) -> st.Transition | float | None:
    """The transition due now, or seconds until one may start, or None for none."""
    status, current = o.status, o.status.current
    kinds = st.TransitionKind
    trig = st.Trigger
    owned = o.owned_pods()
    if o.deleting:
        victim = current_pod if current_pod is not None and current_pod.owned else (owned[0] if owned else None)
        if victim is not None:
            return _retiring(o, now, kind=kinds.DELETE, trigger=trig.DELETED, pod=victim,
                             generation=victim.generation, uid=victim.uid)
        return st.Transition(kind=kinds.DELETE, trigger=trig.DELETED, step=S.FINALIZING,
                             started_at=now, step_started_at=now)
    if current_pod is not None and not current_pod.owned:
        return None  # the serving pod was disowned: never touched; Degraded NameConflict says so
    strays = [pod for pod in owned if current_pod is None or pod.uid != current_pod.uid]
    if strays:
        stray = strays[0]
        return _retiring(o, now, kind=kinds.RETIRE, trigger=trig.ORPHAN, pod=stray,
                         generation=stray.generation, uid=stray.uid)
    if o.spec.suspend:
        if current_pod is not None and current is not None:
            return _retiring(o, now, kind=kinds.RETIRE, trigger=trig.SUSPENDED, pod=current_pod,
                             generation=current.generation, uid=current.uid)
        return None
    if _foreign_claimants(o) or o.spec_error is not None:
        return None  # nothing new while a foreign pod claims the runtime, or the spec is unreadable
    nxt = _next_generation(o)
    if current is not None:
        lost = current_pod is None or current_pod.phase in ("Failed", "Succeeded") or current_pod.deleting
        if lost:
            return _retiring(o, now, kind=kinds.HANDOFF, trigger=trig.POD_LOST, pod=current_pod,
                             generation=current.generation, uid=current.uid, to=nxt,
                             started_at=current.started_at)
        if o.annotations.get(mf.ANN_RESET, "").strip() == str(current.generation):
            return _retiring(o, now, kind=kinds.HANDOFF, trigger=trig.RESET, pod=current_pod,
                             generation=current.generation, uid=current.uid, to=nxt)
        if current.template_hash != o.desired_hash:
            if o.missing_config_refs:
                return None  # keep serving the old one; Degraded says why
            return _retiring(o, now, kind=kinds.HANDOFF, trigger=trig.TEMPLATE_CHANGED, pod=current_pod,
                             generation=current.generation, uid=current.uid, to=nxt)
        return None
    # Nothing serves: start a generation, unless backing off, the config is incomplete, or a
    # foreign pod holds the name (a foreign Service only goes unmanaged: Degraded says so).
    if o.missing_config_refs or _squatters_for_create(o):
        return None
    if status.retry and status.retry.not_before and now < status.retry.not_before:
        return _remaining(status.retry.not_before, now)
    trigger = trig.RETRY if status.retry else (trig.RESUMED if status.history else trig.INITIAL)
    return st.Transition(kind=kinds.CREATE, trigger=trigger, to=nxt, step=S.CREATING,
                         started_at=now, step_started_at=now)


# --- the handoff policy: a change may wait (WhenIdle, Manual) ------------------------------------

# While a change waits for idle, the drain probe runs at most this often (each check takes the
# Lease, probes, and hands the Lease back: two writes), however short the probe's period.
PENDING_CHECK_FLOOR_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class Hold:
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
    gen = o.status.current.generation if o.status.current else 0
    what = f"{', '.join(pending.changed)} changed since generation {gen} started"
    if o.spec.handoff.policy == spec_model.HandoffPolicy.MANUAL:
        return f'{what}; handoff policy Manual: hands off on annotation {mf.ANN_RESET}: "{gen}"'
    until = pending.since + _seconds(o.spec.budgets.pending_seconds)
    return (f"{what}; handoff policy WhenIdle: hands off when the drain probe says idle, at the latest at "
            f"{until.isoformat()} (budgets.pendingSeconds={o.spec.budgets.pending_seconds})")


def _check_interval(o: obs.Observed) -> float:
    probe = o.spec.drain.probe
    return max(PENDING_CHECK_FLOOR_SECONDS, float(probe.period_seconds if probe else 0))


def idle_check_due(o: obs.Observed, now: datetime.datetime) -> bool:
    """Whether the Lease holder should probe the serving pod for a change waiting for idle now
    (the worker asks before probing: every pass under the Lease must not dial the pod)."""
    return o.idle_checked_at is None or (now - o.idle_checked_at).total_seconds() >= _check_interval(o)


def _handoff_gate(o: obs.Observed, now: datetime.datetime, t: st.Transition) -> st.Transition | p.Plan | Hold:
    """A template change under policy WhenIdle or Manual waits; every other trigger (reset,
    suspend, deletion, a lost pod, a stray) goes at once."""
    policy = o.spec.handoff.policy
    if t.trigger != st.Trigger.TEMPLATE_CHANGED or policy == spec_model.HandoffPolicy.IMMEDIATE:
        return t
    pending = o.status.pending
    if pending is None or pending.template_hash != o.desired_hash:
        # Recorded first (a status write under the Lease): the wait is bounded from `since`, kept
        # across replicas and restarts; a further change keeps the first `since`.
        rec = st.PendingChange(template_hash=o.desired_hash, since=pending.since if pending else now,
                               changed=_what_changed(o))
        msg = _pending_message(o, rec)
        reason = R.WAITING_FOR_RESET if policy == spec_model.HandoffPolicy.MANUAL else R.WAITING_FOR_IDLE
        status = _with_conditions(_base(o, now).model_copy(update={"pending": rec}), o, now,
                                  (C.UPDATE_PENDING, True, reason, msg))
        return _with_lease(o, now, lambda: p.Plan(
            (p.WriteStatus(status), p.Event("Normal", reason.value, msg)), 0, "change held back by the handoff policy"))
    if policy == spec_model.HandoffPolicy.MANUAL:
        return Hold(None)  # until a reset names the current generation (the reset trigger)
    budget = float(o.spec.budgets.pending_seconds)
    waited = (now - pending.since).total_seconds()
    if waited >= budget:
        return t.model_copy(update={"message": f"WhenIdle: not idle within budgets.pendingSeconds={budget:.0f}; "
                                               "handing off anyway"})
    if o.spec.drain.probe is None or o.drain_idle:
        return t.model_copy(update={"message": "WhenIdle: the drain probe said idle"
                                    if o.spec.drain.probe else "WhenIdle: no drain probe to wait for"})
    left = budget - waited + 0.05
    interval = _check_interval(o)
    if o.idle_checked_at is not None:
        since_check = (now - o.idle_checked_at).total_seconds()
        if since_check < interval:
            # Checked lately (maybe in this very pass) and not idle: the Lease goes back (the
            # steady path below releases it), the next check after the interval.
            return Hold(min(interval - since_check, left))
    if _held_by_me(o):
        return Hold(min(interval, left))  # a check was due but could not run here: look again later
    # Time to check: only the Lease holder probes, so take the Lease first.
    return _with_lease(o, now, lambda: p.Plan((), 0, "WhenIdle: probe"))


def _stop_admission_now(o: obs.Observed, t: st.Transition, now: datetime.datetime,
                        old: obs.PodInfo | None) -> tuple[p.Action, ...]:
    """The label flip the next pass would make at once (StoppingAdmission, nothing pins the
    generation, no verb to answer first), sent in the plan that persists the step: a handoff's
    critical path is one pass shorter. `o` carries the status being written."""
    if old is None or t.step != S.STOPPING_ADMISSION or t.pin_wait_since is not None:
        return ()
    then = _stopping_admission(o, t, now)
    flips = [a for a in then.actions if isinstance(a, p.SetServing) and a.uid == old.uid and not a.serving]
    return then.actions if then.actions == tuple(flips) and len(flips) == 1 else ()


def _begin(o: obs.Observed, now: datetime.datetime, t: st.Transition) -> p.Plan:
    status = _base(o, now)
    degraded = status.condition(C.DEGRADED)
    changes: list[Cond] = []
    if degraded and degraded.reason == R.LOCK_TIMEOUT.value:
        changes.append((C.DEGRADED, False, R.HEALTHY, "lifecycle Lease acquired"))
    latest = max(status.latest_generation, t.to or 0)
    update: dict[str, object] = {"transition": t, "latest_generation": latest}
    if t.trigger != st.Trigger.ORPHAN and (status.pending is not None or _holds(status, C.UPDATE_PENDING)):
        # Any transition of the serving generation takes the held-back change up.
        update["pending"] = None
        changes.append((C.UPDATE_PENDING, False, R.UP_TO_DATE, f"taken up by {_v(t.kind)} {_arrow(t)} ({_v(t.trigger)})"))
    if t.trigger == st.Trigger.RESET:
        update["pending_reset"] = None
    old = o.pod_by_uid(t.from_uid) if t.from_uid else None
    pins = _pins_of(o, t) if old is not None and _pin_gate_applies(t, old) else pn.Pins()
    pin_events: list[p.Action] = []
    if pins.pinned:
        # Pinned: the transition is recorded, but admission is not stopped; N keeps serving.
        msg = _pin_wait_message(o, t, pins, now)
        t = t.model_copy(update={"pin_wait_since": now, "message": msg})
        update["transition"] = t
        status = status.model_copy(update=update)
        status = _with_conditions(_initial_conditions(status, o, now), o, now, *changes,
                                  (C.PROGRESSING, True, R.AWAITING_PIN_RELEASE, msg))
        pin_events.append(p.Event("Normal", R.AWAITING_PIN_RELEASE.value, msg))
    else:
        status = status.model_copy(update=update)
        status = _with_conditions(_step_conditions(status, o, now, t), o, now, *changes)
    # Events and metrics record what WriteStatus persisted, so they come right after it: they are
    # queued, never fail, and an API call failing later in the plan cannot lose them (the next
    # pass finds the transition begun and does not begin it again).
    actions: list[p.Action] = [
        p.WriteStatus(status),
        *pin_events,
        p.Event("Normal", R.TRANSITION_STARTED.value,
                f"{_v(t.kind)} {_arrow(t)} ({_v(t.trigger)}) by {o.identity}, fencing token {status.fencing_token}"),
        p.Record(p.Metric.TRANSITIONS, (("kind", _v(t.kind)),)),
    ]
    if t.trigger == st.Trigger.POD_LOST:
        actions.append(p.Event("Warning", R.POD_LOST.value,
                               f"pod {t.from_pod} of generation {t.from_} is gone or failed; handing off to g{t.to}"))
    if t.trigger == st.Trigger.ORPHAN:
        actions += [p.Event("Warning", R.MULTIPLE_PODS.value,
                            f"pod {t.from_pod} (uid {t.from_uid}) is not the current generation's: retiring it "
                            "before anything else"),
                    p.Record(p.Metric.NAME_CONFLICTS, (("kind", R.MULTIPLE_PODS.value),))]
    actions += [
        *_stop_admission_now(o.model_copy(update={"status": status}), t, now, old),
        # The Service exists before the first generation is Ready (it selects nothing until then).
        *_service_actions(o),
    ]
    if t.trigger == st.Trigger.RESET:
        actions.append(p.RemoveAnnotation(mf.ANN_RESET, o.annotations.get(mf.ANN_RESET, "")))
    return p.Plan(tuple(actions), 0, f"begin {_v(t.kind)} {_arrow(t)}")


def _holds(status: st.ToolRuntimeStatus, kind: st.ConditionType) -> bool:
    c = status.condition(kind)
    return c is not None and c.status == "True"


def _steady_status(o: obs.Observed, now: datetime.datetime, current_pod: obs.PodInfo | None) -> st.ToolRuntimeStatus:
    status = o.status
    if status.pending_reset is not None and status.pending_reset.value != o.annotations.get(mf.ANN_RESET):
        # The reset it recorded was refused or consumed once the transition had ended: a wait left
        # behind would shorten the wait of a later reset with the same value (found by tests/chaos).
        status = status.model_copy(update={"pending_reset": None})
    current = status.current
    if (status.pending is not None or _holds(status, C.UPDATE_PENDING)) and (
            current is None or current.template_hash == o.desired_hash):
        # The change was undone (or nothing serves to hold back): nothing waits any more.
        status = _with_conditions(status.model_copy(update={"pending": None}), o, now,
                                  (C.UPDATE_PENDING, False, R.UP_TO_DATE, "the spec matches the serving generation"))
    squatters = _squatters(o)
    claimants = _foreign_claimants(o)
    if (not status.conditions and not o.spec.suspend and not o.missing_config_refs and not o.unreadable_config_refs
            and not squatters and not claimants and o.spec_error is None):
        return status  # the first transition writes the initial conditions
    changes: list[Cond] = [(C.PROGRESSING, False, R.IDLE, "")]
    if o.spec.suspend:
        changes += [
            (C.SUSPENDED, True, R.SUSPENDED, "spec.suspend is true: no generation runs"),
            (C.READY, False, R.SUSPENDED, "suspended"),
        ]
    else:
        changes.append((C.SUSPENDED, False, R.ACTIVE, ""))
        current = status.current
        if claimants:
            changes.append((C.READY, False, R.MULTIPLE_PODS, _multiple_pods_message(o, claimants)))
        elif current is not None and current_pod is not None and not current_pod.owned:
            changes.append((C.READY, False, R.NAME_CONFLICT,
                            f"pod {current_pod.name} of generation {current.generation} is no longer owned by this "
                            "runtime (its ownerReference was removed)"))
        elif current is not None and current_pod is not None:
            # The serving pod's readiness, as its kubelet reports it (no handoff: it may recover).
            if current_pod.ready:
                changes.append((C.READY, True, R.GENERATION_READY, f"generation {current.generation} serves ({current.pod})"))
            else:
                changes.append((C.READY, False, R.POD_NOT_READY,
                                f"pod {current.pod} of generation {current.generation} is not Ready"))
        elif current is None and squatters:
            changes.append((C.READY, False, R.NAME_CONFLICT, _name_conflict_message(squatters)))
        if status.current is None and status.retry and status.retry.not_before and now < status.retry.not_before:
            changes.append((C.READY, False, R.BACKING_OFF,
                            f"retrying after a failed start at {status.retry.not_before.isoformat()}"))
    degraded = status.condition(C.DEGRADED)
    disowned = current_pod is not None and not current_pod.owned
    if o.spec_error is not None:
        changes.append((C.DEGRADED, True, R.INVALID_SPEC, f"spec cannot be read: {o.spec_error}"))
    elif squatters or disowned:
        what = squatters or [f"pod {o.namespace}/{current_pod.name} (uid {current_pod.uid})" if current_pod else ""]
        changes.append((C.DEGRADED, True, R.NAME_CONFLICT, _name_conflict_message(what)))
    elif o.missing_config_refs:
        changes.append((C.DEGRADED, True, R.CONFIG_REF_MISSING,
                        "missing: " + ", ".join(sorted(o.missing_config_refs))))
    elif o.unreadable_config_refs and not (degraded and degraded.reason in (R.CONNECT_TIMEOUT.value, R.POD_REJECTED.value)
                                           and degraded.status == "True"):
        changes.append((C.DEGRADED, True, R.CONFIG_REF_UNREADABLE,
                        "not readable by Baton (see the chart's rbac values), so changes of their data "
                        "start no handoff: " + ", ".join(sorted(o.unreadable_config_refs))))
    else:
        if degraded and degraded.reason in (R.CONFIG_REF_MISSING.value, R.CONFIG_REF_UNREADABLE.value,
                                            R.NAME_CONFLICT.value, R.INVALID_SPEC.value, R.UNKNOWN_STEP.value):
            changes.append((C.DEGRADED, False, R.HEALTHY, "no conflict, referenced config present, spec readable"))
        elif degraded and degraded.reason == R.LOCK_TIMEOUT.value:
            changes.append((C.DEGRADED, False, R.HEALTHY, "lifecycle Lease acquired"))
    new = _with_conditions(_initial_conditions(status, o, now), o, now, *changes)
    if new == status:
        return status
    return new.model_copy(update={"observed_generation": o.meta_generation})


def _service_actions(o: obs.Observed) -> tuple[p.Action, ...]:
    if o.service.exists and not o.service.owned:
        return ()  # someone else's Service with this name: never patched or deleted
    if o.spec.service is None:
        return (p.DeleteService(),) if o.service.exists else ()
    want = mf.build_service(namespace=o.namespace, runtime=o.name, runtime_uid=o.uid, service=o.spec.service)
    have = o.service
    same = (
        have.exists
        and have.selector == want["spec"]["selector"]
        and have.session_affinity == want["spec"]["sessionAffinity"]
        and [pt.wire() for pt in have.ports] == [spec_model.ServicePort.model_validate(x).wire() for x in want["spec"]["ports"]]
    )
    return () if same else (p.EnsureService(want),)


# --- a transition in flight ------------------------------------------------------------------


def _parked(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> tuple[str, float | None] | None:
    """(note, wait) when the transition waits on something outside Baton and its status
    already says so: then it needs no Lease (an idle wait costs no writes)."""
    if t.step == S.CLEANUP_FAILED:
        if (o.spec.recovery.on_cleanup_failure == spec_model.OnCleanupFailure.FORCE
                or mf.ANN_FORCE_RECOVERY in o.annotations or o.pod_by_uid(t.from_uid) is None):
            return None
        return "cleanup failed; waiting for baton.dev/force-recovery", None
    if o.deleting and t.kind != st.TransitionKind.DELETE:
        return None
    pin_wait = _pin_parked(o, t, now)
    if pin_wait is not None:
        return pin_wait
    degraded = o.status.condition(C.DEGRADED)
    said = (degraded.reason if degraded is not None and degraded.status == "True" else None)
    old = o.pod_by_uid(t.from_uid) if t.retiring else None
    if old is not None and not old.owned:
        return ("retiring pod disowned; waiting for it to go", FOREIGN_POLL_SECONDS) if said == R.NAME_CONFLICT.value else None
    if t.step == S.CREATING:
        if _squatters_for_create(o):
            return ("a foreign object holds the name", FOREIGN_POLL_SECONDS) if said == R.NAME_CONFLICT.value else None
        if o.spec_error is not None:
            return ("spec unreadable", None) if said == R.INVALID_SPEC.value else None
        if t.not_before is not None and now < t.not_before and o.pod_rejected is None:
            return "pod creation refused; backing off", _remaining(t.not_before, now)
    return None


def _squatters_for_create(o: obs.Observed) -> list[str]:
    """What stops a pod create: a foreign pod holding the name, or foreign claimants."""
    named = o.pod_by_name(mf.pod_name(o.name))
    found = [f"pod {o.namespace}/{named.name} (uid {named.uid})"] if named is not None and not named.owned else []
    return found + [f"pod {o.namespace}/{pod.name} (uid {pod.uid})" for pod in _foreign_claimants(o)]


def _step(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    if o.deleting and t.kind != st.TransitionKind.DELETE:
        return _convert_to_delete(o, t, now)
    if o.shutting_down:
        # Everything up to here is persisted: hand the transition back for the next holder.
        return p.Plan((p.ReleaseLease(),), None, "shutting down: Lease handed back")
    force = o.annotations.get(mf.ANN_FORCE_RECOVERY)
    if force is not None and t.step != S.CLEANUP_FAILED:
        # Allowed only while CleanupFailed=True for that generation: never kept for later.
        return p.Plan(tuple(_stale_force(o, force, f"no cleanup failure is pending ({_v(t.step)})")), 0,
                      "stale force-recovery")
    retire = o.annotations.get(mf.ANN_FORCE_RETIRE)
    if retire is not None and not (t.step == S.STOPPING_ADMISSION and t.pin_wait_since is not None
                                   and retire.strip() == str(t.from_)):
        return p.Plan(tuple(_stale_force_retire(
            retire, f"no retire of that generation waits for pins ({_v(t.kind)} {_arrow(t)} at {_v(t.step)})")), 0,
            "stale force-retire")
    if not isinstance(t.step, S):
        return _unknown_step(o, t, now)
    ours = o.pod_by_uid(t.from_uid) if t.retiring else (o.pod_by_uid(t.to_uid) if t.step == S.CONNECTING else None)
    if ours is not None and not ours.owned:
        # Someone removed our ownerReference: the pod is not ours to relabel or delete any more.
        return _blocked(o, now, C.DEGRADED, R.NAME_CONFLICT,
                        _name_conflict_message([f"pod {o.namespace}/{ours.name} (uid {ours.uid})"]), FOREIGN_POLL_SECONDS)
    handler = {
        S.STOPPING_ADMISSION: _stopping_admission,
        S.DRAINING: _draining,
        S.TERMINATING: _terminating,
        S.AWAITING_POD_GONE: _awaiting_pod_gone,
        S.CLEANUP_FAILED: _cleanup_failed,
        S.CREATING: _creating,
        S.CONNECTING: _connecting,
        S.FINALIZING: _finalizing,
    }[t.step]
    return handler(o, t, now)


def _blocked(
    o: obs.Observed, now: datetime.datetime, kind: st.ConditionType, reason: st.Reason, message: str, wait: float | None
) -> p.Plan:
    """Say once (condition, Warning event, count) why the transition cannot go on; then wait."""
    c = o.status.condition(kind)
    true = kind != C.READY
    if c is not None and c.status == ("True" if true else "False") and c.reason == reason.value and c.message == message:
        return p.Plan((), wait, message)
    status = _with_conditions(_base(o, now), o, now, (kind, true, reason, message))
    actions: list[p.Action] = [p.WriteStatus(status), p.Event("Warning", reason.value, message)]
    if reason in (R.NAME_CONFLICT, R.MULTIPLE_PODS):
        actions.append(p.Record(p.Metric.NAME_CONFLICTS, (("kind", reason.value),)))
    return p.Plan(tuple(actions), 0, f"blocked: {reason.value}")


def _unknown_step(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """A step this version does not know (a newer Baton wrote it before a rollback): resume
    from the last step that is safe to repeat, never skipping the old pod's retirement."""
    old = o.pod_by_uid(t.from_uid)
    if old is not None:
        new_t: st.Transition | None = t.model_copy(update={
            "step": S.STOPPING_ADMISSION, "step_started_at": now,
            "deadline": now + _seconds(o.spec.budgets.drain_seconds)})
    elif t.to:
        new_t = t.model_copy(update={"step": S.CREATING, "step_started_at": now, "deadline": None})
    else:
        new_t = None
    msg = f"step {_v(t.step)!r} is unknown to this version of Baton; resumed at " + (_v(new_t.step) if new_t else "idle")
    status = _base(o, now).model_copy(update={"transition": new_t})
    status = _step_conditions(status, o, now, new_t) if new_t is not None else status
    status = _with_conditions(status, o, now, (C.DEGRADED, True, R.UNKNOWN_STEP, msg))
    return p.Plan((p.WriteStatus(status), p.Event("Warning", R.UNKNOWN_STEP.value, msg)), 0, "unknown step")


def _advance(
    o: obs.Observed,
    t: st.Transition,
    now: datetime.datetime,
    step: st.Step,
    *,
    deadline: datetime.datetime | None,
    extra: tuple[p.Action, ...] = (),
    conditions: tuple[Cond, ...] = (),
    **changes: object,
) -> p.Plan:
    new_t = t.model_copy(update={"step": step, "step_started_at": now, "deadline": deadline, **changes})
    status = _base(o, now).model_copy(update={"transition": new_t})
    if new_t.to:
        status = status.model_copy(update={"latest_generation": max(status.latest_generation, new_t.to)})
    status = _with_conditions(_step_conditions(status, o, now, new_t), o, now, *conditions)
    return p.Plan(
        (p.WriteStatus(status), _step_timing(t, now), *extra),
        0,
        f"{_v(t.step)} -> {step.value}",
    )


def _step_timing(t: st.Transition, now: datetime.datetime) -> p.Record:
    return p.Record(p.Metric.STEP_DURATION, (("step", _v(t.step)),),
                    max(0.0, (now - t.step_started_at).total_seconds()))


def _convert_to_delete(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """A delete arrived mid-transition: finish retiring what stands, start nothing new."""
    kinds = st.TransitionKind
    if t.retiring:
        new_t = t.model_copy(update={"kind": kinds.DELETE})
    else:
        fresh = o.pod_by_uid(t.to_uid) or (o.pod_by_name(mf.pod_name(o.name)) if t.to else None)
        if fresh is not None and fresh.owned:
            new_t = _retiring(o, now, kind=kinds.DELETE, trigger=st.Trigger.DELETED, pod=fresh,
                              generation=fresh.generation, uid=fresh.uid)
        else:
            new_t = st.Transition(kind=kinds.DELETE, trigger=st.Trigger.DELETED, step=S.FINALIZING,
                                  started_at=now, step_started_at=now)
    status = _step_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
    return p.Plan((p.WriteStatus(status),), 0, "runtime deleted mid-transition")


# --- pins: ToolRuntimeClaims hold a retire before admission stops ------------------------------


def _pin_gate_applies(t: st.Transition, old: obs.PodInfo) -> bool:
    """Pins hold a retire only before admission stops, and only of a pod that still serves: a
    pod already lost (failed, deleted, or the PodLost trigger) cannot be pinned."""
    return (t.step == S.STOPPING_ADMISSION and t.from_ is not None and t.trigger != st.Trigger.POD_LOST
            and old.owned and old.serving and not old.deleting and old.phase not in ("Failed", "Succeeded"))


def _pins_of(o: obs.Observed, t: st.Transition) -> pn.Pins:
    return pn.pins(claims=o.claims, runtime=o.name, generation=t.from_ or 0, known=o.claims_known)


def _pin_deadline(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> datetime.datetime:
    return (t.pin_wait_since or now) + _seconds(o.spec.budgets.pin_seconds)


def _pin_wait_message(o: obs.Observed, t: st.Transition, pins: pn.Pins, now: datetime.datetime) -> str:
    return (f"retiring generation {t.from_} ({_v(t.trigger)}) waits for {pins.describe()} (CommitEligible or "
            f"Committed) before admission stops, at most budgets.pinSeconds={o.spec.budgets.pin_seconds} (until "
            f"{_pin_deadline(o, t, now).isoformat()}); generation {t.from_} keeps serving")


def _pin_blocked_message(o: obs.Observed, t: st.Transition, pins: pn.Pins) -> str:
    return (f"generation {t.from_} is pinned by {pins.describe()} past budgets.pinSeconds="
            f"{o.spec.budgets.pin_seconds}: not retired ({_v(t.trigger)}), it keeps serving; it proceeds when the "
            f'claims are Released or Abandoned, or on annotation {mf.ANN_FORCE_RETIRE}: "{t.from_}"')


def _pin_parked(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> tuple[str, float | None] | None:
    """A retire waiting for pins, its status already saying so: no Lease needed (claim events wake it)."""
    if t.step != S.STOPPING_ADMISSION or t.pin_wait_since is None or mf.ANN_FORCE_RETIRE in o.annotations:
        return None
    old = o.pod_by_uid(t.from_uid)
    if old is None or not _pin_gate_applies(t, old):
        return None
    pins = _pins_of(o, t)
    if not pins.pinned:
        return None
    if t.pin_blocked:
        return ("retirement blocked by pins", None) if t.message == _pin_blocked_message(o, t, pins) else None
    deadline = _pin_deadline(o, t, now)
    if now < deadline and t.message == _pin_wait_message(o, t, pins, now):
        return "awaiting pin release", _remaining(deadline, now)
    return None


def _stale_force_retire(value: str, why: str) -> list[p.Action]:
    return [
        p.RemoveAnnotation(mf.ANN_FORCE_RETIRE, value, consumes=True),
        p.Event("Warning", R.STALE_FORCE_RETIRE.value,
                f"force-retire names generation {value!s}, but {why}: nothing touched"),
        p.Record(p.Metric.STALE_VERBS, (("verb", "force-retire"),)),
    ]


def _resume_retire(o: obs.Observed, t: st.Transition, now: datetime.datetime, why: str, *,
                   force_retired: str | None = None, extra: tuple[p.Action, ...] = ()) -> p.Plan:
    """The pins resolved (or a person overrode them): stop admission now, the drain budget from now."""
    new_t = t.model_copy(update={"step_started_at": now, "deadline": now + _seconds(o.spec.budgets.drain_seconds),
                                 "pin_wait_since": None, "pin_blocked": False, "message": why,
                                 "force_retired": force_retired or t.force_retired})
    status = _step_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
    if status.condition(C.RETIREMENT_BLOCKED) is not None:
        status = _with_conditions(status, o, now, (C.RETIREMENT_BLOCKED, False, R.NOT_BLOCKED, why))
    return p.Plan((p.WriteStatus(status), _step_timing(t, now), *extra), 0, f"pins: {why}")


def _pin_gate(o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo) -> p.Plan | None:
    """Before admission stops: wait for the pins of generation t.from_, bounded by pinSeconds;
    past it, RetirementBlocked (fail closed: the generation keeps serving)."""
    if not _pin_gate_applies(t, old) or t.force_retired:
        return None  # a person retired it past its pins: they never hold it again
    gen = t.from_
    pins = _pins_of(o, t)
    force = o.annotations.get(mf.ANN_FORCE_RETIRE)
    if force is not None:
        if force.strip() == str(gen) and t.pin_wait_since is not None:
            msg = (f"generation {gen} force-retired past pins ({pins.describe() if pins.pinned else 'none left'}) "
                   f'by annotation {mf.ANN_FORCE_RETIRE}: "{force}"')
            return _resume_retire(o, t, now, msg, force_retired=msg, extra=(
                p.Event("Normal", R.FORCE_RETIRED.value, msg), p.RemoveAnnotation(mf.ANN_FORCE_RETIRE, force),
                p.Record(p.Metric.FORCE_RETIRES)))
        return p.Plan(tuple(_stale_force_retire(force, f"generation {gen}'s retire is not waiting for pins")), 0,
                      "stale force-retire")
    if not pins.pinned:
        if t.pin_wait_since is None:
            return None  # the fast path: nothing pins it
        return _resume_retire(o, t, now, f"pins of generation {gen} released")
    if t.pin_wait_since is None:
        # Pinned after the transition was recorded (a claim arrived meanwhile): wait from now.
        msg = _pin_wait_message(o, t, pins, now)
        new_t = t.model_copy(update={"pin_wait_since": now, "message": msg})
        status = _with_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now,
                                  (C.PROGRESSING, True, R.AWAITING_PIN_RELEASE, msg))
        return p.Plan((p.WriteStatus(status), p.Event("Normal", R.AWAITING_PIN_RELEASE.value, msg)), 0, "pinned")
    deadline = _pin_deadline(o, t, now)
    if t.pin_blocked or now >= deadline:
        msg = _pin_blocked_message(o, t, pins)
        if t.pin_blocked and t.message == msg:
            return p.Plan((p.ReleaseLease(),), None, "retirement blocked by pins; Lease released")
        new_t = t.model_copy(update={"pin_blocked": True, "message": msg})
        status = _with_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now,
                                  (C.PROGRESSING, True, R.AWAITING_PIN_RELEASE, msg),
                                  (C.RETIREMENT_BLOCKED, True, R.PINNED_BY_COMMIT_ELIGIBLE_CLAIM, msg))
        actions: list[p.Action] = [p.WriteStatus(status), p.Event("Warning", R.PINNED_BY_COMMIT_ELIGIBLE_CLAIM.value, msg)]
        if not t.pin_blocked:
            actions.append(p.Record(p.Metric.RETIREMENTS_BLOCKED))
        return p.Plan(tuple(actions), 0, "retirement blocked by pins")
    msg = _pin_wait_message(o, t, pins, now)
    if t.message != msg:
        # Other claims pin it now: say which (the wait stays bounded from pinWaitSince).
        new_t = t.model_copy(update={"message": msg})
        status = _with_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now,
                                  (C.PROGRESSING, True, R.AWAITING_PIN_RELEASE, msg))
        return p.Plan((p.WriteStatus(status),), 0, "pins changed")
    return p.Plan((p.ReleaseLease(),), _remaining(deadline, now), "awaiting pin release; Lease released")


def _drain_incomplete(o: obs.Observed, t: st.Transition, why: str) -> tuple[p.Action, ...]:
    return (
        p.Event("Warning", R.DRAIN_INCOMPLETE.value,
                f"generation {t.from_} ({t.from_pod}): {why} within drainSeconds={o.spec.budgets.drain_seconds}; terminating anyway"),
        p.Record(p.Metric.DRAIN_INCOMPLETE),
    )


def _stopping_admission(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return _retire_done(o, t, now)
    gate = _pin_gate(o, t, now, old)
    if gate is not None:
        return gate
    if old.serving:
        if o.last_error is not None and t.deadline is not None and now >= t.deadline:
            # The label flip keeps failing: the drain budget bounds this step too.
            return _terminate(o, t, now, old, drain_incomplete=True,
                              extra=_drain_incomplete(o, t, "the pod could not be taken out of the Service"))
        gated = _pin_gate_applies(t, old) and not t.force_retired
        return p.Plan((p.SetServing(old.name, old.uid, False, pins_of=t.from_ if gated else None),), 0,
                      "stop admission")
    if o.spec.service is not None and o.endpoints_list_retiring_pod:
        if t.deadline is not None and now >= t.deadline:
            return _terminate(o, t, now, old, drain_incomplete=True,
                              extra=_drain_incomplete(o, t, "EndpointSlices still listed the pod"))
        return p.Plan((), _remaining(t.deadline, now), "waiting for EndpointSlices to drop the pod")
    if o.spec.drain.probe is None:
        # Nothing to drain (no probe to ask): Draining would end at once, so it is not written.
        return _terminate(o, t, now, old)
    return _advance(o, t, now, S.DRAINING, deadline=t.deadline)


def _draining(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return _retire_done(o, t, now)
    probe = o.spec.drain.probe
    if probe is None or o.drain_idle:
        return _terminate(o, t, now, old)
    if t.deadline is not None and now >= t.deadline:
        why = "the drain probe did not answer 200" + (f" (last: {o.drain_probe_error})" if o.drain_probe_error else "")
        return _terminate(o, t, now, old, drain_incomplete=True, message=why, extra=_drain_incomplete(o, t, why))
    return p.Plan((), min(float(probe.period_seconds), _remaining(t.deadline, now)), "draining")


def _terminate(o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo, *,
               extra: tuple[p.Action, ...] = (), drain_incomplete: bool = False, message: str | None = None) -> p.Plan:
    """Advance to Terminating and delete the old pod in the same plan: the executor sends the
    delete only after the Terminating step is persisted (it stops at the first failure), which
    is all the guarantee asks; one pass fewer on every handoff's critical path."""
    grace = o.spec.budgets.termination_grace_seconds
    return _advance(o, t, now, S.TERMINATING, deadline=now + _seconds(o.spec.budgets.cleanup_seconds),
                    extra=(*extra, p.DeletePod(old.name, old.uid, grace)), drain_incomplete=drain_incomplete,
                    message=t.message if message is None else message)


def _terminating(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return _retire_done(o, t, now)
    if old.deleting:
        return _advance(o, t, now, S.AWAITING_POD_GONE, deadline=t.deadline)
    if o.last_error is not None and t.deadline is not None and now >= t.deadline:
        return _cleanup_failure(o, t, now, old, R.DELETE_REJECTED, f"delete of {old.name} failed: {o.last_error}")
    grace = o.spec.budgets.termination_grace_seconds
    return p.Plan((p.DeletePod(old.name, old.uid, grace),), 0 if o.last_error is None else 1.0, "delete old pod")


def _awaiting_pod_gone(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    old = o.pod_by_uid(t.from_uid)
    if old is None:
        return _retire_done(o, t, now)
    if t.forced:
        if old.finalizers or not old.deleting:
            return p.Plan((p.ForceDeletePod(old.name, old.uid),), 1.0, "force delete (recorded)")
        return p.Plan((), 1.0, "force-deleted; awaiting pod gone")
    if t.deadline is not None and now >= t.deadline:
        return _cleanup_failure(
            o, t, now, old, R.POD_STUCK_TERMINATING,
            f"pod {old.name} (uid {old.uid}) still exists {o.spec.budgets.cleanup_seconds}s after its delete"
            + (f"; finalizers: {', '.join(old.finalizers)}" if old.finalizers else ""),
        )
    wait = _remaining(t.deadline, now)
    if not old.labelled:
        # Its labels were edited away: no watch event of ours says when it goes. Look again.
        wait = min(wait, 1.0)
    return p.Plan((), wait, "awaiting pod gone")


def _cleanup_failure(
    o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo, reason: st.Reason, message: str
) -> p.Plan:
    failure = st.CleanupFailure(generation=t.from_ or 0, pod=old.name, uid=old.uid, reason=reason, message=message, at=now)
    hint = (
        "force-deleting (recovery.onCleanupFailure=Force)"
        if o.spec.recovery.on_cleanup_failure == spec_model.OnCleanupFailure.FORCE
        else f'held: annotate baton.dev/force-recovery="{t.from_}" to abandon the pod'
    )
    plan = _advance(
        o, t, now, S.CLEANUP_FAILED, deadline=None,
        conditions=((C.CLEANUP_FAILED, True, reason, f"{message}; {hint}"),),
        extra=(
            p.Event("Warning", R.CLEANUP_FAILED.value, f"{message}; {hint}"),
            p.Record(p.Metric.CLEANUP_FAILURES, (("reason", reason.value),)),
        ),
    )
    write = plan.actions[0]
    assert isinstance(write, p.WriteStatus)
    with_failure = p.WriteStatus(write.status.model_copy(update={"last_cleanup_failure": failure}))
    return dataclasses.replace(plan, actions=(with_failure, *plan.actions[1:]))


def _cleanup_failed(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    old = o.pod_by_uid(t.from_uid)
    failed = o.status.last_cleanup_failure
    failed_gen = failed.generation if failed else (t.from_ or 0)
    if old is None:
        done = _retire_done(o, t, now, cleanup=(C.CLEANUP_FAILED, False, R.POD_GONE,
                                                 f"generation {failed_gen}'s pod is gone after its cleanup failure"))
        return done
    value = o.annotations.get(mf.ANN_FORCE_RECOVERY)
    force_policy = o.spec.recovery.on_cleanup_failure == spec_model.OnCleanupFailure.FORCE
    named = value is not None and value.strip() == str(failed_gen)
    if force_policy and value is not None and not named:
        # The policy recovers anyway; a wrong number is still refused as stale, and said so.
        return p.Plan(tuple(_stale_force(o, value, f"the cleanup failure is for generation {failed_gen}")), 0,
                      "stale force-recovery")
    if force_policy or named:
        by = f"annotation baton.dev/force-recovery={value}" if named else "recovery.onCleanupFailure=Force"
        msg = f"abandoned pod {old.name} (uid {old.uid}) of generation {failed_gen} by {by}"
        extra: list[p.Action] = [
            p.Event("Normal", R.FORCE_RECOVERED.value, msg),
            p.Record(p.Metric.FORCE_RECOVERIES),
        ]
        if value is not None:
            extra.append(p.RemoveAnnotation(mf.ANN_FORCE_RECOVERY, value))
        return _advance(
            o, t, now, S.AWAITING_POD_GONE,
            deadline=now + _seconds(o.spec.budgets.cleanup_seconds),
            forced=True, message=msg,
            conditions=((C.CLEANUP_FAILED, False, R.FORCE_RECOVERED, msg),),
            extra=tuple(extra),
        )
    if value is not None:
        return p.Plan(tuple(_stale_force(o, value, f"the cleanup failure is for generation {failed_gen}")), 0, "stale force-recovery")
    return p.Plan((p.ReleaseLease(),), None, "cleanup failed: held for a person")


def _outcome(o: obs.Observed, t: st.Transition, *, retired_current: bool) -> st.Outcome:
    if t.forced:
        return st.Outcome.FORCE_RECOVERED
    if o.deleting or t.kind == st.TransitionKind.DELETE:
        return st.Outcome.DELETED
    if t.trigger == st.Trigger.RESET and not retired_current:
        # A reset names the serving generation. Another pod retired on the way (a late create,
        # a pod found holding the name) was not reset: the model check, seed 1000020.
        return st.Outcome.RETIRED
    outcomes: dict[st.Trigger | str, st.Outcome] = {
        st.Trigger.RESET: st.Outcome.RESET,
        st.Trigger.POD_LOST: st.Outcome.LOST,
        st.Trigger.CONNECT_TIMEOUT: st.Outcome.CONNECT_TIMEOUT,
        st.Trigger.SUSPENDED: st.Outcome.SUSPENDED,
    }
    return outcomes.get(t.trigger, st.Outcome.RETIRED)


def backoff_seconds(attempt: int, base: float) -> float:
    return float(min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1))))


def _retire_done(o: obs.Observed, t: st.Transition, now: datetime.datetime, cleanup: Cond | None = None) -> p.Plan:
    """The old pod is confirmed gone (or abandoned by a recorded force recovery): record it."""
    status = _base(o, now)
    current = status.current
    # Only the pod with that UID ends `current`: a stray may carry the same generation label.
    retired_current = current is not None and current.uid == t.from_uid
    outcome = _outcome(o, t, retired_current=retired_current)
    entry = st.HistoryEntry(
        generation=t.from_ or 0,
        pod=t.from_pod,
        uid=t.from_uid,
        template_hash=current.template_hash if current and retired_current else None,
        started_at=t.from_started_at,
        retired_at=now,
        outcome=outcome,
        message="; ".join(m for m in (t.force_retired, "drain incomplete" if t.drain_incomplete else None) if m) or None,
    )
    history = status.history
    if t.from_:
        history = (history + (entry,))[-HISTORY_LIMIT:]
    if retired_current:
        current = None
    status = status.model_copy(update={"history": history, "current": current})
    actions: list[p.Action] = [
        _step_timing(t, now),
        p.Record(p.Metric.HANDOFFS, (("outcome", outcome.value),)),
    ]
    extra_conds: list[Cond] = [cleanup] if cleanup else []
    kinds = st.TransitionKind
    if o.deleting or t.kind == kinds.DELETE:
        new_t = t.model_copy(update={"kind": kinds.DELETE, "step": S.FINALIZING, "step_started_at": now, "deadline": None})
        status = _step_conditions(status.model_copy(update={"transition": new_t}), o, now, new_t)
    elif t.kind == kinds.HANDOFF and not o.spec.suspend:
        to = t.to or _next_generation(o)
        new_t = t.model_copy(update={"to": to, "step": S.CREATING, "step_started_at": now, "deadline": None})
        status = status.model_copy(update={"latest_generation": max(status.latest_generation, to)})
        status = _step_conditions(status.model_copy(update={"transition": new_t}), o, now, new_t)
    else:
        retry = status.retry
        if t.trigger == st.Trigger.CONNECT_TIMEOUT and retry is not None:
            wait = backoff_seconds(retry.attempt, o.backoff_base_seconds)
            retry = retry.model_copy(update={"not_before": now + _seconds(wait)})
        status = status.model_copy(update={"transition": None, "retry": retry})
        why = R.SUSPENDED if o.spec.suspend else (R.BACKING_OFF if retry else R.NO_GENERATION)
        current_pod = o.pod_by_uid(current.uid) if current else None
        extra_conds += [
            (C.PROGRESSING, False, R.IDLE, ""),
            # A stray was retired beside a serving generation: that one is still Ready.
            (C.READY, True, R.GENERATION_READY, f"generation {current.generation} serves ({current.pod})")
            if current and current_pod and current_pod.ready and not o.spec.suspend
            else (C.READY, False, why, f"generation {t.from_} retired ({outcome.value}); none serving"),
        ]
        if o.spec.suspend:
            extra_conds.append((C.SUSPENDED, True, R.SUSPENDED, "spec.suspend is true: no generation runs"))
    status = _with_conditions(status, o, now, *extra_conds)
    if status.transition is not None and status.transition.step == S.CREATING and o.last_error is None:
        # The create the next pass would send at once, sent once Creating is persisted (the
        # old pod is confirmed gone by this pass's reads): one pass fewer on the critical path.
        then = _creating(o.model_copy(update={"status": status}), status.transition, now)
        if then.kinds() == ["CreatePod"]:
            actions += then.actions
    return p.Plan((p.WriteStatus(status), *actions), 0, f"g{t.from_} confirmed gone ({outcome.value})")


def refusal_backoff_seconds(*, attempt: int, seed: str) -> float:
    """Exponential back-off with ±20 % jitter, derived from `seed` so decide() stays pure and
    replicas agree: runtimes refused together (a quota) do not retry in lockstep."""
    base = min(REFUSAL_BACKOFF_CAP_SECONDS, REFUSAL_BACKOFF_BASE_SECONDS * 2 ** max(0, attempt - 1))
    digest = hashlib.sha256(f"{seed}/{attempt}".encode()).digest()
    return float(base * (0.8 + 0.4 * digest[0] / 255))


def _creating(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    kinds = st.TransitionKind
    to = t.to or _next_generation(o)
    name = mf.pod_name(o.name)
    named = o.pod_by_name(name)
    if named is not None and not named.owned:
        return _blocked(o, now, C.DEGRADED, R.NAME_CONFLICT,
                        _name_conflict_message([f"pod {o.namespace}/{named.name} (uid {named.uid})"]), FOREIGN_POLL_SECONDS)
    claimants = _foreign_claimants(o)
    if claimants:
        return _blocked(o, now, C.DEGRADED, R.NAME_CONFLICT, _multiple_pods_message(o, claimants), FOREIGN_POLL_SECONDS)
    # Invariant 1: never create while any other pod of this runtime still stands. The API
    # server enforces it too: every generation's pod has the runtime's name.
    others = [pod for pod in o.owned_pods() if pod.name != name]
    mine = named
    if mine is not None and mine.generation != to:
        others.append(mine)
        mine = None
    if others:
        stray = others[0]
        new_t = _retiring(o, now, kind=kinds.HANDOFF, trigger=t.trigger, pod=stray,
                          generation=stray.generation, uid=stray.uid, to=to)
        status = _step_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
        return p.Plan((p.WriteStatus(status),), 0, f"{stray.name} (uid {stray.uid}) still stands: retire it first")
    if mine is None and (o.spec.suspend or o.missing_config_refs):
        # Suspended or config incomplete before the pod existed: start nothing, give the number up.
        # Only once the name is read fresh (ConfirmNoPod): the create may have landed with its
        # label edited off (the views never list it), and a transition ended here would forget
        # it; the next Create would then be sent beside it (the model check, seed 600024).
        status = _base(o, now).model_copy(update={"transition": None})
        status = _steady_status(o.model_copy(update={"status": status}), now, None)
        status = _with_conditions(status, o, now, (C.PROGRESSING, False, R.IDLE, ""))
        return p.Plan((p.ConfirmNoPod(name), p.WriteStatus(status)), 0, "nothing to create")
    if mine is not None:
        return _advance(o, t, now, S.CONNECTING, deadline=now + _seconds(o.spec.budgets.connect_seconds),
                        to=to, to_uid=mine.uid, template_hash=mine.template_hash or o.desired_hash,
                        attempt=None, not_before=None, message=None)
    if o.spec_error is not None:
        return _blocked(o, now, C.DEGRADED, R.INVALID_SPEC, f"spec cannot be read: {o.spec_error}", None)
    # Creating is bounded by connectSeconds too: refusals back off inside it, then give up.
    deadline = t.step_started_at + _seconds(o.spec.budgets.connect_seconds)
    if o.pod_rejected is not None:
        return _pod_rejected(o, t, now, to=to, deadline=deadline)
    if t.not_before is not None and now < t.not_before:
        return p.Plan((), _remaining(t.not_before, now), "backing off after a refused create")
    manifest = mf.build_pod(
        namespace=o.namespace, runtime=o.name, runtime_uid=o.uid, template=o.spec.template,
        generation=to, fencing_token=o.status.fencing_token, template_hash=o.desired_hash,
    )
    return p.Plan((p.CreatePod(manifest),), 0 if o.last_error is None else 1.0, f"create {name} (g{to})")


def _pod_rejected(o: obs.Observed, t: st.Transition, now: datetime.datetime, *, to: int, deadline: datetime.datetime) -> p.Plan:
    """The API server refused the pod (no image, PodSecurity, quota...): say so, quoting it,
    and back off with the Lease released; past connectSeconds, end like a connect timeout."""
    attempt = (t.attempt or 0) + 1
    msg = f"the API server refused pod {mf.pod_name(o.name)} of generation {to} (attempt {attempt}): {o.pod_rejected}"
    rejected: list[p.Action] = [p.Event("Warning", R.POD_REJECTED.value, msg), p.Record(p.Metric.POD_REJECTIONS)]
    if now >= deadline:
        retry_attempt = (o.status.retry.attempt if o.status.retry else 0) + 1
        wait = backoff_seconds(retry_attempt, o.backoff_base_seconds)
        why = f"{msg}; gave up after connectSeconds={o.spec.budgets.connect_seconds}, next try in {wait:.0f}s"
        status = _base(o, now).model_copy(update={
            "transition": None, "retry": st.Retry(attempt=retry_attempt, not_before=now + _seconds(wait))})
        status = _with_conditions(_initial_conditions(status, o, now), o, now,
                                  (C.DEGRADED, True, R.POD_REJECTED, why),
                                  (C.READY, False, R.POD_REJECTED, why),
                                  (C.PROGRESSING, False, R.IDLE, ""))
        return p.Plan((p.WriteStatus(status), _step_timing(t, now), *rejected, p.Record(p.Metric.CONNECT_TIMEOUTS),
                       p.ReleaseLease()), 0, "pod rejected past connectSeconds")
    not_before = min(deadline, now + _seconds(refusal_backoff_seconds(attempt=attempt, seed=o.uid)))
    new_t = t.model_copy(update={"to": to, "attempt": attempt, "not_before": not_before, "message": msg})
    status = _step_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
    status = _with_conditions(status, o, now, (C.DEGRADED, True, R.POD_REJECTED, msg))
    return p.Plan((p.WriteStatus(status), *rejected, p.ReleaseLease()), _remaining(not_before, now), "pod rejected: back off")


def _connecting(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    kinds = st.TransitionKind
    pod = o.pod_by_uid(t.to_uid)
    to = t.to or 0
    if pod is None or pod.phase in ("Failed", "Succeeded") or pod.deleting:
        # The new generation died before serving: its number is spent, the next one gets a new number.
        nxt = _next_generation(o)
        lost = st.HistoryEntry(generation=to, pod=mf.pod_name(o.name), uid=t.to_uid, retired_at=now,
                               outcome=st.Outcome.LOST)
        named = o.pod_by_name(mf.pod_name(o.name))
        if pod is None and named is not None and named.owned:
            # Another pod holds the name (a second create of this number, sent when the write of
            # Connecting with the first one's UID was held: model seed 800036). This pass read
            # it by name; the next one, in Creating, would not: retire it now, by UID.
            new_t = _retiring(o, now, kind=kinds.HANDOFF, trigger=st.Trigger.POD_LOST, pod=named,
                              generation=named.generation or to, uid=named.uid, to=nxt)
            history = (o.status.history + (lost,))[-HISTORY_LIMIT:] if t.to_uid else o.status.history
        elif pod is not None:
            new_t = _retiring(o, now, kind=kinds.HANDOFF, trigger=st.Trigger.POD_LOST, pod=pod,
                              generation=to, uid=pod.uid, to=nxt)
            history = o.status.history
        else:
            new_t = t.model_copy(update={"to": nxt, "to_uid": None, "step": S.CREATING,
                                         "step_started_at": now, "deadline": None})
            history = (o.status.history + (lost,))[-HISTORY_LIMIT:]
        status = _base(o, now).model_copy(update={"transition": new_t, "history": history,
                                                  "latest_generation": max(o.status.latest_generation, nxt)})
        status = _step_conditions(status, o, now, new_t)
        return p.Plan((p.WriteStatus(status),
                       p.Event("Warning", R.POD_LOST.value, f"new generation {to} lost its pod before Ready; next is g{nxt}")),
                      0, "new pod lost")
    expired = t.deadline is not None and now >= t.deadline
    if pod.ready and not (expired and o.last_error is not None):
        if not pod.serving:
            # A label patch that keeps failing is bounded too: past connectSeconds it is a
            # connect timeout like any other (the condition below).
            return p.Plan((p.SetServing(pod.name, pod.uid, True),), 0 if o.last_error is None else 1.0, "serve")
        built_from = t.template_hash or pod.template_hash or o.desired_hash
        current = st.Current(generation=to, pod=pod.name, uid=pod.uid, template_hash=built_from,
                             parts=dict(o.desired_parts) if o.desired_parts and built_from == o.desired_hash else None,
                             started_at=pod.created_at, ready_since=now)
        status = _base(o, now).model_copy(update={"current": current, "transition": None, "retry": None})
        changes: list[Cond] = [
            (C.READY, True, R.GENERATION_READY, f"generation {to} serves ({pod.name})"),
            (C.PROGRESSING, False, R.IDLE, ""),
            (C.SUSPENDED, False, R.ACTIVE, ""),
        ]
        degraded = status.condition(C.DEGRADED)
        if degraded and degraded.status == "True":
            changes.append((C.DEGRADED, False, R.HEALTHY, f"generation {to} became Ready"))
        status = _with_conditions(_initial_conditions(status, o, now), o, now, *changes)
        return p.Plan(
            (p.WriteStatus(status), _step_timing(t, now),
             p.Event("Normal", R.GENERATION_READY.value, f"generation {to} ({pod.name}) is Ready and serving")),
            0, f"g{to} ready",
        )
    if t.deadline is not None and now >= t.deadline:
        attempt = (o.status.retry.attempt if o.status.retry else 0) + 1
        msg = f"generation {to} ({pod.name}) not Ready within connectSeconds={o.spec.budgets.connect_seconds} (attempt {attempt})"
        new_t = _retiring(o, now, kind=kinds.RETIRE, trigger=st.Trigger.CONNECT_TIMEOUT, pod=pod,
                          generation=to, uid=pod.uid)
        status = _base(o, now).model_copy(update={"transition": new_t, "retry": st.Retry(attempt=attempt)})
        status = _with_conditions(_step_conditions(status, o, now, new_t), o, now,
                                  (C.DEGRADED, True, R.CONNECT_TIMEOUT, msg))
        return p.Plan((p.WriteStatus(status), _step_timing(t, now),
                       p.Event("Warning", R.CONNECT_TIMEOUT.value, msg),
                       p.Record(p.Metric.CONNECT_TIMEOUTS)), 0, "connect timeout")
    return p.Plan((), _remaining(t.deadline, now), f"waiting for {pod.name} Ready")


def _finalizing(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    if o.owned_pods():
        stray = o.owned_pods()[0]
        new_t = _retiring(o, now, kind=st.TransitionKind.DELETE, trigger=st.Trigger.DELETED, pod=stray,
                          generation=stray.generation, uid=stray.uid)
        status = _step_conditions(_base(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
        return p.Plan((p.WriteStatus(status),), 0, f"{stray.name} still stands: retire it first")
    # Nothing owned in view; the one pod name is read fresh first (ConfirmNoPod), so nothing the
    # views cannot see is left behind.
    actions: list[p.Action] = [p.ConfirmNoPod(mf.pod_name(o.name))]
    if o.service.exists and o.service.owned:
        actions.append(p.DeleteService())
    actions += [p.DeleteLease(), p.RemoveFinalizer()]
    return p.Plan(tuple(actions), None, "nothing left: remove Service, Lease, finalizer")
