"""Which passes the per-runtime pass budget charges: those that act without taking the lifecycle
a step on (runner.moves_forward is False)."""
from __future__ import annotations

from baton import runner
from baton.lifecycle import plan as p
from baton.model import status as st

from . import builders as b

S = st.Step


def test_a_new_step_a_new_transition_or_a_new_generation_moves_forward() -> None:
    draining = b.in_flight(b.transition(S.DRAINING))
    terminating = b.in_flight(b.transition(S.TERMINATING))
    steady = b.status(gen=7)
    assert runner.moves_forward(draining, p.Plan((p.WriteStatus(terminating),)))
    assert runner.moves_forward(steady, p.Plan((p.WriteStatus(draining),)))      # a transition begins
    assert runner.moves_forward(draining, p.Plan((p.WriteStatus(b.status(gen=8)),)))  # it ends
    assert runner.moves_forward(steady, p.Plan((p.WriteStatus(b.status(gen=8)),)))


def test_creating_or_deleting_a_pod_moves_forward() -> None:
    steady = b.status(gen=7)
    assert runner.moves_forward(steady, p.Plan((p.DeletePod("rt", "uid-7", 1),)))
    assert runner.moves_forward(steady, p.Plan((p.ForceDeletePod("rt", "uid-7"),)))


def test_rewriting_the_same_step_or_only_labels_and_leases_is_charged() -> None:
    draining = b.in_flight(b.transition(S.DRAINING))
    again = b.in_flight(b.transition(S.DRAINING, step_started=-1.0), conditions=draining.conditions)
    assert not runner.moves_forward(draining, p.Plan((p.WriteStatus(again),)))
    assert not runner.moves_forward(draining, p.Plan((p.SetServing("rt", "uid-7", False),)))
    assert not runner.moves_forward(draining, p.Plan((p.AcquireLease(token=4), p.ReleaseLease())))
