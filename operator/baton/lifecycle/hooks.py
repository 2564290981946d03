"""spec.hooks: preRetire (after the drain, before the old pod's delete; Step PreRetireHook) and
postReady (after the new pod is Ready, before it is labelled serving; inside Connecting).
Pure, like every decision: the call itself is baton.hooking's (the Lease holder's, on a task of
its own); its answer arrives as Observed.hook_answer for the run status.transition.hook names.

At least once: a run is persisted (status.transition.hook, with the token of the holder that
calls it) before it is called, and its outcome is persisted before the lifecycle moves on. A
holder that finds a run without an outcome under another token (the one before crashed or lost
the Lease mid-call) starts it again: same generation, its own higher token, one more attempt.

A Fail hook that failed holds its step: preRetire as a cleanup failure (Step CleanupFailed,
CleanupFailed=True reason HookFailed, status.lastCleanupFailure), postReady as Degraded=True
reason HookFailed with the new pod never serving. `baton.dev/retry-hook: "<N>"` runs it again;
a preRetire one is also released by `baton.dev/force-recovery: "<N>"` (recorded ForceRecovered).
The invariant (tests/model/test_hooks_model.py, tests/integration/test_hooks.py): generation
N+1 is never created while a Fail preRetire hook of N has neither succeeded nor been
force-recovered, because the old pod's delete (and so its confirmed gone) only follows that.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Callable

from baton.lifecycle import conditions
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st

# A run's call is bounded by timeoutSeconds in the runner; its answer may come a little later to
# decide() (a pass, a wake). Past this slack without an answer, decide() ends it as a timeout.
ANSWER_SLACK_SECONDS = 2.0


def bounded(text: str) -> str:
    """A hook's answer as status keeps it: at most HOOK_MESSAGE_LIMIT bytes of UTF-8."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= st.HOOK_MESSAGE_LIMIT:
        return text
    return raw[:st.HOOK_MESSAGE_LIMIT - 3].decode("utf-8", "ignore") + "…"


def spec_of(o: obs.Observed, hook: st.HookName) -> spec_model.Hook | None:
    return o.spec.hooks.pre_retire if hook == st.HookName.PRE_RETIRE else o.spec.hooks.post_ready


def recorded(t: st.Transition, hook: st.HookName) -> st.HookRecord | None:
    """The end of `hook` this transition recorded, if any."""
    return next((r for r in t.hooks if r.hook == hook), None)


def run_of(t: st.Transition, hook: st.HookName) -> st.HookRun | None:
    return t.hook if t.hook is not None and t.hook.hook == hook else None


def held(t: st.Transition, hook: st.HookName) -> bool:
    """A Fail hook of this transition failed and holds its step."""
    run = run_of(t, hook)
    return run is not None and run.outcome == st.HookOutcome.FAILED


def new_run(o: obs.Observed, hook: st.HookName, generation: int, now: datetime.datetime, attempts: int = 1) -> st.HookRun:
    return st.HookRun(hook=hook, generation=generation, started_at=now, attempts=attempts,
                      fencing_token=o.status.fencing_token)


def pre_retire_due(o: obs.Observed, t: st.Transition) -> bool:
    """The retire of `t` runs spec.hooks.preRetire before its delete (not yet ended here)."""
    return o.spec.hooks.pre_retire is not None and bool(t.from_) and recorded(t, st.HookName.PRE_RETIRE) is None


@dataclasses.dataclass(frozen=True)
class Waiting:
    seconds: float
    note: str
    run: st.HookRun | None = None  # the run as it must be persisted first (called, or restarted)


@dataclasses.dataclass(frozen=True)
class Ended:
    outcome: st.HookOutcome
    message: str


def _failed(hook: spec_model.Hook, message: str) -> Ended:
    fail = hook.failure_policy == spec_model.HookFailurePolicy.FAIL
    return Ended(st.HookOutcome.FAILED if fail else st.HookOutcome.IGNORED, bounded(message))


