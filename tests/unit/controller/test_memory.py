"""What a plan's Outcome changes in the pass's Memory (reconcile.Memory.fold): what the plan did
not learn is kept; a plan that ran through clears the error and the pod rejection."""
from __future__ import annotations

import datetime

from baton import execute, metrics, reconcile

T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def _remembering() -> reconcile.Memory:
    return reconcile.Memory(lock_wait_since=T0, last_error="500 InternalError: etcd", pod_rejected="422 Invalid: x",
                            name_taken=True, service_taken=True)


def test_an_outcome_that_learnt_nothing_keeps_the_memory() -> None:
    memory = _remembering()
    memory.fold(execute.Outcome(ok=False))
    assert memory == _remembering()


def test_a_plan_that_ran_through_clears_the_error_and_the_rejection_and_keeps_the_rest() -> None:
    memory = _remembering()
    memory.fold(execute.Outcome(ran_through=True, name_taken=False))
    assert (memory.last_error, memory.pod_rejected, memory.name_taken, memory.service_taken) == (None, None, False, True)
    assert memory.lock_wait_since == T0


def test_what_a_failed_plan_learnt_is_remembered() -> None:
    memory = reconcile.Memory()
    memory.fold(execute.Outcome(ok=False, last_error="429 TooManyRequests: slow down", service_taken=True, reads=2))
    memory.fold(execute.Outcome(ok=False, pod_rejected="403 Forbidden: quota", reads=1))
    assert (memory.last_error, memory.pod_rejected, memory.service_taken) == (
        "429 TooManyRequests: slow down", "403 Forbidden: quota", True)
    assert memory.snapshot.reads == 3


def test_the_lock_wait_ends_when_the_lease_is_acquired_and_is_observed_once() -> None:
    def observed() -> float:
        return metrics.REGISTRY.get_sample_value("baton_lock_wait_seconds_count") or 0.0
    before = observed()
    memory = reconcile.Memory(lock_wait_since=T0)
    memory.fold(execute.Outcome(lease_acquired_at=T0 + datetime.timedelta(seconds=4)))
    assert memory.lock_wait_since is None and observed() - before == 1
    memory.fold(execute.Outcome(lease_acquired_at=T0 + datetime.timedelta(seconds=9)))  # no wait: nothing observed
    assert observed() - before == 1


def test_a_create_in_doubt_and_the_tokens_acquired_here_are_remembered() -> None:
    """Invariant 2: the number of a create with no definite answer, kept past a plan that ran
    through (it stays in doubt); this process's last few fencing tokens."""
    memory = reconcile.Memory()
    memory.fold(execute.Outcome(ok=False, last_error="TimeoutError: no answer", create_in_doubt=8))
    memory.fold(execute.Outcome(ran_through=True))
    assert memory.create_in_doubt == 8
    for token in range(1, 8):
        memory.fold(execute.Outcome(lease_acquired_at=T0, lease_token=token))
    assert memory.tokens_here == (4, 5, 6, 7) and len(memory.tokens_here) == reconcile.TOKENS_KEPT
