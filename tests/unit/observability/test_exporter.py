"""Which replica reports the per-runtime series (baton.exporter): the holder of the installation's
metrics Lease, one at a time. The Lease adapter (baton.k8s.metricslease) is replaced by a store
that behaves as the API server does for one object: create refuses an existing name (409), a
write with a stale resourceVersion is refused (409). Clocks are simulated."""
from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

import pytest

from baton import clock as clock_mod
from baton import exporter as exporter_mod
from baton.k8s import api, metricslease

START = datetime.datetime(2026, 3, 1, tzinfo=datetime.timezone.utc)
DURATION = 15


class Store:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.forbidden = False

    def _check(self) -> None:
        if self.forbidden:
            raise api.ApiError(403, "Forbidden", "leases is forbidden")

    def _stored(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        lease = copy.deepcopy(lease)
        lease["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = lease
        return copy.deepcopy(lease)

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return copy.deepcopy(self.lease)

    async def create(self, *, namespace: str, name: str, identity: str, duration_seconds: int,
                     now: datetime.datetime) -> dict[str, Any]:
        self._check()
        if self.lease is not None:
            raise metricslease.Taken("exists")
        return self._stored({"metadata": {"name": name, "namespace": namespace},
                             "spec": {"holderIdentity": identity, "leaseDurationSeconds": duration_seconds,
                                      "leaseTransitions": 0}})

    async def write(self, lease: dict[str, Any], *, holder_identity: str | None, duration_seconds: int,
                    now: datetime.datetime, taking: bool) -> dict[str, Any]:
        self._check()
        if self.lease is None or metricslease.version(lease) != metricslease.version(self.lease):
            raise metricslease.Taken("conflict")
        spec = {**lease["spec"], "holderIdentity": holder_identity, "renewTime": now.isoformat() if holder_identity else None}
        if taking:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        return self._stored({**lease, "spec": spec})


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Store:
    s = Store()
    monkeypatch.setattr(metricslease, "read", s.read)
    monkeypatch.setattr(metricslease, "create", s.create)
    monkeypatch.setattr(metricslease, "write", s.write)
    return s


def _pair() -> tuple[clock_mod.Manual, exporter_mod.Exporter, exporter_mod.Exporter]:
    clock = clock_mod.Manual(START)
    make = lambda identity: exporter_mod.Exporter(  # noqa: E731
        namespace="baton-system", name="baton-runtime-metrics.x", identity=identity, duration_seconds=DURATION,
        clock=clock)
    return clock, make("op-a"), make("op-b")


def test_one_replica_reports_and_a_clean_stop_hands_over_at_the_next_round(store: Store) -> None:
    async def run() -> None:
        clock, a, b = _pair()
        await a.tick()
        await b.tick()
        assert (a.active(), b.active()) == (True, False)
        for _ in range(10):  # renewals keep it with a; b keeps out
            clock.t += DURATION / 3
            await a.tick()
            await b.tick()
            assert (a.active(), b.active()) == (True, False)
        await a.release()
        assert not a.active() and store.lease is not None and store.lease["spec"]["holderIdentity"] is None
        await b.tick()  # no holder: taken at once, no wait
        assert b.active() and store.lease["spec"]["holderIdentity"] == "op-b"

    asyncio.run(run())


def test_a_dead_holder_is_replaced_after_its_lease_is_seen_unchanged_for_its_duration(store: Store) -> None:
    async def run() -> None:
        clock, a, b = _pair()
        await a.tick()
        await b.tick()  # b first sees a's version at t=0
        # a dies (no more renewals). b waits a whole duration by its own clock, not less.
        clock.t += DURATION / 3
        assert a.active()  # its last renewal is still fresh
        for _ in range(2):
            await b.tick()
            assert not b.active()
            clock.t += DURATION / 3
        clock.t = DURATION * 2 / 3 + 0.1
        assert not a.active()  # a would stop reporting by itself past 2/3 of the duration
        await b.tick()
        assert not b.active() and clock.t < DURATION
        clock.t = DURATION
        await b.tick()
        assert b.active() and store.lease is not None and store.lease["spec"]["holderIdentity"] == "op-b"
        assert store.lease["spec"]["leaseTransitions"] == 1
        # a comes back (it was only stalled): its renewal conflicts, so it stops reporting.
        await a.tick()
        assert not a.active() and b.active()

    asyncio.run(run())


def test_a_refused_lease_makes_every_replica_report(store: Store) -> None:
    store.forbidden = True

    async def run() -> tuple[bool, bool]:
        _, a, b = _pair()
        await asyncio.wait_for(a.run(), timeout=5)  # returns: nothing to keep
        await asyncio.wait_for(b.run(), timeout=5)
        return a.active(), b.active()

    assert asyncio.run(run()) == (True, True)
