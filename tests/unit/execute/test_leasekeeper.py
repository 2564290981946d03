"""The Lease keeper: fresh by the monotonic clock a margin before expiry, renewals, losing the
Lease, the stored-token check before a Lease is created, and handing everything back at
shutdown. Faked at Baton's own adapter boundary (baton.k8s.leases, baton.k8s.runtimes)."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from baton import clock
from baton.execute import leasekeeper, outcomes
from baton.k8s import leases, runtimes
from baton.lifecycle import plan

from .. import builders
from . import fakes

KEY = (builders.NS, builders.RT)


class FakeLeases:
    """baton.k8s.leases as the keeper calls it: records each call, answers as told."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.renew_error: Exception | None = None
        self.release_error: Exception | None = None
        self.acquire_error: Exception | None = None
        self.token = 0
        for name in ("acquire_lease", "renew_lease", "release_lease", "delete_lease"):
            monkeypatch.setattr(leases, name, getattr(self, name))

    async def acquire_lease(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("acquire", kwargs))
        if self.acquire_error is not None:
            raise self.acquire_error
        return fakes.lease_object(holder=kwargs["identity"], token=kwargs["token"], rv="21")

    async def renew_lease(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("renew", kwargs))
        if self.renew_error is not None:
            raise self.renew_error
        return fakes.lease_object(holder=kwargs["identity"], token=kwargs["token"], rv="22")

    async def release_lease(self, **kwargs: Any) -> dict[str, Any] | None:
        self.calls.append(("release", kwargs))
        if self.release_error is not None:
            raise self.release_error
        return None

    async def delete_lease(self, namespace: str, name: str, uid: str | None = None) -> None:
        self.calls.append(("delete", {"namespace": namespace, "name": name, "uid": uid}))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLeases:
    return FakeLeases(monkeypatch)


def _keeper(manual: clock.Manual, lease_seconds: int = 15) -> leasekeeper.LeaseKeeper:
    return leasekeeper.LeaseKeeper(identity=builders.ME, lease_seconds=lease_seconds, views=fakes.new_views(),
                                   clock=manual)


def _hold(keeper: leasekeeper.LeaseKeeper, *, token: int = 3, renewed: float = 0.0) -> leasekeeper.HeldLease:
    held = leasekeeper.HeldLease(token=token, duration=keeper.lease_seconds, renewed=renewed,
                                 last=fakes.lease_object(holder=builders.ME, token=token))
    keeper.held[KEY] = held
    return held


@pytest.mark.parametrize(("duration", "margin"), [(3, 2.0), (10, 2.0), (15, 3.0), (60, 12.0)])
def test_the_safety_margin_is_a_fifth_of_the_duration_and_at_least_two_seconds(duration: int, margin: float) -> None:
    assert leasekeeper.safety_margin(duration) == margin


@pytest.mark.parametrize(("since_renew_sent", "fresh"), [(0.0, True), (11.9, True), (12.0, False), (30.0, False)])
def test_a_held_lease_is_fresh_until_a_margin_before_its_duration_by_the_monotonic_clock(
        since_renew_sent: float, fresh: bool) -> None:
    manual = fakes.new_clock()
    keeper = _keeper(manual)
    _hold(keeper)
    manual.t = since_renew_sent
    assert keeper.holds(KEY) is fresh
    assert KEY in keeper.held  # stale is not dropped: only a renewal that fails drops it


def test_a_renewal_counts_from_when_it_was_sent_and_lands_in_the_view(fake: FakeLeases) -> None:
    manual = fakes.new_clock()
    keeper = _keeper(manual)
    held = _hold(keeper)
    manual.t = 5.0
    woken: list[bool] = []
    assert asyncio.run(keeper.renew_once(KEY, lambda: woken.append(True)))
    assert held.renewed == 5.0 and not woken
    assert [name for name, _ in fake.calls] == ["renew"]
    assert fake.calls[0][1]["token"] == 3 and fake.calls[0][1]["now"] == manual.wall()
    view = keeper.views.leases.items()
    assert [obj["metadata"]["resourceVersion"] for obj in view] == ["22"]


def test_a_lost_lease_is_dropped_and_its_runtime_woken(fake: FakeLeases) -> None:
    keeper = _keeper(fakes.new_clock())
    _hold(keeper)
    fake.renew_error = leases.LeaseLost("held by baton-b")
    woken: list[bool] = []
    assert not asyncio.run(keeper.renew_once(KEY, lambda: woken.append(True)))
    assert KEY not in keeper.held and woken == [True]


