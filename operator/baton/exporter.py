"""Which replica exports the per-runtime series (baton_runtime_condition, baton_runtimes, ...):
the one holding the installation's metrics Lease (baton.k8s.metricslease). Does I/O (that Lease,
through baton.k8s).

Every replica runs passes of every runtime it sees, so any of them could report it; reported by
all, each runtime's series are multiplied by the replica count (about 36 000 series at 1000
runtimes and 2 replicas). A runtime's lifecycle Lease cannot choose the reporter: it is held only
while a transition runs and handed back when the runtime is idle, so a runtime at rest would have
no series at all. So one Lease per installation: its holder reports every runtime, the others
none; a clean shutdown hands it back (another replica takes it within a renew period), a crash
leaves it to expire (a gap of at most the Lease's duration plus a period).

If the Lease cannot be used at all (RBAC refuses it: a chart older than this code, a hand-made
Role), every replica reports every runtime, as before, and says so once in the log.

Sharded (BATON_SHARD_RANGES), the Lease does not choose: each replica runs passes only for its own
ranges' runtimes, so each reports those (Controller.runtime_gauges).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from baton import clock as clock_mod
from baton.k8s import api, client, metricslease

log = logging.getLogger("baton.exporter")


class Exporter:
    def __init__(self, *, namespace: str, name: str, identity: str, duration_seconds: int,
                 clock: clock_mod.Clock) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration_seconds
        self.clock = clock
        self.fallback = False  # the Lease is refused (403): every replica reports
        self._last: dict[str, Any] | None = None  # the Lease as this process last saw it
        self._renewed: float | None = None  # monotonic: when the last successful write (ours) was sent
        self._seen: tuple[str | None, float] | None = None  # another holder's version, first seen at

    def active(self) -> bool:
        """Whether this replica reports the per-runtime series now."""
        if self.fallback:
            return True
        return self._renewed is not None and self.clock.monotonic() - self._renewed < self.duration * 2 / 3

    def _expired(self, lease: dict[str, Any]) -> bool:
        """Another holder's Lease, unchanged for its whole duration by our own clock."""
        now = self.clock.monotonic()
        rv = metricslease.version(lease)
        if self._seen is None or self._seen[0] != rv:
            self._seen = (rv, now)
            return False
        duration = int((lease.get("spec") or {}).get("leaseDurationSeconds") or self.duration)
        return now - self._seen[1] >= duration

    async def tick(self) -> None:
        """One round: create, renew or take the Lease, or note who holds it."""
        sent = self.clock.monotonic()
        lease = self._last if self._renewed is not None else await metricslease.read(self.namespace, self.name)
        try:
            if lease is None:
                self._last = await metricslease.create(namespace=self.namespace, name=self.name, identity=self.identity,
                                                       duration_seconds=self.duration, now=self.clock.wall())
                log.info("this replica exports the per-runtime metrics (Lease %s created)", self.name)
            elif metricslease.holder(lease) == self.identity:
                self._last = await metricslease.write(lease, holder_identity=self.identity, duration_seconds=self.duration,
                                                      now=self.clock.wall(), taking=self._renewed is None)
            elif metricslease.holder(lease) is None or self._expired(lease):
                self._last = await metricslease.write(lease, holder_identity=self.identity, duration_seconds=self.duration,
                                                      now=self.clock.wall(), taking=True)
                log.info("this replica exports the per-runtime metrics (Lease %s taken from %s)",
                         self.name, metricslease.holder(lease) or "nobody")
            else:
                self._last, self._renewed = lease, None
                return
            self._renewed, self._seen = sent, None
        except metricslease.Taken:
            if self._renewed is not None:
                log.info("another replica exports the per-runtime metrics now (Lease %s)", self.name)
            self._last, self._renewed = None, None

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except api.ApiError as exc:
                if exc.status == 403 and not self.fallback:
                    self.fallback = True
                    log.warning("the metrics Lease %s/%s is refused (%s): every replica exports every runtime's "
                                "series; grant get, create and update on leases there (the chart does)",
                                self.namespace, self.name, client.short(exc))
                    return
                log.warning("metrics Lease %s: %s", self.name, client.short(exc))
            except Exception as exc:  # transient API trouble: the next round tries again
                log.warning("metrics Lease %s: %s", self.name, client.short(exc))
            await asyncio.sleep(max(0.5, self.duration / 3))

    async def release(self) -> None:
        """At shutdown: hand the Lease back so another replica reports at once."""
        last, self._renewed = self._last, None
        if last is None or metricslease.holder(last) != self.identity:
            return
        try:
            await metricslease.write(last, holder_identity=None, duration_seconds=self.duration,
                                     now=self.clock.wall(), taking=False)
        except Exception as exc:  # it expires instead
            log.warning("metrics Lease %s not handed back: %s", self.name, client.short(exc))
