"""The executor sends a plan's consecutive claim-phase writes together, everything else in order."""
from __future__ import annotations

from baton.execute import executor
from baton.lifecycle import plan


def _phase(name: str) -> plan.SetClaimPhase:
    return plan.SetClaimPhase(name, f"uid-{name}", "Bound", "generation 1 exists")


def test_runs_of_claim_phases_become_one_group_and_order_is_kept() -> None:
    acquire, release = plan.AcquireLease(token=3), plan.ReleaseLease()
    a, b, c = _phase("a"), _phase("b"), _phase("c")
    assert executor.claim_phases_together((acquire, a, b, release, c)) == [acquire, (a, b), release, (c,)]
    assert executor.claim_phases_together((acquire, release)) == [acquire, release]
    assert executor.claim_phases_together(()) == []
