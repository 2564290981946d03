"""Which passes the per-runtime pass budget charges: those that act without taking the lifecycle
a step on (reconcile.moves_forward is False)."""
from __future__ import annotations

from baton import reconcile
from baton.lifecycle import plan
from baton.model import status

from .. import builders

Step = status.Step


def test_a_new_step_a_new_transition_or_a_new_generation_moves_forward() -> None:
    draining = builders.in_flight(builders.transition(Step.DRAINING))
    terminating = builders.in_flight(builders.transition(Step.TERMINATING))
    steady = builders.status(gen=7)
    assert reconcile.moves_forward(draining, plan.Plan((plan.WriteStatus(terminating),)))
    assert reconcile.moves_forward(steady, plan.Plan((plan.WriteStatus(draining),)))      # a transition begins
    assert reconcile.moves_forward(draining, plan.Plan((plan.WriteStatus(builders.status(gen=8)),)))  # it ends
    assert reconcile.moves_forward(steady, plan.Plan((plan.WriteStatus(builders.status(gen=8)),)))


def test_creating_or_deleting_a_pod_moves_forward() -> None:
    steady = builders.status(gen=7)
    assert reconcile.moves_forward(steady, plan.Plan((plan.DeletePod("rt", "uid-7", 1),)))
    assert reconcile.moves_forward(steady, plan.Plan((plan.ForceDeletePod("rt", "uid-7"),)))


def test_rewriting_the_same_step_or_only_labels_and_leases_is_charged() -> None:
    draining = builders.in_flight(builders.transition(Step.DRAINING))
    again = builders.in_flight(builders.transition(Step.DRAINING, step_started=-1.0), conditions=draining.conditions)
    assert not reconcile.moves_forward(draining, plan.Plan((plan.WriteStatus(again),)))
    assert not reconcile.moves_forward(draining, plan.Plan((plan.SetServing("rt", "uid-7", False),)))
    assert not reconcile.moves_forward(draining, plan.Plan((plan.AcquireLease(token=4), plan.ReleaseLease())))
