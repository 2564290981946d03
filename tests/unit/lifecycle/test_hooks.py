"""decide() with spec.hooks (issue 45): preRetire between the drain and the delete, postReady
between Ready and serving; Fail holds (CleanupFailed/Degraded HookFailed), Ignore goes on, the
gate, the retry verb, force recovery, a run resumed under a new holder's token."""

from __future__ import annotations

from typing import Any

import pytest

from baton import lifecycle
from baton.lifecycle import plan as p
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as sp
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, Rec, Unannotate, case, check_decide, step_time
from .shapes import FORCE, M, NOW, OLD_QUIET, S, at, connecting, name, retiring

pytestmark = pytest.mark.unit

RETRY = names.ANN_RETRY_HOOK
GATE = "example.com/released"
PRE, POST = st.HookName.PRE_RETIRE, st.HookName.POST_READY


def hooked(*, pre: str | None = "Fail", post: str | None = None, gate: int | None = None, call: bool = True,
           **budgets: int) -> sp.ToolRuntimeSpec:
    """The default spec with hooks: `pre`/`post` their failurePolicy (None: no such hook)."""
    def one(policy: str, with_gate: bool) -> sp.Hook:
        return sp.Hook(http_post=sp.HttpPost(path="/release", port=8080) if call else None, timeout_seconds=20,
                       failure_policy=sp.HookFailurePolicy(policy),
                       gate=sp.HookGate(annotation=GATE, timeout_seconds=gate) if with_gate and gate else None)
    return b.spec(probe=True, **budgets).model_copy(update={"hooks": sp.Hooks(
        pre_retire=one(pre, True) if pre else None, post_ready=one(post, False) if post else None)})


def run(hook: st.HookName = PRE, *, gen: int = 7, token: int = b.TOKEN, started: float = -1.0, **kw: Any) -> st.HookRun:
    return st.HookRun(hook=hook, generation=gen, started_at=at(started), fencing_token=token, **kw)


def at_hook(r: st.HookRun, **kw: Any) -> st.ToolRuntimeStatus:
    return retiring(S.PRE_RETIRE_HOOK, deadline=None, hook=r, **kw)


def answered(ok: bool, message: str) -> obs.HookAnswer:
    return obs.HookAnswer(ok=ok, message=message)


def ran(outcome: str, hook: str = "preRetire") -> list[Any]:
    """What a hook's end says and counts: the event, the outcome, the seconds."""
    reason = {"Succeeded": "HookSucceeded", "Ignored": "HookIgnored", "Failed": "HookFailed"}[outcome]
    return [Ev("Normal" if outcome == "Succeeded" else "Warning", reason),
            Rec(M.HOOK_RUNS, (("hook", hook), ("outcome", outcome))), Rec(M.HOOK_SECONDS, (("hook", hook),))]


HELD_CONDS = b.steady_conditions(7, CleanupFailed=b.cond(st.ConditionType.CLEANUP_FAILED, True, "HookFailed", "failed"))
FAILED_RUN = run(outcome=st.HookOutcome.FAILED, message="answered 500: store down")
HOOK_FAILURE = st.CleanupFailure(generation=7, pod=name(7), uid="uid-7", reason=st.Reason.HOOK_FAILED, message="x",
                                 at=at(-5))


def held_by_hook(r: st.HookRun = FAILED_RUN) -> st.ToolRuntimeStatus:
    return retiring(S.CLEANUP_FAILED, deadline=None, hook=r, last_cleanup_failure=HOOK_FAILURE, conditions=HELD_CONDS)


TERMINATE = [step_time("PreRetireHook"), *ran("Succeeded")]

