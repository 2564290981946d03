"""Creating the new generation's pod and connecting it: Creating -> Connecting -> serving."""

from __future__ import annotations

import datetime

from baton.lifecycle import conditions
from baton.lifecycle import dormancy
from baton.lifecycle import hooks
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.lifecycle import steady
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st


def creating(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """Creating: create the pod of generation `t.to` once no other pod of the runtime stands;
    a pod of that number already there moves the transition to Connecting."""
    kinds = st.TransitionKind
    to = t.to or transitions.next_generation(o)
    name = names.pod_name(o.name)
    named = o.pod_by_name(name)
    if named is not None and not named.owned:
        return transitions.blocked(
            o, now, kind=st.ConditionType.DEGRADED, reason=st.Reason.NAME_CONFLICT,
            message=steady.name_conflict_message([f"pod {o.namespace}/{named.name} (uid {named.uid})"]),
            wait=transitions.FOREIGN_POLL_SECONDS)
    claimants = steady.foreign_claimants(o)
    if claimants:
        return transitions.blocked(o, now, kind=st.ConditionType.DEGRADED, reason=st.Reason.NAME_CONFLICT,
                                   message=steady.multiple_pods_message(o, claimants),
                                   wait=transitions.FOREIGN_POLL_SECONDS)
    # Invariant 1: never create while any other pod of this runtime still stands. The API
    # server enforces it too: every generation's pod has the runtime's name.
    others = [pod for pod in o.owned_pods() if pod.name != name]
    mine = named
    if mine is not None and mine.generation != to:
        others.append(mine)
        mine = None
    if others:
        stray = others[0]
        new_t = transitions.retiring(o, now, kind=kinds.HANDOFF, trigger=t.trigger, pod=stray,
                          generation=stray.generation, uid=stray.uid, to=to)
        status = conditions.step_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
        return p.Plan((p.WriteStatus(status),), 0, f"{stray.name} (uid {stray.uid}) still stands: retire it first")
    if mine is None and (o.spec.suspend or o.missing_config_refs):
        # Suspended or config incomplete before the pod existed: start nothing, give the number up.
        # Only once the name is read fresh (ConfirmNoPod): the create may have landed with its
        # label edited off (the views never list it), and a transition ended here would forget
        # it; the next Create would then be sent beside it.
        status = transitions.stamped(o, now).model_copy(update={"transition": None})
        status = steady.steady_status(o.model_copy(update={"status": status}), now, None)
        status = conditions.with_conditions(status, o, now, (st.ConditionType.PROGRESSING, False, st.Reason.IDLE, ""))
        return p.Plan((p.ConfirmNoPod(name), p.WriteStatus(status), *steady.new_warnings(o.status, status)), 0,
                      "nothing to create")
    if mine is not None:
        deadline = dormancy.start_deadline(o, t) or now + transitions.seconds(o.spec.budgets.connect_seconds)
        return transitions.advance(o, t, now, st.Step.CONNECTING, deadline=deadline,
                        to=to, to_uid=mine.uid, template_hash=mine.template_hash or o.desired_hash,
                        attempt=None, not_before=None, message=None)
    if o.create_in_doubt == to:
        # Our create of `to` got no answer and no pod of it is in view: read the name fresh (it
        # may have landed), else give the number up; the late pod, if it lands, is a stray.
        status, nxt = transitions.number_given_up(o, t, now, number=to)
        msg = (f"the create of generation {to} got no answer ({o.last_error or 'no error recorded'}); it may "
               f"still land, so generation {to} is given up and generation {nxt} is created instead")
        return p.Plan((p.ConfirmNoPod(name), p.WriteStatus(status), p.Event("Warning", st.Reason.CREATE_IN_DOUBT.value, msg)),
                      0, f"g{to} given up: its create got no answer")
    if o.spec_error is not None:
        return transitions.blocked(o, now, kind=st.ConditionType.DEGRADED, reason=st.Reason.INVALID_SPEC,
                                   message=f"spec cannot be read: {o.spec_error}", wait=None)
    # Creating is bounded by connectSeconds too (a wake: wakeSeconds from its start, with
    # Connecting): refusals back off inside it, then give up.
    deadline = dormancy.start_deadline(o, t) or t.step_started_at + transitions.seconds(o.spec.budgets.connect_seconds)
    if o.pod_rejected is not None:
        return _pod_rejected(o, t, now, to=to, deadline=deadline)
    if t.not_before is not None and now < t.not_before:
        return p.Plan((), transitions.remaining(t.not_before, now), "backing off after a refused create")
    if o.spec.stdio is not None and not o.bridge_image:
        return transitions.blocked(o, now, kind=st.ConditionType.DEGRADED, reason=st.Reason.INVALID_SPEC,
                                   message=STDIO_WITHOUT_IMAGE, wait=None)
    manifest = mf.build_pod(
        namespace=o.namespace, runtime=o.name, runtime_uid=o.uid, template=o.spec.template,
        generation=to, fencing_token=o.status.fencing_token, template_hash=o.desired_hash,
        stdio=o.spec.stdio, budgets=o.spec.budgets, bridge_image=o.bridge_image,
    )
    return p.Plan((p.CreatePod(manifest),), 0 if o.last_error is None else 1.0, f"create {name} (g{to})")


STDIO_WITHOUT_IMAGE = ("spec.stdio needs Baton's bridge, copied from Baton's own image, and the operator does not know "
                       "it: set BATON_IMAGE on the operator (the chart sets it)")


def _pod_rejected(o: obs.Observed, t: st.Transition, now: datetime.datetime, *, to: int, deadline: datetime.datetime) -> p.Plan:
    """The API server refused the pod (no image, PodSecurity, quota...): say so, quoting it,
    and back off with the Lease released; past connectSeconds, end like a connect timeout."""
    attempt = (t.attempt or 0) + 1
    msg = f"the API server refused pod {names.pod_name(o.name)} of generation {to} (attempt {attempt}): {o.pod_rejected}"
    rejected: list[p.Action] = [p.Event("Warning", st.Reason.POD_REJECTED.value, msg), p.Record(p.Metric.POD_REJECTIONS)]
    if now >= deadline:
        retry_attempt = (o.status.retry.attempt if o.status.retry else 0) + 1
        wait = transitions.backoff_seconds(retry_attempt, o.backoff_base_seconds)
        budget = (f"spec.idle.wakeSeconds={o.spec.idle.wake_seconds}" if dormancy.is_wake(o, t) and o.spec.idle
                  else f"connectSeconds={o.spec.budgets.connect_seconds}")
        why = f"{msg}; gave up after {budget}, next try in {wait:.0f}s"
        status = transitions.stamped(o, now).model_copy(update={
            "transition": None, "retry": st.Retry(attempt=retry_attempt, not_before=now + transitions.seconds(wait))})
        if dormancy.is_wake(o, t):
            status, failed = dormancy.wake_failed(o, t, now, status, why)
            rejected += failed
        status = conditions.with_conditions(conditions.initial_conditions(status, o, now), o, now,
                                  (st.ConditionType.DEGRADED, True, st.Reason.POD_REJECTED, why),
                                  (st.ConditionType.READY, False, st.Reason.POD_REJECTED, why),
                                  (st.ConditionType.PROGRESSING, False, st.Reason.IDLE, ""))
        return p.Plan((p.WriteStatus(status), transitions.step_timing(t, now), *rejected, p.Record(p.Metric.CONNECT_TIMEOUTS),
                       p.ReleaseLease()), 0, "pod rejected past connectSeconds")
    not_before = min(deadline, now + transitions.seconds(transitions.refusal_backoff_seconds(attempt=attempt, seed=o.uid)))
    new_t = t.model_copy(update={"to": to, "attempt": attempt, "not_before": not_before, "message": msg})
    status = conditions.step_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
    status = conditions.with_conditions(status, o, now, (st.ConditionType.DEGRADED, True, st.Reason.POD_REJECTED, msg))
    return p.Plan((p.WriteStatus(status), *rejected, p.ReleaseLease()), transitions.remaining(not_before, now), "pod rejected: back off")


def drain_probe_misconfigured_message(o: obs.Observed) -> str:
    probe = o.spec.drain.probe
    where = f"GET {probe.http_get.path} on port {probe.http_get.port}" if probe is not None else "the drain probe"
    return (f"spec.drain.probe {where} {o.drain_probe_error or 'names no endpoint of the tool'}: a drain cannot "
            "ask it, so it will not wait for calls in flight; fix the path or remove the probe")


def connecting(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """Connecting: the new pod becomes Ready and serving (then it is current), is lost (a new
    number), or misses connectSeconds (retired, and the runtime backs off)."""
    kinds = st.TransitionKind
    pod = o.pod_by_uid(t.to_uid)
    to = t.to or 0
    if pod is None or pod.phase in ("Failed", "Succeeded") or pod.deleting:
        # The new generation died before serving: its number is spent, the next one gets a new number.
        nxt = transitions.next_generation(o)
        lost = st.HistoryEntry(generation=to, pod=names.pod_name(o.name), uid=t.to_uid, retired_at=now,
                               outcome=st.Outcome.LOST)
        named = o.pod_by_name(names.pod_name(o.name))
        if pod is None and named is not None and named.owned:
            # Another pod holds the name (a second create of this number, sent when the write of
            # Connecting with the first one's UID was held). This pass read
            # it by name; the next one, in Creating, would not: retire it now, by UID.
            new_t = transitions.retiring(o, now, kind=kinds.HANDOFF, trigger=st.Trigger.POD_LOST, pod=named,
                              generation=named.generation or to, uid=named.uid, to=nxt)
            history = (o.status.history + (lost,))[-transitions.HISTORY_LIMIT:] if t.to_uid else o.status.history
        elif pod is not None:
            new_t = transitions.retiring(o, now, kind=kinds.HANDOFF, trigger=st.Trigger.POD_LOST, pod=pod,
                              generation=to, uid=pod.uid, to=nxt)
            history = o.status.history
        else:
            new_t = t.model_copy(update={"to": nxt, "to_uid": None, "step": st.Step.CREATING,
                                         "step_started_at": now, "deadline": None})
            history = (o.status.history + (lost,))[-transitions.HISTORY_LIMIT:]
        status = transitions.stamped(o, now).model_copy(update={"transition": new_t, "history": history,
                                                  "latest_generation": max(o.status.latest_generation, nxt)})
        status = conditions.step_conditions(status, o, now, new_t)
        return p.Plan((p.WriteStatus(status),
                       p.Event("Warning", st.Reason.POD_LOST.value, f"new generation {to} lost its pod before Ready; next is g{nxt}"
                               + (f"; {pod.terminated}" if pod is not None and pod.terminated else ""))),
                      0, "new pod lost")
    expired = t.deadline is not None and now >= t.deadline
    if pod.ready and not (expired and o.last_error is not None):
        if not pod.serving:
            # spec.hooks.postReady first: the pod admits calls only once it ended (persisted).
            hooked = hooks.post_ready(o, t, now, pod)
            if hooked is not None:
                return hooked
            # A label patch that keeps failing is bounded too: past connectSeconds it is a
            # connect timeout like any other (the condition below).
            return p.Plan((p.SetServing(pod.name, pod.uid, True),), 0 if o.last_error is None else 1.0, "serve")
        if o.drain_probe_checking and o.spec.drain.probe is not None:
            # One probe of the new pod first (bounded by its timeoutSeconds; its answer wakes the
            # runtime): a drain probe on a path the tool lacks is said as the generation starts.
            return p.Plan((), float(o.spec.drain.probe.timeout_seconds), "checking the drain probe's path")
        built_from = t.template_hash or pod.template_hash or o.desired_hash
        current = st.Current(generation=to, pod=pod.name, uid=pod.uid, template_hash=built_from,
                             parts=dict(o.desired_parts) if o.desired_parts and built_from == o.desired_hash else None,
                             started_at=pod.created_at, ready_since=now,
                             hooks=tuple(r for r in t.hooks if r.hook == st.HookName.POST_READY))
        status = transitions.stamped(o, now).model_copy(update={"current": current, "transition": None, "retry": None})
        status, woke = dormancy.woken(o, t, now, status)
        changes: list[conditions.Cond] = [
            (st.ConditionType.READY, True, st.Reason.GENERATION_READY, f"generation {to} serves ({pod.name})"),
            (st.ConditionType.PROGRESSING, False, st.Reason.IDLE, ""),
            (st.ConditionType.SUSPENDED, False, st.Reason.ACTIVE, ""),
        ]
        degraded = status.condition(st.ConditionType.DEGRADED)
        said: tuple[p.Action, ...] = ()
        if o.drain_probe_misconfigured:
            msg = drain_probe_misconfigured_message(o)
            changes.append((st.ConditionType.DEGRADED, True, st.Reason.DRAIN_PROBE_MISCONFIGURED, msg))
            said = (p.Event("Warning", st.Reason.DRAIN_PROBE_MISCONFIGURED.value, msg),)
        elif degraded and degraded.status == "True":
            changes.append((st.ConditionType.DEGRADED, False, st.Reason.HEALTHY, f"generation {to} became Ready"))
        status = conditions.with_conditions(conditions.initial_conditions(status, o, now), o, now, *changes)
        return p.Plan(
            (p.WriteStatus(status), transitions.step_timing(t, now),
             p.Event("Normal", st.Reason.GENERATION_READY.value, f"generation {to} ({pod.name}) is Ready and serving"),
             *said, *woke),
            0, f"g{to} ready",
        )
    if t.deadline is not None and now >= t.deadline:
        return _connect_timeout(o, t, now, pod)
    return p.Plan((), transitions.remaining(t.deadline, now), f"waiting for {pod.name} Ready")


def _connect_timeout(o: obs.Observed, t: st.Transition, now: datetime.datetime, pod: obs.PodInfo) -> p.Plan:
    """The new pod missed connectSeconds (a wake: spec.idle.wakeSeconds from its start): retire it
    and back off (status.retry). A missed wake says WakeFailed and leaves the runtime idle."""
    to = t.to or 0
    attempt = (o.status.retry.attempt if o.status.retry else 0) + 1
    wake = dormancy.is_wake(o, t) and o.spec.idle is not None
    budget = (f"spec.idle.wakeSeconds={o.spec.idle.wake_seconds}" if wake and o.spec.idle is not None
              else f"connectSeconds={o.spec.budgets.connect_seconds}")
    msg = f"generation {to} ({pod.name}) not Ready within {budget} (attempt {attempt})"
    reason = st.Reason.WAKE_FAILED if wake else st.Reason.CONNECT_TIMEOUT
    new_t = transitions.retiring(o, now, kind=st.TransitionKind.RETIRE, trigger=st.Trigger.CONNECT_TIMEOUT, pod=pod,
                                 generation=to, uid=pod.uid)
    status = transitions.stamped(o, now).model_copy(update={"transition": new_t, "retry": st.Retry(attempt=attempt)})
    status = conditions.with_conditions(conditions.step_conditions(status, o, now, new_t), o, now,
                                        (st.ConditionType.DEGRADED, True, reason, msg))
    said: tuple[p.Action, ...] = (p.Event("Warning", reason.value, msg),)
    if wake:
        status, said = dormancy.wake_failed(o, t, now, status, msg)
    return p.Plan((p.WriteStatus(status), transitions.step_timing(t, now), *said,
                   p.Record(p.Metric.CONNECT_TIMEOUTS)), 0, "wake failed" if wake else "connect timeout")
