"""The executor sends a plan's consecutive claim-phase writes together, everything else in order."""
from __future__ import annotations

from baton import execute
from baton.lifecycle import plan as p


def _phase(name: str) -> p.SetClaimPhase:
    return p.SetClaimPhase(name, f"uid-{name}", "Bound", "generation 1 exists")


def test_runs_of_claim_phases_become_one_group_and_order_is_kept() -> None:
    acquire, release = p.AcquireLease(token=3), p.ReleaseLease()
    a, b, c = _phase("a"), _phase("b"), _phase("c")
    assert execute._claim_phases_together((acquire, a, b, release, c)) == [acquire, (a, b), release, (c,)]
    assert execute._claim_phases_together((acquire, release)) == [acquire, release]
    assert execute._claim_phases_together(()) == []
