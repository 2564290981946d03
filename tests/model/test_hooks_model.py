"""Issue 45: the model check of hooks. BatonModel (3 replicas, crashes and restarts between any two
passes, pauses, lagging watches, late requests, foreign actors) with a Fail preRetire hook on the
runtime, its calls answered by the simulated hook receiver (sim.HookCaller through the real
baton.hooking runner): it answers 500 or 200 as a rule decides, and a person may retry the hook
(baton.dev/retry-hook), force-recover it, or name a stale generation.

Invariant: generation N's pod is deleted by Baton (and so N+1 started, which needs N confirmed
gone) only after a call of N's preRetire hook was answered 2xx, or after a person named N in
baton.dev/force-recovery. A crash after the call and before its outcome is persisted leaves a
run without an outcome: the next holder calls it again (the receiver sees a second call for the
same generation, with a token at least as high).

Budget: MODEL_HOOKS_EXAMPLES (default a third of MODEL_EXAMPLES), MODEL_STEPS, MODEL_SEED.
"""

from __future__ import annotations

import os
import unittest
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import stateful
from hypothesis import strategies as hs
from hypothesis.stateful import rule

from baton.model import names
from baton.model import status as status_mod

from . import sim
from .test_model import EXAMPLES, SEED, STEPS, BatonModel

pytestmark = [pytest.mark.model]