def progress(o: obs.Observed, hook: spec_model.Hook, run: st.HookRun, now: datetime.datetime,
             *, pod: obs.PodInfo | None) -> Waiting | Ended:
    """Where a run without an outcome stands: its call (httpPost), then its gate."""
    if hook.http_post is not None and run.called_at is None:
        if run.fencing_token != o.status.fencing_token:
            # Another holder began it and left no outcome: called again under our token.
            again = run.model_copy(update={"started_at": now, "attempts": run.attempts + 1,
                                           "fencing_token": o.status.fencing_token, "message": None})
            return Waiting(0, f"{st.text(run.hook)} hook of generation {run.generation} resumed: called again", again)
        if pod is None:
            return _failed(hook, f"the pod of generation {run.generation} is gone: the hook could not be called")
        answer = o.hook_answer
        if answer is None:
            left = (run.started_at - now).total_seconds() + hook.timeout_seconds + ANSWER_SLACK_SECONDS
            if left <= 0:
                return _failed(hook, f"no answer within timeoutSeconds={hook.timeout_seconds}")
            return Waiting(left, f"calling the {st.text(run.hook)} hook")
        if not answer.ok:
            return _failed(hook, answer.message)
        if hook.gate is None:
            return Ended(st.HookOutcome.SUCCEEDED, bounded(answer.message))
        called = run.model_copy(update={"called_at": now, "message": bounded(answer.message)})
        return Waiting(0, "hook answered; its gate is waited for", called)
    gate = hook.gate
    if gate is None:
        return Ended(st.HookOutcome.SUCCEEDED, run.message or "")
    value = o.annotations.get(gate.annotation)
    if value is not None and value.strip() == str(run.generation):
        return Ended(st.HookOutcome.SUCCEEDED, f"gate {gate.annotation}={run.generation} released")
    since = run.called_at or run.started_at
    left = (since - now).total_seconds() + gate.timeout_seconds
    if left <= 0:
        return _failed(hook, f"gate: annotation {gate.annotation} was not set to \"{run.generation}\" within "
                             f"gate.timeoutSeconds={gate.timeout_seconds}")
    return Waiting(left, f"waiting for the gate {gate.annotation}=\"{run.generation}\"")


def ended(run: st.HookRun, end: Ended, now: datetime.datetime) -> tuple[st.HookRun, st.HookRecord, tuple[p.Action, ...]]:
    """The run with its outcome, its record for history, and what is said and counted."""
    seconds = max(0.0, (now - run.started_at).total_seconds())
    done = run.model_copy(update={"outcome": end.outcome, "message": end.message or None})
    record = st.HookRecord(hook=run.hook, outcome=end.outcome, seconds=round(seconds, 3), attempts=run.attempts,
                           message=end.message or None)
    what = f"{st.text(run.hook)} hook of generation {run.generation}"
    said: p.Action
    if end.outcome == st.HookOutcome.SUCCEEDED:
        said = p.Event("Normal", st.Reason.HOOK_SUCCEEDED.value, f"{what} succeeded in {seconds:.1f}s"
                       + (f": {end.message}" if end.message else ""))
    elif end.outcome == st.HookOutcome.IGNORED:
        said = p.Event("Warning", st.Reason.HOOK_IGNORED.value, f"{what} failed (failurePolicy Ignore, going on): {end.message}")
    else:
        said = p.Event("Warning", st.Reason.HOOK_FAILED.value, f"{what} failed: {end.message}; {hint(run)}")
    return done, record, (said, *counted(run, end.outcome, seconds))


def counted(run: st.HookRun, outcome: st.HookOutcome, seconds: float) -> tuple[p.Action, ...]:
    hook = st.text(run.hook)
    return (p.Record(p.Metric.HOOK_RUNS, (("hook", hook), ("outcome", outcome.value))),
            p.Record(p.Metric.HOOK_SECONDS, (("hook", hook),), seconds))


def hint(run: st.HookRun) -> str:
    how = f'held: annotate {names.ANN_RETRY_HOOK}="{run.generation}" to run it again'
    if run.hook == st.HookName.PRE_RETIRE:
        how += f', or {names.ANN_FORCE_RECOVERY}="{run.generation}" to retire without it'
    return how


