"""The executor's plan loop: actions in order, stopping at the first failure, and what each way
of stopping comes to as an Outcome (the pass folds it into its memory). Faked at Baton's own
adapter boundary (baton.k8s)."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from baton import clock, faults
from baton.execute import executor, leasekeeper, outcomes
from baton.k8s import api, claims, pods, runtimes
from baton.lifecycle import plan

from .. import builders
from . import fakes

KEY = (builders.NS, builders.RT)
GEN = 8
POD = {"metadata": {"name": builders.RT, "namespace": builders.NS, "labels": {"baton.dev/generation": str(GEN)}}}


def _executor(manual: clock.Manual) -> executor.Executor:
    return executor.Executor(identity=builders.ME, lease_seconds=15, views=fakes.new_views(), clock=manual,
                             faults=faults.Faults())


def _run(ex: executor.Executor, *actions: plan.Action) -> tuple[outcomes.Outcome, list[bool]]:
    woken: list[bool] = []
    outcome = asyncio.run(ex.execute(fakes.snap(), plan.Plan(actions), lambda: woken.append(True)))
    return outcome, woken


def _hold(ex: executor.Executor) -> None:
    ex.leases.held[KEY] = leasekeeper.HeldLease(token=3, duration=15, renewed=ex.clock.monotonic())


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the finalizer patches and pod creates sent; a test makes them fail as it needs."""
    calls: list[str] = []

    async def patch_runtime_finalizers(namespace: str, name: str, finalizers: list[str], rv: str) -> dict[str, Any]:
        calls.append(f"finalizers {finalizers}")
        return {**fakes.snap().runtime, "metadata": {**fakes.snap().runtime["metadata"], "finalizers": finalizers}}

    monkeypatch.setattr(runtimes, "patch_runtime_finalizers", patch_runtime_finalizers)
    return calls