PRE_RETIRE = [
    case("drained-with-a-prerretire-hook-persists-the-run-before-any-delete",
         b.observed(status_=retiring(S.DRAINING), pods=(OLD_QUIET,), spec_=hooked(), drain_idle=True,
                    desired_hash=b.HASH2),
         [WS({"transition.step": "PreRetireHook", "transition.hook.hook": PRE, "transition.hook.generation": 7,
              "transition.hook.fencing_token": b.TOKEN, "transition.hook.started_at": NOW,
              "transition.hook.outcome": None, "transition.deadline": None}),
          step_time("Draining", 10.0)], 0),
    case("a-drain-incomplete-is-said-and-kept-before-the-hook",
         b.observed(status_=retiring(S.DRAINING, deadline=-1.0), pods=(OLD_QUIET,), spec_=hooked(), drain_idle=False,
                    desired_hash=b.HASH2),
         [WS({"transition.step": "PreRetireHook", "transition.drain_incomplete": True}),
          step_time("Draining"), Ev("Warning", "DrainIncomplete"), Rec(M.DRAIN_INCOMPLETE)], 0),
    case("the-call-in-flight-is-waited-for-within-its-timeout",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2),
         [], 21.0),
    case("a-2xx-ends-it-succeeded-and-the-delete-follows-its-persisted-end",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    hook_answer=answered(True, "answered 200: released")),
         [WS({"transition.step": "Terminating", "transition.hook.outcome": "Succeeded",
              "transition.hooks[0].outcome": "Succeeded", "transition.hooks[0].seconds": 1.0,
              "transition.hooks[0].attempts": 1, "transition.deadline": at(60)}),
          *TERMINATE, p.DeletePod(name(7), "uid-7", 30)], 0),
    case("a-500-under-fail-holds-it-as-a-cleanup-failure-and-deletes-nothing",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    hook_answer=answered(False, "answered 500: store down")),
         [WS({"transition.step": "CleanupFailed", "CleanupFailed": ("True", "HookFailed"),
              "transition.hook.outcome": "Failed", "transition.hook.message": "answered 500: store down",
              "last_cleanup_failure.reason": "HookFailed", "last_cleanup_failure.generation": 7}),
          step_time("PreRetireHook"), *ran("Failed"), Rec(M.CLEANUP_FAILURES, (("reason", "HookFailed"),))], 0),
    case("a-500-under-ignore-is-recorded-and-the-retire-goes-on",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(pre="Ignore"), desired_hash=b.HASH2,
                    hook_answer=answered(False, "answered 500: store down")),
         [WS({"transition.step": "Terminating", "transition.hooks[0].outcome": "Ignored",
              "transition.hooks[0].message": "answered 500: store down"}),
          step_time("PreRetireHook"), *ran("Ignored"), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("no-answer-past-its-timeout-is-a-failure",
         b.observed(status_=at_hook(run(started=-22.5)), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2),
         [WS({"transition.step": "CleanupFailed", "transition.hook.message": "no answer within timeoutSeconds=20"}),
          step_time("PreRetireHook"), *ran("Failed"), Rec(M.CLEANUP_FAILURES, (("reason", "HookFailed"),))], 0),
    case("a-run-another-holder-left-without-an-outcome-is-called-again-under-this-token",
         b.observed(status_=at_hook(run(token=3, started=-60.0)), pods=(OLD_QUIET,), spec_=hooked(),
                    desired_hash=b.HASH2),
         [WS({"transition.step": "PreRetireHook", "transition.hook.attempts": 2,
              "transition.hook.fencing_token": b.TOKEN, "transition.hook.started_at": NOW,
              "transition.hook.generation": 7})], 0),
    case("an-answer-never-counts-while-the-run-carries-another-token",
         b.observed(status_=at_hook(run(token=3)), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    hook_answer=answered(True, "answered 200")),
         [WS({"transition.hook.attempts": 2, "transition.hook.outcome": None})], 0),
    case("the-pod-gone-before-its-call-fails-the-hook-and-is-held",
         b.observed(status_=at_hook(run()), pods=(), spec_=hooked(), desired_hash=b.HASH2),
         [WS({"transition.step": "CleanupFailed", "CleanupFailed": ("True", "HookFailed")}),
          step_time("PreRetireHook"), *ran("Failed"), Rec(M.CLEANUP_FAILURES, (("reason", "HookFailed"),))], 0),
    case("a-hook-removed-from-the-spec-meanwhile-lets-the-retire-go-on",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=b.spec(probe=True), desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating"}), step_time("PreRetireHook"), p.DeletePod(name(7), "uid-7", 30)], 0),
]

GATED = [
    case("the-call-answered-the-gate-is-waited-for-from-then",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(gate=600), desired_hash=b.HASH2,
                    hook_answer=answered(True, "answered 200")),
         [WS({"transition.step": "PreRetireHook", "transition.hook.called_at": NOW, "transition.hook.outcome": None})], 0),
    case("the-gate-waits-while-its-annotation-names-another-generation",
         b.observed(status_=at_hook(run(called_at=at(-100))), pods=(OLD_QUIET,), spec_=hooked(gate=600),
                    desired_hash=b.HASH2, annotations={GATE: "6"}),
         [], 500.0),
    case("the-gate-released-by-the-retiring-generations-number",
         b.observed(status_=at_hook(run(called_at=at(-100))), pods=(OLD_QUIET,), spec_=hooked(gate=600),
                    desired_hash=b.HASH2, annotations={GATE: "7"}),
         [WS({"transition.step": "Terminating", "transition.hooks[0].outcome": "Succeeded"}),
          *TERMINATE, p.DeletePod(name(7), "uid-7", 30)], 0),
    case("a-gate-alone-needs-no-call",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(gate=600, call=False),
                    desired_hash=b.HASH2, annotations={GATE: "7"}),
         [WS({"transition.step": "Terminating"}), *TERMINATE, p.DeletePod(name(7), "uid-7", 30)], 0),
    case("a-gate-past-its-timeout-applies-the-failure-policy",
         b.observed(status_=at_hook(run(called_at=at(-601))), pods=(OLD_QUIET,), spec_=hooked(gate=600),
                    desired_hash=b.HASH2),
         [WS({"transition.step": "CleanupFailed", "CleanupFailed": ("True", "HookFailed")}),
          step_time("PreRetireHook"), *ran("Failed"), Rec(M.CLEANUP_FAILURES, (("reason", "HookFailed"),))], 0),
]