def failed_message(run: st.HookRun) -> str:
    return f"{st.text(run.hook)} hook of generation {run.generation} failed: {run.message or 'no answer'}; {hint(run)}"


def retry_named(o: obs.Observed, t: st.Transition | None) -> tuple[str | None, bool]:
    """The retry verb's value and whether it names a failed hook that holds `t`."""
    value = o.annotations.get(names.ANN_RETRY_HOOK)
    if value is None or t is None or t.hook is None or t.hook.outcome != st.HookOutcome.FAILED:
        return value, False
    return value, value.strip() == str(t.hook.generation)


def stale_retry(value: str, why: str) -> tuple[p.Action, ...]:
    """Refuse a retry-hook annotation that names no failed hook: remove it, say why, count it."""
    return (
        p.RemoveAnnotation(names.ANN_RETRY_HOOK, value, consumes=True),
        p.Event("Warning", st.Reason.STALE_RETRY_HOOK.value,
                f"retry-hook names generation {value!s}, but {why}: nothing touched"),
        p.Record(p.Metric.STALE_VERBS, (("verb", "retry-hook"),)),
    )


def retried(o: obs.Observed, run: st.HookRun, value: str, now: datetime.datetime) -> tuple[st.HookRun, tuple[p.Action, ...]]:
    """A failed run started again by the retry verb (its annotation consumed, said)."""
    again = st.HookRun(hook=run.hook, generation=run.generation, started_at=now, attempts=run.attempts + 1,
                       fencing_token=o.status.fencing_token)
    return again, (
        p.RemoveAnnotation(names.ANN_RETRY_HOOK, value),
        p.Event("Normal", st.Reason.HOOK_RETRIED.value,
                f"{st.text(run.hook)} hook of generation {run.generation} run again (attempt {again.attempts}) "
                f"by annotation {names.ANN_RETRY_HOOK}={value}"),
    )


# What comes after the preRetire hook (retire's delete, or the record of a pod already gone),
# given by the caller: retire imports this module, not the other way round.
Then = Callable[[obs.Observed, st.Transition, datetime.datetime, tuple[p.Action, ...]], p.Plan]


# --- preRetire ------------------------------------------------------------------------------------


def start_pre_retire(o: obs.Observed, t: st.Transition, drained: st.Transition, now: datetime.datetime, *,
                     extra: tuple[p.Action, ...]) -> p.Plan:
    """The drain ended (`drained`: `t` with what it left for the history entry): persist the
    preRetire run (Step PreRetireHook) before it is called."""
    run = new_run(o, st.HookName.PRE_RETIRE, t.from_ or 0, now)
    return transitions.advance(o, drained, now, st.Step.PRE_RETIRE_HOOK, deadline=None, extra=extra, hook=run)


def pre_retire(o: obs.Observed, t: st.Transition, now: datetime.datetime, *, then: Then) -> p.Plan:
    """Step PreRetireHook: call, then gate; its end persisted with the next step (`then`: the
    delete, or the record of a pod already gone), or, failed under Fail, held as CleanupFailed."""
    hook = o.spec.hooks.pre_retire
    run = run_of(t, st.HookName.PRE_RETIRE)
    old = o.pod_by_uid(t.from_uid)
    if hook is None:
        # The hook was removed from the spec meanwhile: nothing left to run.
        return then(o, t.model_copy(update={"hook": None}), now, ())
    if run is None or run.outcome is not None:
        return _persist(o, t, now, new_run(o, st.HookName.PRE_RETIRE, t.from_ or 0, now), "preRetire hook started")
    got = progress(o, hook, run, now, pod=old)
    if isinstance(got, Waiting):
        if got.run is not None:
            return _persist(o, t, now, got.run, got.note)
        return p.Plan((), got.seconds, got.note)
    done, record, said = ended(run, got, now)
    if got.outcome == st.HookOutcome.FAILED:
        return _hold_pre_retire(o, t.model_copy(update={"hook": done}), now, old, said)
    if conditions.condition_true(o.status, st.ConditionType.CLEANUP_FAILED) and run.attempts > 1:
        # A retried hook that succeeds ends the failure it held (kept until now).
        c = o.status.condition(st.ConditionType.CLEANUP_FAILED)
        if c is not None and c.reason == st.Reason.HOOK_FAILED.value:
            o = o.model_copy(update={"status": conditions.with_conditions(o.status, o, now, (
                st.ConditionType.CLEANUP_FAILED, False, st.Reason.HOOK_SUCCEEDED,
                f"preRetire hook of generation {run.generation} ended {got.outcome.value} (attempt {run.attempts})"))})
    return then(o, t.model_copy(update={"hook": done, "hooks": (*t.hooks, record)[-st.HOOK_RECORDS_LIMIT:]}), now, said)


