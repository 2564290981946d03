"""Keeps the lifecycle Leases this process holds: acquire, renew, release, abandon. Does I/O
(through baton.k8s.leases, async).

Nothing else touches a held Lease. Every pod-changing action and status write runs only while
this process holds the Lease *fresh*: its last successful renew was *sent* less than
(duration - margin) ago by the local monotonic clock. Renewals run as their own tasks on a
connection pool of their own, so no other work can starve them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Callable

from baton import clock as clock_mod
from baton import metrics
from baton.cache import snapshot
from baton.cache import views as views_mod
from baton.execute import outcomes
from baton.k8s import client, leases
from baton.lifecycle import plan
from baton.model import names

log = logging.getLogger("baton.execute")

Key = tuple[str, str]


def safety_margin(duration: float) -> float:
    """How long before its Lease could expire a holder stops acting (see docs/architecture.md):
    the time between checking freshness and the request reaching the API server, plus clock
    rate differences between machines (bounded; rates, unlike offsets, barely drift)."""
    return max(2.0, 0.2 * duration)


@dataclasses.dataclass
class HeldLease:
    token: int
    duration: int
    renewed: float  # the monotonic clock when the last successful acquire/renew was *sent*
    last: dict[str, Any] | None = None  # the Lease as last written (next compare-and-swap)
    renewer: asyncio.Task[None] | None = None

    def fresh(self, now: float) -> bool:
        # Others may take the Lease `duration` after they last saw it change, which is after we
        # sent that renew: measured from the send, stop a margin before.
        return now - self.renewed < self.duration - safety_margin(self.duration)


class LeaseKeeper:
    def __init__(self, *, identity: str, lease_seconds: int, views: views_mod.Views, clock: clock_mod.Clock) -> None:
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.views = views
        self.clock = clock
        self.held: dict[Key, HeldLease] = {}

    def holds(self, key: Key) -> bool:
        held = self.held.get(key)
        return held is not None and held.fresh(self.clock.monotonic())

    async def abandon(self, key: Key) -> None:
        """The runtime left the view (its deletion finished) while this process holds its Lease:
        one taken after the finalizing replica deleted it (this view still showed the runtime).
        Delete exactly that Lease (by UID): the garbage collector may take long to
        (tests/model: test_a_lease_taken_after_the_runtime_finished_deleting_is_deleted_by_its_holder)."""
        held = self.held.get(key)
        if held is None:
            return
        ns, name = key
        uid = (held.last or {}).get("metadata", {}).get("uid")
        self.drop(key)
        try:
            await leases.delete_lease(ns, names.lease_name(name), uid=uid)
            log.info("runtime %s/%s is gone: deleted the Lease this process held for it", ns, name,
                     extra={"runtime": f"{ns}/{name}"})
        except Exception as exc:  # the garbage collector remains (the Lease is owned by the runtime)
            log.warning("Lease of the deleted runtime %s/%s not deleted: %s", ns, name, client.short(exc),
                        extra={"runtime": f"{ns}/{name}"})

    def drop(self, key: Key) -> None:
        held = self.held.pop(key, None)
        if held and held.renewer and held.renewer is not asyncio.current_task():
            held.renewer.cancel()

    async def _renew_forever(self, key: Key, wake: Callable[[], None]) -> None:
        while True:
            held = self.held.get(key)
            if held is None:
                return
            await asyncio.sleep(max(0.5, held.duration / 3))
            if not await self.renew_once(key, wake):
                return

    async def renew_once(self, key: Key, wake: Callable[[], None]) -> bool:
        """One renewal of a held Lease (compare-and-swap on the copy last written). False when
        the Lease is not held (any more): then it is dropped and the runtime woken."""
        ns, name = key
        held = self.held.get(key)
        if held is None:
            return False
        sent = self.clock.monotonic()
        try:
            held.last = await leases.renew_lease(
                namespace=ns, name=names.lease_name(name),
                identity=self.identity, token=held.token, now=self.clock.wall(), last=held.last,
            )
            held.renewed = sent
            self.views.apply(held.last, "Lease")
        except leases.LeaseLost as exc:
            log.warning("lost lifecycle Lease of %s/%s: %s", ns, name, exc, extra={"runtime": f"{ns}/{name}"})
            metrics.LEASE_CONFLICTS.inc()
            self.drop(key)
            wake()
            return False
        except Exception as exc:  # transient API trouble: retry at the next tick
            log.warning("Lease renewal of %s/%s failed: %s", ns, name, client.short(exc),
                        extra={"runtime": f"{ns}/{name}"})
        return True

    async def acquire(
        self, *, snap: snapshot.Snapshot, action: plan.AcquireLease, key: Key, wake: Callable[[], None],
    ) -> None:
        ns, name = key
        if snap.lease is None:
            await self._check_token_for_new_lease(snap, action, key)
        sent = self.clock.monotonic()
        try:
            written = await leases.acquire_lease(
                namespace=ns, name=names.lease_name(name), runtime=name,
                runtime_uid=snap.observed.uid, identity=self.identity, token=action.token,
                duration_seconds=self.lease_seconds, now=self.clock.wall(), observed=snap.lease,
            )
        except leases.LeaseLost as exc:
            metrics.LEASE_CONFLICTS.inc()
            raise outcomes.Aborted(f"Lease not acquired: {exc}") from exc
        self.drop(key)
        self.views.apply(written, "Lease")
        held = HeldLease(token=action.token, duration=self.lease_seconds, renewed=sent, last=written)
        self.held[key] = held
        held.renewer = asyncio.create_task(self._renew_forever(key, wake), name=f"renew {ns}/{name}")
        log.info("acquired lifecycle Lease of %s/%s, fencing token %s", ns, name, action.token,
                 extra={"runtime": f"{ns}/{name}"})

    async def _check_token_for_new_lease(self, snap: snapshot.Snapshot, action: plan.AcquireLease, key: Key) -> None:
        """Before the Lease is created (again): the token must be above every token used. The
        Lease that carried them may be gone, and this replica's runtimes watch may lag behind its
        Leases watch (separate streams), so the view's status token + 1 can be one used before.
        The runtime as stored is the record left: one authoritative read, once per Lease created
        (tests/model: test_a_lease_created_again_never_reuses_a_lower_token)."""
        stored = await self.views.reread_runtime(key)
        if stored is None or (stored.get("metadata") or {}).get("uid") != snap.observed.uid:
            raise outcomes.Aborted("the runtime is gone (or was created again): no Lease created for it")
        token = int((stored.get("status") or {}).get("fencingToken") or 0)
        if token >= action.token:
            raise outcomes.Superseded(f"the runtime as stored carries fencing token {token}, this pass would "
                                      f"create the Lease with {action.token}: read again")

    async def release(self, *, key: Key, observed: dict[str, Any] | None) -> None:
        """Hand the Lease back (the copy last written, else the one this pass observed)."""
        ns, name = key
        held = self.held.get(key)
        self.drop(key)
        self.views.apply(await leases.release_lease(namespace=ns, name=names.lease_name(name),
                                                    identity=self.identity,
                                                    last=held.last if held else observed), "Lease")

    async def delete(self, key: Key) -> None:
        ns, name = key
        self.drop(key)
        await leases.delete_lease(ns, names.lease_name(name))

    async def release_all(self) -> None:
        """At shutdown: anything still held (a step cut short) is handed back; the next holder resumes."""
        for key in list(self.held):
            ns, name = key
            held = self.held.get(key)
            self.drop(key)
            try:
                await leases.release_lease(namespace=ns, name=names.lease_name(name), identity=self.identity,
                                           last=held.last if held else None)
            except Exception as exc:
                log.warning("could not release Lease of %s/%s: %s", ns, name, client.short(exc),
                            extra={"runtime": f"{ns}/{name}"})