HELD = [
    case("held-without-a-verb-waits-without-the-lease",
         b.observed(status_=held_by_hook(), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2),
         [p.ReleaseLease()], None),
    case("held-the-pod-gone-releases-nothing",
         b.observed(status_=held_by_hook(), pods=(), spec_=hooked(), desired_hash=b.HASH2),
         [p.ReleaseLease()], None),
    case("the-retry-verb-naming-the-generation-runs-it-again",
         b.observed(status_=held_by_hook(), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    annotations={RETRY: "7"}),
         [WS({"transition.step": "PreRetireHook", "transition.hook.attempts": 2, "transition.hook.outcome": None,
              "transition.hook.started_at": NOW, "CleanupFailed": ("True", "HookFailed")}),
          step_time("CleanupFailed"), Unannotate(RETRY, "7"), Ev("Normal", "HookRetried", "attempt 2")], 0),
    case("a-retried-hook-that-succeeds-ends-the-cleanup-failure-it-held",
         b.observed(status_=at_hook(run(attempts=2), last_cleanup_failure=HOOK_FAILURE, conditions=HELD_CONDS),
                    pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2, hook_answer=answered(True, "answered 200")),
         [WS({"transition.step": "Terminating", "CleanupFailed": ("False", "HookSucceeded"),
              "transition.hooks[0].attempts": 2, "last_cleanup_failure.reason": "HookFailed"}),
          *TERMINATE, p.DeletePod(name(7), "uid-7", 30)], 0),
    case("a-retry-naming-another-generation-is-stale",
         b.observed(status_=held_by_hook(), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    annotations={RETRY: "6"}),
         [Unannotate(RETRY, "6"), Ev("Warning", "StaleRetryHook", "generation 7's"),
          Rec(M.STALE_VERBS, (("verb", "retry-hook"),))], 0),
    case("force-recovery-naming-the-generation-records-it-and-retires",
         b.observed(status_=held_by_hook(), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    annotations={FORCE: "7"}),
         [WS({"transition.step": "Terminating", "transition.hooks[0].outcome": "ForceRecovered",
              "transition.forced": False, "CleanupFailed": ("False", "ForceRecovered")}),
          step_time("CleanupFailed"), Unannotate(FORCE, "7"), Ev("Normal", "ForceRecovered", "preRetire hook"),
          Rec(M.FORCE_RECOVERIES), Rec(M.HOOK_RUNS, (("hook", "preRetire"), ("outcome", "ForceRecovered"))),
          p.DeletePod(name(7), "uid-7", 30)], 0),
    case("force-recovery-naming-another-generation-is-stale",
         b.observed(status_=held_by_hook(), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    annotations={FORCE: "6"}),
         [Unannotate(FORCE, "6"), Ev("Warning", "StaleForceRecovery"), Rec(M.STALE_VERBS, (("verb", "force-recovery"),))], 0),
    case("a-retry-with-no-failed-hook-mid-transition-is-stale",
         b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                    annotations={RETRY: "7"}),
         [Unannotate(RETRY, "7"), Ev("Warning", "StaleRetryHook"), Rec(M.STALE_VERBS, (("verb", "retry-hook"),))], 0),
    case("a-retry-with-nothing-under-way-is-stale",
         b.observed(annotations={RETRY: "7"}, spec_=hooked()),
         [Unannotate(RETRY, "7"), Ev("Warning", "StaleRetryHook"), Rec(M.STALE_VERBS, (("verb", "retry-hook"),))], 0),
]

NEW = b.pod(8, ready=True, serving=False)
POST_RUN = run(POST, gen=8)


def post(r: st.HookRun | None = None, **kw: Any) -> st.ToolRuntimeStatus:
    return connecting(hook=r, **kw)


