"""Issue 43: the model check of idle and wake. GatewayModel (every rule of BatonModel and of the
gateway actors) with spec.idle on the runtime, and one more actor: the clients, who go quiet (no
call that counts; the gateway replicas' GET /v1/activity then reports idleSeconds growing) or call
again (each call at an idle runtime is held, and the replica holding it lists the runtime in its
Lease's wake demand: sim.SimGateways.activity and .wake_demand). The operator's real pass reads
both (baton.sealing) and decide() idles and wakes the runtime; the kubelet rule makes a wake's pod
never Ready (a missed wake).

Invariants, besides the inherited ones (never two pods of the runtime, no call forwarded to a pod
after its StoppingAdmission completed, every step within its budget):
- a back-off after a missed wake is bounded: status.retry.notBefore never further than
  transitions.MAX_BACKOFF_SECONDS ahead (judged each simulated second);
- a failed wake leaves no pod: whenever status says idle (idle.since set, no transition, nothing
  serving) and the world is at rest, the runtime has no pod at all (judged at the end);
- an idle runtime at rest with calls arriving is woken (the end state serves) unless the clients
  are quiet.

Budget: MODEL_IDLE_EXAMPLES (default a third of MODEL_EXAMPLES), MODEL_STEPS, MODEL_SEED.
"""

from __future__ import annotations

import os
import unittest
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import stateful
from hypothesis import strategies as hs
from hypothesis.stateful import initialize, rule

from baton.lifecycle import transitions
from baton.model import names
from baton.model import status as status_mod

from . import sim
from .test_gateway_model import GatewayModel
from .test_model import EXAMPLES, SEED, STEPS

pytestmark = [pytest.mark.model]