def _persist(o: obs.Observed, t: st.Transition, now: datetime.datetime, run: st.HookRun, note: str) -> p.Plan:
    status = transitions.stamped(o, now).model_copy(update={"transition": t.model_copy(update={"hook": run})})
    return p.Plan((p.WriteStatus(status),), 0, note)


def _hold_pre_retire(o: obs.Observed, t: st.Transition, now: datetime.datetime, old: obs.PodInfo | None,
                     said: tuple[p.Action, ...]) -> p.Plan:
    """Held exactly like a cleanup failure: Step CleanupFailed, the condition, the record."""
    run = t.hook
    assert run is not None
    msg = failed_message(run)
    failure = st.CleanupFailure(generation=run.generation, pod=old.name if old else (t.from_pod or ""),
                                uid=old.uid if old else (t.from_uid or ""), reason=st.Reason.HOOK_FAILED,
                                message=msg, at=now)
    plan = transitions.advance(
        o, t, now, st.Step.CLEANUP_FAILED, deadline=None,
        also_conditions=((st.ConditionType.CLEANUP_FAILED, True, st.Reason.HOOK_FAILED, msg),),
        extra=(*said, p.Record(p.Metric.CLEANUP_FAILURES, (("reason", st.Reason.HOOK_FAILED.value),))),
    )
    write = plan.actions[0]
    assert isinstance(write, p.WriteStatus)
    with_failure = p.WriteStatus(write.status.model_copy(update={"last_cleanup_failure": failure}))
    return dataclasses.replace(plan, actions=(with_failure, *plan.actions[1:]), note="preRetire hook failed: held")


def held_pre_retire(o: obs.Observed, t: st.Transition, now: datetime.datetime, *, then: Then) -> p.Plan:
    """CleanupFailed held by a failed preRetire hook: the retry verb runs it again, a force
    recovery naming its generation lets the retire go on (recorded ForceRecovered); other
    values are refused as stale. The pod going away releases nothing: what the hook was to
    release outside the cluster is still held."""
    run = t.hook
    assert run is not None
    retry, named = retry_named(o, t)
    if retry is not None:
        if not named:
            return p.Plan(stale_retry(retry, f"the failed hook is generation {run.generation}'s"), 0, "stale retry-hook")
        again, said = retried(o, run, retry, now)
        # CleanupFailed stays True (the failure is kept) until the hook succeeds.
        return transitions.advance(o, t, now, st.Step.PRE_RETIRE_HOOK, deadline=None, hook=again, extra=said)
    force = o.annotations.get(names.ANN_FORCE_RECOVERY)
    if force is not None:
        if force.strip() != str(run.generation):
            return p.Plan((
                p.RemoveAnnotation(names.ANN_FORCE_RECOVERY, force, consumes=True),
                p.Event("Warning", st.Reason.STALE_FORCE_RECOVERY.value,
                        f"force-recovery names generation {force!s}, but the failed hook is generation "
                        f"{run.generation}'s: nothing touched"),
                p.Record(p.Metric.STALE_VERBS, (("verb", "force-recovery"),)),
            ), 0, "stale force-recovery")
        msg = (f"preRetire hook of generation {run.generation} abandoned by annotation "
               f"{names.ANN_FORCE_RECOVERY}={force}; the retire goes on")
        seconds = max(0.0, (now - run.started_at).total_seconds())
        done = run.model_copy(update={"outcome": st.HookOutcome.FORCE_RECOVERED})
        record = st.HookRecord(hook=run.hook, outcome=st.HookOutcome.FORCE_RECOVERED, seconds=round(seconds, 3),
                               attempts=run.attempts, message=bounded(run.message or "") or None)
        forced: tuple[p.Action, ...] = (
            p.RemoveAnnotation(names.ANN_FORCE_RECOVERY, force),
            p.Event("Normal", st.Reason.FORCE_RECOVERED.value, msg),
            p.Record(p.Metric.FORCE_RECOVERIES),
            p.Record(p.Metric.HOOK_RUNS, (("hook", st.text(run.hook)), ("outcome", st.HookOutcome.FORCE_RECOVERED.value))),
        )
        cleared = o.model_copy(update={"status": _clean(o, now, msg)})
        return then(cleared, t.model_copy(update={"hook": done, "hooks": (*t.hooks, record)[-st.HOOK_RECORDS_LIMIT:]}),
                    now, forced)
    return p.Plan((p.ReleaseLease(),), None, "preRetire hook failed: held for a person")


