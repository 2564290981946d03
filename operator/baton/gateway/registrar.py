"""A replica's registration (its Lease) and the margin rule. Does I/O (through
``baton.k8s.registration``).

The replica registers BEFORE it lists its views and forwards nothing until both are done. If its
last successful renewal is older than the Lease's duration minus a margin (2 s, or duration/5 if
smaller), it stops forwarding at once (`forwarding()` turns False by itself, read at every
call), registers again and lists its views again before forwarding again: a replica paused past
its Lease (SIGSTOP), which the operator may already have counted as gone, never forwards on the
view it had before the pause. A renewal that finds the Lease changed or deleted by someone else
does the same. `lease_id()` is the (name, uid) a seal must be addressed to (baton.gateway.admin).

Fail static (docs/gateway.md, "When the API server is away"): with BATON_GATEWAY_STATIC_SECONDS
> 0, a replica whose renewals fail does not stop at the margin but enters static mode (`mode()`
STATIC) for that many seconds more: it forwards only to runtimes its view shows in steady state
(baton.gateway.route.fail_static) and still answers the admin API, so the operator, which keeps
asking it for as long (the window is announced in its Lease), can seal it. Past the window it
stops as before. The first successful write after a lapse ends static mode at once: nothing is
forwarded until the views are listed again (a registration may carry a new Lease uid, under
which the operator's seals for the old one are refused as misaddressed and counted gone).
Static mode is for a replica that kept running while its renewals failed, never for one that was
not running (SIGSTOP, a frozen VM): a heartbeat ticks every HEARTBEAT_SECONDS while the event loop
runs, and a lapse seen with the heartbeat older than HEARTBEAT_STALE_SECONDS is a pause: the
views are dropped and re-listed as without a static window (the operator may have counted the
paused replica busy until its drain budget ran out and gone on: its old view must not be used).

Wake demand (docs/gateway.md, "Idle runtimes and wake"): every write carries the runtimes this
replica holds calls for while they are idle (`demand()`, names.ANN_WAKE_DEMAND). A change
(`demand_changed()`, from baton.gateway.state) makes a prompt write: the changes of
DEMAND_COALESCE_SECONDS go in one write, never one write per call, and only while the
registration is fresh (a lapsed one is the renewal loop's to write again, with the demand).
Writes are one at a time (a lock): two at once would conflict on the resourceVersion, which
reads as someone else's change.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import time
from typing import Any, Awaitable, Callable

from baton.gateway import gwmetrics
from baton.k8s import api as k8s_api
from baton.k8s import client, registration

log = logging.getLogger("baton.gateway")


# The heartbeat that tells "renewals failed while this process ran" (the API server away: static
# mode) from "this process did not run" (paused: its view is stale by an unknown amount).
HEARTBEAT_SECONDS = 0.5
HEARTBEAT_STALE_SECONDS = 2.0


# Demand changes within this span go in one Lease write.
DEMAND_COALESCE_SECONDS = 0.1
# After a failed demand write, the next try (the renewal loop writes it meanwhile too).
DEMAND_RETRY_SECONDS = 1.0


def margin(duration: float) -> float:
    return min(2.0, duration / 5)


class Mode(str, enum.Enum):
    """What the call path may forward now (read at every call)."""

    FORWARDING = "Forwarding"  # registered, renewed within the margin, views listed: every runtime
    STATIC = "Static"  # renewals failing, within the static window: runtimes in steady state only
    HOLDING = "Holding"  # nothing (not registered, views not listed, past the window, stopping)


class Registrar:
    def __init__(self, *, namespace: str, instance: str, admin: str, duration_seconds: int,
                 relist: Callable[[], Awaitable[bool]], on_change: Callable[[], None],
                 static_seconds: int = 0,
                 demand: Callable[[], list[str]] = lambda: [],
                 mono: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)) -> None:
        self.namespace, self.instance, self.admin = namespace, instance, admin
        self.duration = duration_seconds
        self.static_seconds = static_seconds
        self._static_said = False
        self._relist, self._on_change = relist, on_change
        self._mono, self._wall = mono, wall
        self.lease: dict[str, Any] | None = None
        self.last_ok: float | None = None  # monotonic time the last successful write was sent
        self.views_ok = False  # the views were listed after the last lapse
        self.stopping = False
        self.heartbeat = self._mono()  # last tick of the event loop's heartbeat (beat())
        self._demand = demand
        self.demand_written: list[str] = []  # ANN_WAKE_DEMAND as last written
        self._demand_event = asyncio.Event()
        self._write_lock = asyncio.Lock()

    def demand_changed(self) -> None:
        """The wake demand changed: written within DEMAND_COALESCE_SECONDS (demand_loop)."""
        self._demand_event.set()

    def lease_id(self) -> tuple[str, str] | None:
        """(name, uid) of the Lease this replica last wrote: what a seal must be addressed to.
        None before the first registration. A registration that recreates the Lease changes the
        uid; the operator's next LIST shows the new one."""
        meta = (self.lease or {}).get("metadata") or {}
        name, uid = meta.get("name"), meta.get("uid")
        return (str(name), str(uid)) if name and uid else None

    def fresh(self) -> bool:
        return self.last_ok is not None and self._mono() - self.last_ok < self.duration - margin(self.duration)

    def static_window(self) -> bool:
        """Past the margin, and still within the static window after it (by this process's clock,
        from when the last successful write was sent)."""
        return (self.static_seconds > 0 and self.last_ok is not None
                and self._mono() - self.last_ok < self.duration - margin(self.duration) + self.static_seconds)

    def mode(self) -> Mode:
        """What may be forwarded now. A lapse past the static window (or any lapse, without one)
        seen here drops the views at once."""
        if not self.views_ok or self.stopping:
            return Mode.HOLDING
        if self.fresh():
            self._static_said = False
            return Mode.FORWARDING
        if self.static_window() and self._mono() - self.heartbeat < HEARTBEAT_STALE_SECONDS:
            if not self._static_said:
                self._static_said = True
                log.warning("registration older than its margin (the API server is away?): static mode for at most "
                            "%ds more: only runtimes in steady state are forwarded, the admin API still answers",
                            self.static_seconds)
            return Mode.STATIC
        self.views_ok = False
        gwmetrics.REGISTERED.set(0)
        log.warning("registration older than its margin%s: forwarding stops until renewed and re-listed",
                    " and its static window" if self.static_seconds else "")
        return Mode.HOLDING

    def forwarding(self) -> bool:
        """Whether calls may be forwarded now (every runtime, or in static mode those in steady
        state): registered, renewed within the margin (or the static window), and the views
        listed since the last lapse."""
        return self.mode() is not Mode.HOLDING

    async def _write(self) -> bool:
        """Register or renew once, with the wake demand of now; True when the API server took it."""
        async with self._write_lock:
            return await self._write_locked()

    async def _write_locked(self) -> bool:
        sent = self._mono()
        demand = self._demand()
        # Passed only when there is some: the adapter's default is none (the annotation removed).
        wake: dict[str, Any] = {"wake_demand": demand} if demand else {}
        lapsed = not self.fresh()
        try:
            if self.lease is None or lapsed:
                self.lease = await registration.register_gateway(
                    namespace=self.namespace, instance=self.instance, admin=self.admin,
                    duration_seconds=self.duration, static_seconds=self.static_seconds, now=self._wall(), **wake)
            else:
                try:
                    self.lease = await registration.renew_gateway(last=self.lease, now=self._wall(), **wake)
                except k8s_api.ApiError as exc:
                    if exc.status not in (404, 409):
                        raise
                    # Someone else changed or deleted our Lease (a second process with our
                    # instance id, a person): the operator may have listed it without us and
                    # sealed someone else. Forward nothing until registered and re-listed.
                    log.warning("the registration Lease was %s by someone else: forwarding stops until "
                                "registered again and re-listed", "deleted" if exc.status == 404 else "changed")
                    self.views_ok = False
                    gwmetrics.REGISTERED.set(0)
                    self.lease = await registration.register_gateway(
                        namespace=self.namespace, instance=self.instance, admin=self.admin,
                        duration_seconds=self.duration, static_seconds=self.static_seconds, now=self._wall(), **wake)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("gateway registration failed: %s", client.short(exc))
            return False
        if (lapsed or not self.fresh()) and self.views_ok:
            log.warning("registration older than its margin: forwarding stops until renewed and re-listed")
            gwmetrics.REGISTERED.set(0)
        if lapsed or not self.fresh():
            # Whatever the views showed before this write may be older than what the operator
            # acted on while we were not registered: list again before forwarding.
            self.views_ok = False
        self.last_ok = sent
        self.demand_written = demand
        return True

    async def demand_loop(self) -> None:
        """Write the wake demand promptly when it changes (coalesced), while registered."""
        while not self.stopping:
            await self._demand_event.wait()
            await asyncio.sleep(DEMAND_COALESCE_SECONDS)
            self._demand_event.clear()
            if self.lease is None or not self.fresh() or self._demand() == self.demand_written:
                continue  # nothing new, or the renewal loop's to write (it carries the demand too)
            if not await self._write():
                self._demand_event.set()
                await asyncio.sleep(DEMAND_RETRY_SECONDS)

    async def start(self) -> None:
        """Register (retrying until it works), before the caller lists its views."""
        while not await self._write():
            await asyncio.sleep(1.0)

    async def beat(self) -> None:
        """The heartbeat (mode() reads it): a tick every HEARTBEAT_SECONDS while the loop runs."""
        while not self.stopping:
            now = self._mono()
            if now - self.heartbeat >= HEARTBEAT_STALE_SECONDS and not self.fresh() and self.views_ok:
                # The loop did not run for a while (a pause) and the registration lapsed meanwhile:
                # the view from before the pause is not used, static window or not.
                self.views_ok = False
                gwmetrics.REGISTERED.set(0)
                log.warning("registration older than its margin after this replica did not run for %.1fs (paused): "
                            "forwarding stops until renewed and re-listed", now - self.heartbeat)
            self.heartbeat = now
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def run(self) -> None:
        """Renew every duration/3 (at once again after a failure, then each second); re-list
        after any lapse. Beats the heartbeat meanwhile."""
        beating = asyncio.create_task(self.beat(), name="gateway heartbeat")
        demanding = asyncio.create_task(self.demand_loop(), name="gateway wake demand")
        try:
            await self._renew_loop()
        finally:
            beating.cancel()
            demanding.cancel()

    async def _renew_loop(self) -> None:
        while not self.stopping:
            ok = await self._write()
            if ok and not self.views_ok:
                if await self._relist() and self.fresh():
                    self.views_ok = True
                    gwmetrics.REGISTERED.set(1)
                    log.info("gateway registered as %s; views listed: forwarding", self.instance)
                    self._on_change()
                    continue  # renew again soon: the list may have taken a while
            await asyncio.sleep(self.duration / 3 if ok else 1.0)

    async def unregister(self) -> None:
        self.stopping = True
        uid = ((self.lease or {}).get("metadata") or {}).get("uid")
        try:
            await registration.delete_gateway(namespace=self.namespace, instance=self.instance, uid=uid)
        except Exception as exc:
            log.warning("could not delete the gateway Lease: %s", client.short(exc))