POST_READY = [
    case("ready-the-postready-run-is-persisted-before-serving",
         b.observed(status_=post(), pods=(NEW,), spec_=hooked(pre=None, post="Fail")),
         [WS({"transition.step": "Connecting", "transition.hook.hook": POST, "transition.hook.generation": 8,
              "transition.hook.started_at": NOW})], 0),
    case("its-call-in-flight-keeps-the-pod-out-of-serving",
         b.observed(status_=post(POST_RUN), pods=(NEW,), spec_=hooked(pre=None, post="Fail")),
         [], 21.0),
    case("a-2xx-persists-its-end-then-labels-it-serving",
         b.observed(status_=post(POST_RUN), pods=(NEW,), spec_=hooked(pre=None, post="Fail"),
                    hook_answer=answered(True, "answered 204")),
         [WS({"transition.hooks[0].hook": POST, "transition.hooks[0].outcome": "Succeeded"}),
          *ran("Succeeded", "postReady"), p.SetServing(name(8), "uid-8", True)], 0),
    case("a-failure-under-fail-is-degraded-hookfailed-never-serving",
         b.observed(status_=post(POST_RUN), pods=(NEW,), spec_=hooked(pre=None, post="Fail"),
                    hook_answer=answered(False, "answered 503: cache cold")),
         [WS({"Degraded": ("True", "HookFailed"), "transition.hook.outcome": "Failed"}),
          *ran("Failed", "postReady")], None),
    case("a-failure-under-ignore-serves",
         b.observed(status_=post(POST_RUN), pods=(NEW,), spec_=hooked(pre=None, post="Ignore"),
                    hook_answer=answered(False, "answered 503: cache cold")),
         [WS({"transition.hooks[0].outcome": "Ignored"}), *ran("Ignored", "postReady"),
          p.SetServing(name(8), "uid-8", True)], 0),
    case("held-failed-waits-for-a-person-without-the-lease",
         b.observed(status_=post(run(POST, gen=8, outcome=st.HookOutcome.FAILED)), pods=(NEW,),
                    spec_=hooked(pre=None, post="Fail")),
         [p.ReleaseLease()], None),
    case("held-failed-the-retry-verb-runs-it-again",
         b.observed(status_=post(run(POST, gen=8, outcome=st.HookOutcome.FAILED)), pods=(NEW,),
                    spec_=hooked(pre=None, post="Fail"), annotations={RETRY: "8"}),
         [WS({"transition.hook.attempts": 2, "transition.hook.outcome": None, "Degraded": ("False", "HookRetried")}),
          Unannotate(RETRY, "8"), Ev("Normal", "HookRetried")], 0),
    case("serving-once-ended-it-becomes-current-with-its-record",
         b.observed(status_=post(POST_RUN.model_copy(update={"outcome": st.HookOutcome.SUCCEEDED}),
                                 hooks=(st.HookRecord(hook=POST, outcome=st.HookOutcome.SUCCEEDED, seconds=0.5),)),
                    pods=(b.pod(8, ready=True, serving=True),), spec_=hooked(pre=None, post="Fail")),
         [WS({"transition": None, "current.generation": 8, "current.hooks[0].outcome": "Succeeded"}),
          step_time("Connecting"), Ev("Normal", "GenerationReady")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", PRE_RETIRE + GATED + HELD + POST_READY)
def test_hooks(o: obs.Observed, now: Any, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


def test_history_keeps_the_hooks_of_the_retired_generation() -> None:
    """The record persisted with Terminating goes into the history entry when the pod is gone."""
    record = st.HookRecord(hook=PRE, outcome=st.HookOutcome.SUCCEEDED, seconds=1.5, attempts=2)
    t = b.transition(S.AWAITING_POD_GONE, hooks=(record,))
    plan = lifecycle.decide(
        b.observed(status_=b.in_flight(t), pods=(), spec_=hooked(), desired_hash=b.HASH2), NOW)
    write = plan.find(p.WriteStatus)[0]
    assert write.status.history[-1].generation == 7
    assert write.status.history[-1].hooks == (record,)
    assert write.status.transition is not None and write.status.transition.hooks == ()


def test_a_long_answer_is_bounded_in_status() -> None:
    o = b.observed(status_=at_hook(run()), pods=(OLD_QUIET,), spec_=hooked(), desired_hash=b.HASH2,
                   hook_answer=answered(False, "answered 500: " + "é" * 1000))
    plan = lifecycle.decide(o, NOW)
    message = plan.find(p.WriteStatus)[0].status.transition.hook.message
    assert len(message.encode()) <= st.HOOK_MESSAGE_LIMIT and message.startswith("answered 500: é")