def test_a_renewal_that_fails_for_another_reason_keeps_the_lease_for_the_next_tick(fake: FakeLeases) -> None:
    manual = fakes.new_clock()
    keeper = _keeper(manual)
    held = _hold(keeper)
    manual.t = 5.0
    fake.renew_error = ConnectionError("reset")
    assert asyncio.run(keeper.renew_once(KEY, lambda: None))
    assert keeper.held[KEY] is held and held.renewed == 0.0


def test_release_all_hands_back_every_held_lease_from_its_last_copy_even_when_one_fails(fake: FakeLeases) -> None:
    keeper = _keeper(fakes.new_clock())
    _hold(keeper, token=3)
    other = (builders.NS, "other")
    keeper.held[other] = leasekeeper.HeldLease(token=7, duration=15, renewed=0.0, last=None)
    fake.release_error = ConnectionError("reset")
    asyncio.run(keeper.release_all())
    assert not keeper.held
    released = [kwargs for name, kwargs in fake.calls if name == "release"]
    assert [(r["name"], r["identity"]) for r in released] == [(f"baton-{builders.RT}", builders.ME),
                                                               ("baton-other", builders.ME)]
    assert released[0]["last"]["spec"]["leaseTransitions"] == 3 and released[1]["last"] is None


def test_abandon_deletes_exactly_the_lease_held_by_its_uid(fake: FakeLeases) -> None:
    keeper = _keeper(fakes.new_clock())
    _hold(keeper)
    asyncio.run(keeper.abandon(KEY))
    assert KEY not in keeper.held
    assert fake.calls == [("delete", {"namespace": builders.NS, "name": f"baton-{builders.RT}", "uid": "lease-uid"})]
    asyncio.run(keeper.abandon(KEY))  # nothing held: nothing sent
    assert len(fake.calls) == 1


@pytest.mark.parametrize(("stored", "raised"), [
    (None, outcomes.Aborted),  # the runtime is gone
    (fakes.stored_runtime(uid="another-uid", token=1), outcomes.Aborted),  # created again
    (fakes.stored_runtime(uid=builders.RT_UID, token=4), outcomes.Superseded),  # the token was used
    (fakes.stored_runtime(uid=builders.RT_UID, token=9), outcomes.Superseded),
])
def test_a_lease_created_again_is_refused_unless_its_token_is_above_the_stored_one(
        fake: FakeLeases, monkeypatch: pytest.MonkeyPatch, stored: dict[str, Any] | None,
        raised: type[Exception]) -> None:
    async def read_runtime(namespace: str, name: str) -> dict[str, Any] | None:
        return stored
    monkeypatch.setattr(runtimes, "read_runtime", read_runtime)
    keeper = _keeper(fakes.new_clock())
    with pytest.raises(raised):
        asyncio.run(keeper.acquire(snap=fakes.snap(lease=None), action=plan.AcquireLease(token=4), key=KEY,
                                   wake=lambda: None))
    assert not keeper.held and not fake.calls


def test_a_lease_acquired_is_held_fresh_with_a_renewer_and_lands_in_the_view(
        fake: FakeLeases, monkeypatch: pytest.MonkeyPatch) -> None:
    async def read_runtime(namespace: str, name: str) -> dict[str, Any] | None:
        return fakes.stored_runtime(uid=builders.RT_UID, token=3)
    monkeypatch.setattr(runtimes, "read_runtime", read_runtime)
    manual = fakes.new_clock()
    manual.t = 2.0
    keeper = _keeper(manual)

    async def acquire() -> leasekeeper.HeldLease:
        await keeper.acquire(snap=fakes.snap(lease=None), action=plan.AcquireLease(token=4), key=KEY, wake=lambda: None)
        held = keeper.held[KEY]
        assert held.renewer is not None and not held.renewer.done()
        keeper.drop(KEY)  # the renewer is cancelled with it
        await asyncio.sleep(0)
        assert held.renewer.cancelled()
        return held

    held = asyncio.run(acquire())
    assert (held.token, held.renewed, held.duration) == (4, 2.0, 15)
    assert [name for name, _ in fake.calls] == ["acquire"] and fake.calls[0][1]["observed"] is None
    assert [obj["spec"]["leaseTransitions"] for obj in keeper.views.leases.items()] == [4]


def test_a_lease_taken_by_another_meanwhile_aborts_the_plan(fake: FakeLeases) -> None:
    keeper = _keeper(fakes.new_clock())
    fake.acquire_error = leases.LeaseLost("held by baton-b")
    observed = fakes.lease_object(holder="baton-b", token=3)
    with pytest.raises(outcomes.Aborted):
        asyncio.run(keeper.acquire(snap=fakes.snap(lease=observed), action=plan.AcquireLease(token=4), key=KEY,
                                   wake=lambda: None))
    assert not keeper.held