def _create_fails(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    async def create_pod(namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        raise error
    monkeypatch.setattr(pods, "create_pod", create_pod)


def test_a_plan_that_runs_through_clears_the_last_error_and_the_pod_rejection() -> None:
    outcome, woken = _run(_executor(fakes.new_clock()), plan.Record(plan.Metric.POD_REJECTIONS))
    assert (outcome.ok, outcome.again_now, outcome.ran_through, outcome.last_error) == (True, False, True, None)
    assert not woken


def test_an_empty_plan_learns_nothing() -> None:
    outcome, _ = _run(_executor(fakes.new_clock()))
    assert outcome == outcomes.Outcome()


@pytest.mark.parametrize(("error", "ok", "last_error", "pod_rejected", "name_taken", "in_doubt"), [
    # AlreadyExists: the API server kept the one name; the next pass reads it fresh.
    (api.ApiError(409, "AlreadyExists", "pods \"x\" already exists"), True, None, None, True, None),
    # Refused for good as sent: recorded by decide(), quoting the API server.
    (api.ApiError(422, "Invalid", "spec.containers: Required value"), False, None,
     "422 Invalid: spec.containers: Required value", None, None),
    (api.ApiError(403, "Forbidden", "exceeded quota"), False, None, "403 Forbidden: exceeded quota", None, None),
    # Transient and definite (not done): an error, backed off, the number kept.
    (api.ApiError(429, "TooManyRequests", "slow down"), False, "429 TooManyRequests: slow down", None, None, None),
    # No definite answer: the create may still land, its number is in doubt (given up by decide()).
    (api.ApiError(500, "InternalError", "etcd"), False, "500 InternalError: etcd", None, None, GEN),
    (ConnectionError("reset"), False, "ConnectionError: reset", None, None, GEN),
    (TimeoutError("no answer"), False, "TimeoutError: no answer", None, None, GEN),
])
def test_a_pod_create_refused_comes_back_as_the_outcome(
        sent: list[str], monkeypatch: pytest.MonkeyPatch, error: Exception, ok: bool, last_error: str | None,
        pod_rejected: str | None, name_taken: bool | None, in_doubt: int | None) -> None:
    _create_fails(monkeypatch, error)
    ex = _executor(fakes.new_clock())
    _hold(ex)
    outcome, _ = _run(ex, plan.CreatePod(POD), plan.AddFinalizer())
    assert (outcome.ok, outcome.last_error, outcome.pod_rejected, outcome.name_taken, outcome.create_in_doubt) == (
        ok, last_error, pod_rejected, name_taken, in_doubt)
    assert outcome.ran_through is ok and not outcome.again_now
    assert bool(sent) is ok  # stopped at the first failure; a refusal by name is not one


def test_a_pod_change_without_a_fresh_lease_is_refused_before_anything_is_sent(
        sent: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _create_fails(monkeypatch, AssertionError("never sent"))
    manual = fakes.new_clock()
    ex = _executor(manual)
    _hold(ex)
    manual.t = 13.0  # past duration - margin (15 - 3)
    outcome, _ = _run(ex, plan.AddFinalizer(), plan.CreatePod(POD), plan.AddFinalizer())
    assert (outcome.ok, outcome.last_error, outcome.ran_through) == (False, None, False)
    assert len(sent) == 1  # the action before it ran; none after it


def test_a_write_superseded_asks_to_decide_again_at_once_without_an_error(
        sent: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    async def read_pod(namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": "pod-uid-9",
                             "ownerReferences": [{"uid": builders.RT_UID, "controller": True}]}}
    monkeypatch.setattr(pods, "read_pod", read_pod)
    outcome, woken = _run(_executor(fakes.new_clock()), plan.ConfirmNoPod(builders.RT), plan.AddFinalizer())
    assert (outcome.ok, outcome.again_now, outcome.ran_through) == (True, True, False)
    assert (outcome.name_taken, outcome.reads, outcome.last_error) == (True, 1, None)
    assert not sent and not woken  # the pass wakes the runtime, not the executor


def test_claim_phases_not_written_never_fail_the_plan(monkeypatch: pytest.MonkeyPatch, sent: list[str]) -> None:
    async def patch_claim_status(namespace: str, name: str, *, uid: str, status_patch: dict[str, Any]) -> None:
        raise ConnectionError("reset")
    monkeypatch.setattr(claims, "patch_claim_status", patch_claim_status)
    phases = [plan.SetClaimPhase(f"c{i}", f"uid-{i}", "Bound", "") for i in range(3)]
    outcome, _ = _run(_executor(fakes.new_clock()), *phases, plan.AddFinalizer())
    assert outcome.ok and outcome.ran_through and sent


def test_a_lease_free_plan_deletes_pods_without_the_lease_but_never_creates_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    deleted: list[str] = []

    async def delete_pod(namespace: str, name: str, uid: str, grace_seconds: int) -> None:
        deleted.append(uid)
    monkeypatch.setattr(pods, "delete_pod", delete_pod)
    ex = _executor(fakes.new_clock())
    delete = plan.DeletePod(pod=builders.RT, uid="uid-7", grace_seconds=1)
    fenced = asyncio.run(ex.execute(fakes.snap(), plan.Plan((delete,)), lambda: None))
    assert not fenced.ok and deleted == [], "without the Lease and not lease_free: refused"
    freed = asyncio.run(ex.execute(fakes.snap(), plan.Plan((delete,), lease_free=True), lambda: None))
    assert freed.ok and deleted == ["uid-7"]
    create = plan.CreatePod(manifest=dict(POD))
    refused = asyncio.run(ex.execute(fakes.snap(), plan.Plan((create,), lease_free=True), lambda: None))
    assert not refused.ok, "a create is never sent without the Lease"


def test_a_lease_create_refused_in_a_terminating_namespace_is_learnt(monkeypatch: pytest.MonkeyPatch) -> None:
    from baton.k8s import leases

    async def acquire_lease(**kwargs: Any) -> dict[str, Any]:
        raise api.ApiError(403, "Forbidden", 'leases.coordination.k8s.io "baton-rt" is forbidden: unable to create '
                           'new content in namespace agents because it is being terminated')

    async def reread_runtime(key: Any) -> dict[str, Any]:
        return fakes.stored_runtime(uid=builders.RT_UID, token=0)
    monkeypatch.setattr(leases, "acquire_lease", acquire_lease)
    ex = _executor(fakes.new_clock())
    monkeypatch.setattr(ex.views, "reread_runtime", reread_runtime)
    outcome = asyncio.run(ex.execute(fakes.snap(), plan.Plan((plan.AcquireLease(token=1),)), lambda: None))
    assert (outcome.ok, outcome.namespace_terminating) == (False, True)