HOOKS_EXAMPLES = int(os.environ.get("MODEL_HOOKS_EXAMPLES", str(max(10, EXAMPLES // 3))))
HOOK_STATS: dict[str, int] = {"examples": 0, "calls": 0, "failed_calls": 0, "held": 0, "retried": 0,
                              "force_recovered": 0, "deletes_checked": 0}


class HooksModel(BatonModel):
    def __init__(self) -> None:
        super().__init__()
        self.forced: set[int] = set()  # generations a person named in baton.dev/force-recovery
        # The receiver fails until a rule heals it: most examples see a held handoff.
        self.server.hook_ok = False
        self.retries = 0
        patch: Callable[[Callable[[dict[str, Any]], None]], None] = self.server.user_patch_runtime
        check_delete: Callable[[dict[str, Any]], None] = self.server._check_delete

        def patched(fn: Callable[[dict[str, Any]], None]) -> None:
            patch(fn)
            rt = self.server.runtime()
            value = ((rt or {}).get("metadata", {}).get("annotations") or {}).get(names.ANN_FORCE_RECOVERY)
            if value is not None and value.strip().isdigit():
                self.forced.add(int(value))

        def checked(pod: dict[str, Any]) -> None:
            check_delete(pod)
            self.hook_invariant(pod)

        self.server.user_patch_runtime = patched  # type: ignore[method-assign]
        self.server._check_delete = checked  # type: ignore[method-assign]

    def spec(self) -> dict[str, Any]:
        spec = sim.base_spec()
        spec["hooks"] = {"preRetire": {"httpPost": {"path": "/release", "port": 8080}, "timeoutSeconds": 3,
                                       "failurePolicy": "Fail"}}
        return spec

    def hook_invariant(self, pod: dict[str, Any]) -> None:
        """Baton deletes generation N's pod only after N's preRetire hook was answered 2xx, or a
        person named N in a force recovery."""
        rt = self.server.runtime()
        if rt is None or not ((rt["spec"].get("hooks") or {}).get("preRetire")):
            return
        gen = int((pod["metadata"].get("labels") or {}).get(names.LABEL_GENERATION) or 0)
        HOOK_STATS["deletes_checked"] += 1
        succeeded = any(g == gen and ok for g, _token, hook, ok in self.server.hook_calls if hook == "preRetire")
        if not succeeded and gen not in self.forced:
            self.server.violation(f"{self.server.sender}: deleted generation {gen}'s pod while its Fail preRetire "
                                  f"hook had neither succeeded nor been force-recovered (calls: {self.server.hook_calls})")

    @rule(ok=hs.booleans())
    def hook_receiver(self, ok: bool) -> None:
        """The external system behind the hook answers 200, or 500."""
        self._t("hook-receiver", ok)
        self.server.hook_ok = ok

    @rule(stale=hs.booleans())
    def retry_hook(self, stale: bool) -> None:
        """`kubectl baton retry`: the failed hook's generation, or a stale one."""
        s = self.server.status()
        hook = s.transition.hook if s is not None and s.transition is not None else None
        gen = hook.generation if hook is not None else 1
        value = str(gen + 1 if stale else gen)
        self._t("retry-hook", stale)
        self.retries += 1
        self.server.user_patch_runtime(
            lambda rt: rt["metadata"].setdefault("annotations", {}).__setitem__(names.ANN_RETRY_HOOK, value))

    def teardown(self) -> None:
        self.server.hook_ok = True  # healed: a held hook is answered by the person's force recovery or a retry
        super().teardown()
        calls = self.server.hook_calls
        HOOK_STATS["calls"] += len(calls)
        HOOK_STATS["failed_calls"] += sum(1 for c in calls if not c[3])
        HOOK_STATS["retried"] += self.retries
        HOOK_STATS["force_recovered"] += len(self.forced)
        HOOK_STATS["held"] += sum(1 for r in self.server.event_reasons if r == status_mod.Reason.HOOK_FAILED.value)
        HOOK_STATS["examples"] += 1


HOOKS_SETTINGS = settings(
    max_examples=HOOKS_EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate] if os.environ.get("MODEL_NO_SHRINK") else list(Phase),
)
if SEED is not None:
    from hypothesis import seed as _seed

    _seed(int(SEED))(HooksModel)


class TestHooksModel(unittest.TestCase):
    def runTest(self) -> None:
        stateful.run_state_machine_as_test(HooksModel, settings=HOOKS_SETTINGS)
        print(f"\nhooks model: {HOOK_STATS}")
        assert HOOK_STATS["calls"] > 0 and HOOK_STATS["failed_calls"] > 0, HOOK_STATS


def test_the_model_holds_a_failed_hook_and_can_fail() -> None:
    """The model itself can fail: a 500 holds the handoff (CleanupFailed HookFailed, no delete, no
    new pod), a retry after the receiver healed lets it go on; a crash between the call and the
    persisted outcome calls it again; and a delete without a succeeded hook is a violation."""
    m = HooksModel()
    try:
        m.start()
        m.run_for(6)
        first = m.server.status()
        assert first is not None and first.current is not None
        m.server.hook_ok = False
        m.template_changes()
        m.run_for(20)
        s = m.server.status()
        assert s is not None and s.transition is not None and s.transition.step == status_mod.Step.CLEANUP_FAILED, s
        cond = s.condition(status_mod.ConditionType.CLEANUP_FAILED)
        assert cond is not None and cond.reason == "HookFailed", cond
        assert len(m.server.pods()) == 1 and not m.server.violations
        m.server.hook_ok = True
        m.server.user_patch_runtime(lambda rt: rt["metadata"].setdefault("annotations", {}).__setitem__(
            names.ANN_RETRY_HOOK, str(first.current.generation if first.current else 1)))
        m.run_for(20)
        s = m.server.status()
        assert s is not None and s.current is not None and s.current.generation > first.current.generation, s
        [entry] = [h for h in s.history if h.generation == first.current.generation]
        assert entry.hooks and entry.hooks[0].outcome == status_mod.HookOutcome.SUCCEEDED.value, entry
        assert not m.server.violations, m.server.violations
        # The invariant bites: a delete of a generation with no succeeded call is reported.
        pod = {"metadata": {"labels": {names.LABEL_GENERATION: "99"}, "uid": "u"}}
        m.hook_invariant(pod)
        assert any("generation 99" in v for v in m.server.violations)
    finally:
        m.undo()


def test_a_crash_before_the_outcome_is_persisted_calls_the_hook_again() -> None:
    """The holder calls, then dies before the pass that persists the answer: the next holder
    calls again for the same generation under a higher token, and only then deletes."""
    m = HooksModel()
    try:
        m.start()
        m.run_for(6)
        first = m.server.status()
        assert first is not None and first.current is not None
        gen = first.current.generation
        m.server.hook_ok = True
        m.template_changes()
        # Step the replicas until one of them has called the hook, then crash it at once.
        caller = None
        for _ in range(60):
            for r in m.replicas:
                r.step()
                if m.server.hook_calls:
                    caller = r
                    break
            if caller is not None:
                break
            m.advance(1)
        assert caller is not None and len(m.server.hook_calls) == 1, m.server.hook_calls
        s = m.server.status()
        assert s is not None and s.transition is not None and s.transition.hook is not None
        assert s.transition.hook.outcome is None, "the answer was persisted in the same pass"
        caller.restart()  # a crash: the answer, kept in memory only, is lost
        m.advance(sim.LEASE_SECONDS + 2)
        m.run_for(20)
        calls = [c for c in m.server.hook_calls if c[0] == gen]
        assert len(calls) >= 2, m.server.hook_calls
        assert calls[-1][1] > calls[0][1], f"called again under token {calls[-1][1]}, first under {calls[0][1]}"
        s = m.server.status()
        assert s is not None and s.current is not None and s.current.generation > gen, s
        assert not m.server.violations, m.server.violations
    finally:
        m.undo()