def _clean(o: obs.Observed, now: datetime.datetime, msg: str) -> st.ToolRuntimeStatus:
    return conditions.with_conditions(o.status, o, now, (st.ConditionType.CLEANUP_FAILED, False,
                                                         st.Reason.FORCE_RECOVERED, msg))


# --- postReady ------------------------------------------------------------------------------------


def post_ready(o: obs.Observed, t: st.Transition, now: datetime.datetime, pod: obs.PodInfo) -> p.Plan | None:
    """Connecting, the new pod Ready and not yet serving: the postReady hook first. None when
    there is none, or it ended (Succeeded, Ignored) and that end is persisted: label it serving."""
    hook = o.spec.hooks.post_ready
    to = t.to or 0
    if hook is None or recorded(t, st.HookName.POST_READY) is not None:
        return None
    run = run_of(t, st.HookName.POST_READY)
    if run is not None and run.generation != to:
        run = None  # a run of another generation (this one's number was given up): started anew
    if run is None:
        return _persist(o, t, now, new_run(o, st.HookName.POST_READY, to, now), "postReady hook started")
    if run.outcome == st.HookOutcome.FAILED:
        retry, named = retry_named(o, t)
        if retry is None:
            return p.Plan((), None, "postReady hook failed: held for a person")
        if not named:
            return p.Plan(stale_retry(retry, f"the failed hook is generation {run.generation}'s"), 0, "stale retry-hook")
        again, said = retried(o, run, retry, now)
        status = transitions.stamped(o, now).model_copy(update={"transition": t.model_copy(update={"hook": again})})
        status = conditions.with_conditions(status, o, now, (st.ConditionType.DEGRADED, False, st.Reason.HOOK_RETRIED,
                                                             f"postReady hook of generation {to} is run again"))
        return p.Plan((p.WriteStatus(status), *said), 0, "postReady hook retried")
    if run.outcome is not None:
        return _persist(o, t, now, new_run(o, st.HookName.POST_READY, to, now), "postReady hook started")
    got = progress(o, hook.model_copy(update={"gate": None}), run, now, pod=pod)
    if isinstance(got, Waiting):
        if got.run is not None:
            return _persist(o, t, now, got.run, got.note)
        return p.Plan((), got.seconds, got.note)
    done, record, said = ended(run, got, now)
    if got.outcome == st.HookOutcome.FAILED:
        status = transitions.stamped(o, now).model_copy(update={"transition": t.model_copy(update={"hook": done})})
        status = conditions.with_conditions(status, o, now, (st.ConditionType.DEGRADED, True, st.Reason.HOOK_FAILED,
                                                             failed_message(done)))
        return p.Plan((p.WriteStatus(status), *said), None, "postReady hook failed: held")
    new_t = t.model_copy(update={"hook": done, "hooks": (*t.hooks, record)[-st.HOOK_RECORDS_LIMIT:]})
    status = transitions.stamped(o, now).model_copy(update={"transition": new_t})
    # The end persisted first, then (same plan, after the write) the label that admits calls.
    return p.Plan((p.WriteStatus(status), *said, p.SetServing(pod.name, pod.uid, True)), 0, "postReady hook ended: serve")