IDLE_EXAMPLES = int(os.environ.get("MODEL_IDLE_EXAMPLES", str(max(10, EXAMPLES // 3))))
# Short, so that examples of 40 rules idle and wake several times (the CRD's floor, 60 s, is an
# admission bound the simulated server does not apply); the wake's bound within connectSeconds, so
# the inherited step budgets hold for it.
AFTER_SECONDS = 6
WAKE_SECONDS = sim.BUDGETS["connectSeconds"] - 2


class IdleModel(GatewayModel):
    def __init__(self) -> None:
        super().__init__()
        self.quiet = False  # the clients make no call that counts
        self.idled = 0
        self.woken = 0
        self.failed = 0

    def spec(self) -> dict[str, Any]:
        spec = super().spec()
        spec["idle"] = {"afterSeconds": AFTER_SECONDS, "wakeOnRequest": True, "wakeSeconds": WAKE_SECONDS}
        return spec

    def each_second(self) -> None:
        for g in self.gateways:
            g.tick()
            if self.intruder is not None:
                self.foreign_seal_of_serving_pod(g, self.intruder)
            if not self.quiet:
                g.call()
        self.judge_backoff()

    def judge_backoff(self) -> None:
        s = self.server.status()
        if s is None or s.retry is None or s.retry.not_before is None:
            return
        ahead = (s.retry.not_before - self.clock.wall()).total_seconds()
        if ahead > transitions.MAX_BACKOFF_SECONDS + 1:
            self.server.violation(f"back-off {ahead:.0f}s ahead, past {transitions.MAX_BACKOFF_SECONDS:.0f}s")

    @initialize(quiet=hs.booleans())
    def idle_clients(self, quiet: bool) -> None:
        """Each example's clients start quiet or calling (drawn once, so that about half of the
        examples idle early whatever the rules drawn after; the rule below changes it)."""
        self.clients_quiet(quiet, 2 * AFTER_SECONDS if quiet else 0)

    @rule(quiet=hs.booleans(), seconds=hs.sampled_from([0, AFTER_SECONDS + 4, 3 * AFTER_SECONDS]))
    def clients_quiet(self, quiet: bool, seconds: int) -> None:
        """The clients stop calling (the runtime idles after afterSeconds), or call again (a held
        call wakes it); then time runs with every operator replica acting."""
        self._t("idle-quiet", quiet, seconds)
        IDLE_STATS["quiet"] += int(quiet)
        self.quiet = quiet
        if seconds:
            self.run_for(seconds)

    @rule()
    def person_wakes(self) -> None:
        """`kubectl baton wake`: the annotation, set to now."""
        self._t("idle-wake-annotation")
        at = self.clock.wall().isoformat().replace("+00:00", "Z")
        self.server.user_patch_runtime(lambda o: o["metadata"].setdefault("annotations", {}).__setitem__(names.ANN_WAKE, at))

    @rule(keep=hs.booleans())
    def keep_awake(self, keep: bool) -> None:
        self._t("idle-keep-awake", keep)

        def fn(o: dict[str, Any]) -> None:
            annotations = o["metadata"].setdefault("annotations", {})
            if keep:
                annotations[names.ANN_KEEP_AWAKE] = "true"
            else:
                annotations.pop(names.ANN_KEEP_AWAKE, None)
        self.server.user_patch_runtime(fn)

    def idle_at_rest(self, s: status_mod.ToolRuntimeStatus) -> bool:
        rt = self.server.runtime()
        idle = s.idle is not None and s.idle.since is not None and s.transition is None and s.current is None
        if not idle or rt is None or not rt["spec"].get("idle"):
            return False
        if self.server.pods():
            self.server.violation(f"idle at rest, yet pods stand: {[p['metadata']['uid'] for p in self.server.pods()]}")
        return True

    def teardown(self) -> None:
        super().teardown()
        s = self.server.status()
        self._count(s)
        if s is not None and not self.server.runtime_removed and not self.quiet and self.server.runtime() is not None:
            rt = self.server.runtime() or {}
            if not rt["spec"].get("suspend") and not rt["metadata"].get("deletionTimestamp"):
                # Clients call every second: an idle runtime is woken, whatever happened before.
                assert s.current is not None, f"clients call, yet nothing serves after healing: {s}"
        IDLE_STATS["examples"] += 1

    def _count(self, s: status_mod.ToolRuntimeStatus | None) -> None:
        if s is None:
            return
        IDLE_STATS["idled"] += sum(1 for h in s.history if h.outcome == status_mod.Outcome.IDLED.value)
        last = s.idle.last_wake if s.idle is not None else None
        if last is not None and last.outcome is not None:
            IDLE_STATS[str(last.outcome.value if hasattr(last.outcome, "value") else last.outcome)] += 1


IDLE_STATS: dict[str, int] = {"examples": 0, "quiet": 0, "idled": 0, "Woken": 0, "Failed": 0}

IDLE_SETTINGS = settings(
    max_examples=IDLE_EXAMPLES,
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

    _seed(int(SEED))(IdleModel)


class TestIdleModel(unittest.TestCase):
    def runTest(self) -> None:
        stateful.run_state_machine_as_test(IdleModel, settings=IDLE_SETTINGS)
        print(f"\nidle model: {IDLE_STATS}")


def test_the_model_idles_and_wakes() -> None:
    """The model itself can fail: quiet clients idle the runtime (its pod gone, status.idle.since
    set, history Idled), a call wakes it (a new generation serves, lastWake Woken), and a wake whose
    pod never becomes Ready is retired again with a back-off, leaving no pod."""
    m = IdleModel()
    try:
        m.start()
        m.run_for(10)
        first = m.server.status()
        assert first is not None and first.current is not None
        m.clients_quiet(True, 3 * AFTER_SECONDS)
        s = m.server.status()
        assert s is not None and s.idle is not None and s.idle.since is not None, s
        assert s.current is None and not m.server.pods() and s.history[-1].outcome == status_mod.Outcome.IDLED.value
        m.clients_quiet(False, 12)
        s = m.server.status()
        assert s is not None and s.current is not None and s.current.generation > first.current.generation, s
        assert s.idle is not None and s.idle.since is None and s.idle.last_wake is not None
        assert s.idle.last_wake.outcome == status_mod.WakeOutcome.WOKEN.value
        # A missed wake: the pod never becomes Ready.
        m.clients_quiet(True, 3 * AFTER_SECONDS)
        m.server.kubelet_broken = True
        m.clients_quiet(False, WAKE_SECONDS + 10)
        s = m.server.status()
        assert s is not None and s.idle is not None and s.idle.last_wake is not None
        assert s.idle.last_wake.outcome == status_mod.WakeOutcome.FAILED.value, s.idle
        assert s.retry is not None and s.retry.not_before is not None
        assert m.server.check_state() is None and len(m.server.pods()) <= 1
        m.quiet = True
        m.run_for(20)
        s = m.server.status()
        assert s is not None and s.idle is not None and s.idle.since is not None and s.current is None
        assert not m.server.pods(), "a failed wake leaves no pod"
        assert not m.server.violations, m.server.violations
    finally:
        m.undo()
