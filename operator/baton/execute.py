"""Carries a Plan out through ``baton.k8s``, keeps the Leases this process holds, records metrics.

Does I/O (through baton.k8s, async; no thread pool). Every object a write returns is applied to
the watch-fed views (read-your-writes: the next pass never sees an older state than it wrote).
The API server is the fence: a pod create is
refused while any pod of the runtime exists (one name per runtime), deletes and relabels carry
the pod's UID, status writes carry the resourceVersion they were decided on (a write overtaken
by any later one, the writer's own included, is refused: 409, then read again and decided again)
and the fencing token (CEL rule). On top, every pod-changing
action and status write runs only while this process holds the Lease *fresh*: its last
successful renew was *sent* less than (duration - margin) ago by the local monotonic clock.
Renewals run as their own tasks on a connection pool of their own, so no other work can starve
them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import enum
import logging
import os
import time
from typing import Any, Callable

from baton import metrics
from baton.cache import snapshot as snapshot_mod
from baton.cache import views as vw
from baton.k8s import claims, client, events, leases, pods, runtimes, services
from baton.lifecycle import manifests as mf
from baton.lifecycle import pins as pn
from baton.lifecycle import plan as p

log = logging.getLogger("baton.execute")

EVENT_BACKLOG = 1000  # events waiting to be posted; past it new ones are dropped (counted)

# Tests only: BATON_FAULT_CLOCK_OFFSET_SECONDS shifts this process's wall clock (a replica whose
# clock runs ahead or behind). The monotonic clock, which judges Leases, is never shifted.
_CLOCK_OFFSET = datetime.timedelta(seconds=float(os.environ.get("BATON_FAULT_CLOCK_OFFSET_SECONDS") or 0))


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + _CLOCK_OFFSET


def safety_margin(duration: float) -> float:
    """How long before its Lease could expire a holder stops acting (see docs/architecture.md):
    the time between checking freshness and the request reaching the API server, plus clock
    rate differences between machines (bounded; rates, unlike offsets, barely drift)."""
    return max(2.0, 0.2 * duration)


@dataclasses.dataclass
class HeldLease:
    token: int
    duration: int
    renewed: float  # time.monotonic() when the last successful acquire/renew was *sent*
    last: dict[str, Any] | None = None  # the Lease as last written (next compare-and-swap)
    renewer: asyncio.Task[None] | None = None

    def fresh(self) -> bool:
        # Others may take the Lease `duration` after they last saw it change, which is after we
        # sent that renew: measured from the send, stop a margin before.
        return time.monotonic() - self.renewed < self.duration - safety_margin(self.duration)


class Aborted(Exception):
    """The rest of the plan must not run; re-observe."""


class Superseded(Exception):
    """A write refused because the runtime changed since this pass read it (resourceVersion):
    not an error; it has been read again, and is decided again at once."""


class Executor:
    def __init__(self, *, identity: str, lease_seconds: int, views: vw.Views) -> None:
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.views = views
        self.held: dict[tuple[str, str], HeldLease] = {}
        # Events are posted in order by one sender task, apart from the plans that emit them: a
        # plan (and the next pass of its runtime) never waits on an event's round trip. Measured
        # on a handoff's critical path: TransitionStarted sat between the label flip and the
        # Terminating write.
        self._event_backlog: collections.deque[dict[str, Any]] = collections.deque()
        self._event_sender: asyncio.Task[None] | None = None

    # --- events ------------------------------------------------------------------------------

    def _post_event(self, **event: Any) -> None:
        if len(self._event_backlog) >= EVENT_BACKLOG:
            metrics.EVENTS_DROPPED.inc()
            log.warning("event %s for %s/%s dropped: %d events wait to be posted", event["reason"],
                        event["namespace"], event["runtime"], len(self._event_backlog))
            return
        self._event_backlog.append(event)
        if self._event_sender is None or self._event_sender.done():
            self._event_sender = asyncio.create_task(self._send_events(), name="post events")

    async def _send_events(self) -> None:
        while self._event_backlog:
            event = self._event_backlog.popleft()
            try:
                await events.emit_event(**event)
            except Exception as exc:  # an event is a notification, never a reason to stop
                log.warning("event %s for %s/%s not posted: %s", event["reason"], event["namespace"],
                            event["runtime"], client.short(exc))

    async def flush_events(self, timeout: float) -> None:
        """Wait (bounded) until the events emitted so far are posted: at shutdown."""
        sender = self._event_sender
        if sender is not None and not sender.done():
            try:
                await asyncio.wait_for(asyncio.shield(sender), timeout)
            except asyncio.TimeoutError:
                log.warning("%d events not posted within %.0fs", len(self._event_backlog), timeout)

    def _seen(self, obj: dict[str, Any] | None, kind: str = "") -> None:
        """Apply what a write returned to the views (read-your-writes)."""
        if not isinstance(obj, dict) or "metadata" not in obj:
            return
        store = {"Pod": self.views.pods, "Lease": self.views.leases, "Service": self.views.services,
                 "ToolRuntime": self.views.runtimes, "ToolRuntimeClaim": self.views.claims}.get(kind or str(obj.get("kind") or ""))
        if store is not None:
            store.apply(obj)

    # --- Lease keeping -----------------------------------------------------------------------

    def holds(self, key: tuple[str, str]) -> bool:
        held = self.held.get(key)
        return held is not None and held.fresh()

    async def abandon(self, key: tuple[str, str]) -> None:
        """The runtime left the view (its deletion finished) while this process holds its Lease:
        one taken after the finalizing replica deleted it (this view still showed the runtime).
        Delete exactly that Lease (by UID); the garbage collector may take long to (tests/chaos
        seed 1: still there 20 s later)."""
        held = self.held.get(key)
        if held is None:
            return
        ns, name = key
        uid = (held.last or {}).get("metadata", {}).get("uid")
        self.drop(key)
        try:
            await leases.delete_lease(ns, mf.lease_name(name), uid=uid)
            log.info("runtime %s/%s is gone: deleted the Lease this process held for it", ns, name,
                     extra={"runtime": f"{ns}/{name}"})
        except Exception as exc:  # the garbage collector remains (the Lease is owned by the runtime)
            log.warning("Lease of the deleted runtime %s/%s not deleted: %s", ns, name, client.short(exc))

    def drop(self, key: tuple[str, str]) -> None:
        held = self.held.pop(key, None)
        if held and held.renewer and held.renewer is not asyncio.current_task():
            held.renewer.cancel()

    async def _renew_forever(self, key: tuple[str, str], wake: Callable[[], None]) -> None:
        while True:
            held = self.held.get(key)
            if held is None:
                return
            await asyncio.sleep(max(0.5, held.duration / 3))
            if not await self.renew_once(key, wake):
                return

    async def renew_once(self, key: tuple[str, str], wake: Callable[[], None]) -> bool:
        """One renewal of a held Lease (compare-and-swap on the copy last written). False when
        the Lease is not held (any more): then it is dropped and the runtime woken."""
        ns, name = key
        held = self.held.get(key)
        if held is None:
            return False
        sent = time.monotonic()
        try:
            held.last = await leases.renew_lease(
                namespace=ns, name=mf.lease_name(name),
                identity=self.identity, token=held.token, now=utcnow(), last=held.last,
            )
            held.renewed = sent
            self._seen(held.last, "Lease")
        except leases.LeaseLost as exc:
            log.warning("lost lifecycle Lease of %s/%s: %s", ns, name, exc, extra={"runtime": f"{ns}/{name}"})
            metrics.LEASE_CONFLICTS.inc()
            self.drop(key)
            wake()
            return False
        except Exception as exc:  # transient API trouble: retry at the next tick
            log.warning("Lease renewal of %s/%s failed: %s", ns, name, client.short(exc))
        return True

    # --- the plan ----------------------------------------------------------------------------

    async def execute(
        self,
        snap: snapshot_mod.Snapshot,
        plan: p.Plan,
        local: snapshot_mod.Local,
        wake: Callable[[], None],
    ) -> bool:
        """False when an action failed (the caller backs off); stops at the first failure. A plan
        cut short because the runtime changed since this pass read it is not a failure: the
        runtime was read again and woken, to be decided again at once (True)."""
        o = snap.observed
        key = (o.namespace, o.name)
        for action in _claim_phases_together(plan.actions):
            try:
                if isinstance(action, tuple):
                    # Claims' phases are independent and never fail the plan (see _one): sent
                    # at once, so a fork's twenty claims hold the Lease for one round trip.
                    await asyncio.gather(*(self._one(snap, a, local, key, wake) for a in action))
                else:
                    await self._one(snap, action, local, key, wake)
            except Superseded as exc:
                log.info("plan for %s/%s stopped: %s", o.namespace, o.name, exc, extra={"runtime": f"{o.namespace}/{o.name}"})
                wake()
                return True
            except Aborted as exc:
                log.info("plan for %s/%s stopped: %s", o.namespace, o.name, exc, extra={"runtime": f"{o.namespace}/{o.name}"})
                return False
            except Exception as exc:
                local.last_error = client.short(exc)
                kind = "SetClaimPhase" if isinstance(action, tuple) else type(action).__name__
                metrics.ACTION_ERRORS.labels(action=kind).inc()
                log.warning(
                    "%s for %s/%s failed: %s", kind, o.namespace, o.name, local.last_error,
                    extra={"runtime": f"{o.namespace}/{o.name}"},
                )
                return False
        if plan.actions:
            local.last_error = None
            local.pod_rejected = None  # recorded in status by this plan
        return True

    async def _one(
        self,
        snap: snapshot_mod.Snapshot,
        action: p.Action,
        local: snapshot_mod.Local,
        key: tuple[str, str],
        wake: Callable[[], None],
    ) -> None:
        o = snap.observed
        ns, name = key
        meta: dict[str, Any] = snap.runtime.get("metadata") or {}
        if isinstance(action, p.FENCED) and not self.holds(key):
            metrics.FENCING_REJECTIONS.inc()
            raise Aborted(f"{type(action).__name__} refused: this replica does not hold a fresh Lease")
        seen = self._seen
        if isinstance(action, p.AddFinalizer):
            fins = list(meta.get("finalizers") or []) + [mf.FINALIZER]
            self._wrote(snap, await runtimes.patch_runtime_finalizers(ns, name, fins, meta["resourceVersion"]))
        elif isinstance(action, p.RemoveFinalizer):
            fins = [f for f in meta.get("finalizers") or [] if f != mf.FINALIZER]
            unfinalized = await runtimes.patch_runtime_finalizers(ns, name, fins, meta["resourceVersion"])
            self._wrote(snap, unfinalized)
            wmeta = (unfinalized or {}).get("metadata") or {}
            if unfinalized is not None and wmeta.get("deletionTimestamp") and not wmeta.get("finalizers"):
                # Deleting with no finalizer left: the API server has removed it. A pass woken
                # (by the Lease's or Service's DELETED) before the runtime's own DELETED arrives
                # found it in the view with our finalizer and took the Lease again: drop it now.
                self.views.runtimes.delete(unfinalized)
        elif isinstance(action, p.ConfirmNoPod):
            local.reads += 1
            pod = await pods.read_pod(ns, action.pod)
            if pod is not None and client.owned_by(pod, o.uid):
                # Not in the views (label edited off, or created late): the next pass reads the
                # name fresh (name_taken) and retires it before anything else goes.
                local.name_taken = True
                raise Superseded(f"pod {action.pod} uid={pod['metadata']['uid']} still exists: retire it first")
        elif isinstance(action, p.RemoveAnnotation):
            removed = await runtimes.remove_annotation(ns, name, action.key, action.value)
            if removed is None:
                log.info("annotation %s changed before it was removed; left as it is", action.key,
                         extra={"runtime": f"{ns}/{name}"})
                if action.consumes:
                    # Consumed by another replica (or changed): it refused it, not us. Read the
                    # runtime again so this view stops showing the verb, then decide again (gone:
                    # back off until the watch says so, rather than decide again on this view).
                    stored = await self._read_runtime_into_view(key)
                    still = ((stored or {}).get("metadata") or {}).get("annotations") or {}
                    if stored is None or still.get(action.key) == action.value:
                        raise Aborted(f"annotation {action.key}={action.value} not removed")  # backed off, not spun
                    raise Superseded(f"annotation {action.key}={action.value} consumed elsewhere")
            self._wrote(snap, removed)
        elif isinstance(action, p.AcquireLease):
            await self._acquire(snap, action, local, key, wake)
        elif isinstance(action, p.ReleaseLease):
            held = self.held.get(key)
            self.drop(key)
            seen(await leases.release_lease(namespace=ns, name=mf.lease_name(name), identity=self.identity,
                                            last=held.last if held else snap.lease), "Lease")
        elif isinstance(action, p.DeleteLease):
            self.drop(key)
            await leases.delete_lease(ns, mf.lease_name(name))
        elif isinstance(action, p.WriteStatus):
            await self._write_status(snap, action, key)
        elif isinstance(action, p.Event):
            message = action.message
            if self.identity not in message:
                message = f"{message} [by {self.identity}]"
            self._post_event(namespace=ns, runtime=name, runtime_uid=o.uid, type_=action.type,
                             reason=action.reason, message=message, identity=self.identity)
            log.info("%s %s: %s", action.type, action.reason, action.message,
                     extra={"runtime": f"{ns}/{name}", "reason": action.reason})
        elif isinstance(action, p.Record):
            self._record(action)
        elif isinstance(action, p.EnsureService):
            svc = o.service
            try:
                seen(await services.apply_service(ns, action.manifest, uid=svc.uid if svc.exists and svc.owned else None),
                     "Service")
                local.service_taken = False
            except services.NotOwned:
                local.service_taken = True  # read it fresh next pass: Degraded NameConflict
                raise
        elif isinstance(action, p.DeleteService):
            if o.service.uid:
                await services.delete_service(ns, name, o.service.uid)
        elif isinstance(action, p.CreatePod):
            try:
                seen(await pods.create_pod(ns, action.manifest), "Pod")
                local.name_taken = False
            except client.ApiError as exc:
                if client.is_conflict(exc):
                    # AlreadyExists: a pod holds the runtime's name. The API server refused a
                    # second one; the next pass reads that name fresh and says whose it is.
                    local.name_taken = True
                    log.info("pod %s already exists: create refused by the API server", action.manifest["metadata"]["name"],
                             extra={"runtime": f"{ns}/{name}"})
                    return
                if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                    # Refused for good as sent (invalid pod, PodSecurity, quota): decide() records
                    # it, quoting the API server, and backs off with the Lease released.
                    local.pod_rejected = client.short(exc)  # counted when decide() records it
                    raise Aborted(f"pod create refused: {local.pod_rejected}") from exc
                raise
            log.info("created pod %s", action.manifest["metadata"]["name"], extra={"runtime": f"{ns}/{name}"})
        elif isinstance(action, p.SetServing):
            if not action.serving and action.pins_of is not None:
                self._check_pins_at_send(ns, name, action.pins_of)
            patched = await pods.patch_pod_serving(ns, action.pod, action.uid, action.serving)
            if patched is None:
                # The API server says this UID is gone (404 by name, or the name holds another
                # UID; UIDs are never reused). A view that still shows it (its watch behind)
                # would plan the same flip again at once, pass after pass: drop it from the view.
                self.views.pods.delete({"metadata": {"namespace": ns, "name": action.pod, "uid": action.uid}})
            seen(patched, "Pod")
        elif isinstance(action, p.DeletePod):
            seen(await pods.delete_pod(ns, action.pod, action.uid, action.grace_seconds))
            log.info("deleted pod %s uid=%s grace=%ss", action.pod, action.uid, action.grace_seconds,
                     extra={"runtime": f"{ns}/{name}"})
        elif isinstance(action, p.ForceDeletePod):
            await pods.force_delete_pod(ns, action.pod, action.uid)
            log.warning("force-deleted pod %s uid=%s", action.pod, action.uid, extra={"runtime": f"{ns}/{name}"})
        elif isinstance(action, p.SetClaimPhase):
            try:
                written = await claims.patch_claim_status(
                    ns, action.name, uid=action.uid, status_patch={"phase": action.phase, "message": action.message})
            except Exception as exc:  # a claim's phase is information, never a reason to stop
                log.warning("phase %s of claim %s not written: %s", action.phase, action.name, client.short(exc),
                            extra={"runtime": f"{ns}/{name}"})
                return
            seen(written, "ToolRuntimeClaim")
        else:  # pragma: no cover - exhaustive
            raise TypeError(f"unknown action {action!r}")

    def _check_pins_at_send(self, ns: str, name: str, generation: int) -> None:
        """decide() let admission stop on the view it planned from; this pass may send later (a
        pause, a slow pass). Pins are judged again on the view now, as the Lease's freshness is:
        a claim committed meanwhile, or a claims view no longer listed, stops the plan (fail
        closed); the next pass decides on what the view shows then."""
        found = pn.pins(claims=(c for c in map(snapshot_mod.claim_info, self.views.claims.by_label(ns, name))
                                if c is not None),
                        runtime=name, generation=generation, known=self.views.claims_known(ns))
        if found.pinned:
            metrics.PIN_RECHECK_ABORTS.inc()
            raise Aborted(f"admission to generation {generation} not stopped: {found.describe()} at send time")

    async def _acquire(
        self, snap: snapshot_mod.Snapshot, action: p.AcquireLease, local: snapshot_mod.Local, key: tuple[str, str],
        wake: Callable[[], None],
    ) -> None:
        ns, name = key
        if snap.lease is None:
            await self._check_token_for_new_lease(snap, action, key)
        sent = time.monotonic()
        try:
            written = await leases.acquire_lease(
                namespace=ns, name=mf.lease_name(name), runtime=name,
                runtime_uid=snap.observed.uid, identity=self.identity, token=action.token,
                duration_seconds=self.lease_seconds, now=utcnow(), observed=snap.lease,
            )
        except leases.LeaseLost as exc:
            metrics.LEASE_CONFLICTS.inc()
            raise Aborted(f"Lease not acquired: {exc}") from exc
        self.drop(key)
        self._seen(written, "Lease")
        held = HeldLease(token=action.token, duration=self.lease_seconds, renewed=sent, last=written)
        self.held[key] = held
        held.renewer = asyncio.create_task(self._renew_forever(key, wake), name=f"renew {ns}/{name}")
        if local.lock_wait_since is not None:
            metrics.LOCK_WAIT.observe(max(0.0, (utcnow() - local.lock_wait_since).total_seconds()))
            local.lock_wait_since = None
        log.info("acquired lifecycle Lease of %s/%s, fencing token %s", ns, name, action.token,
                 extra={"runtime": f"{ns}/{name}"})

    async def _check_token_for_new_lease(
        self, snap: snapshot_mod.Snapshot, action: p.AcquireLease, key: tuple[str, str],
    ) -> None:
        """Before the Lease is created (again): the token must be above every token used. The
        Lease that carried them may be gone (deleted with a runtime being finalized, or by a
        person), and this replica's runtimes watch may lag behind its Leases watch (separate
        streams), so the view's status token + 1 can be one used before (tests/chaos seed 3051).
        The runtime as stored is the record left: one authoritative read, once per Lease created."""
        stored = await self._read_runtime_into_view(key)
        if stored is None or (stored.get("metadata") or {}).get("uid") != snap.observed.uid:
            raise Aborted("the runtime is gone (or was created again): no Lease created for it")
        token = int((stored.get("status") or {}).get("fencingToken") or 0)
        if token >= action.token:
            raise Superseded(f"the runtime as stored carries fencing token {token}, this pass would "
                             f"create the Lease with {action.token}: read again")

    async def _read_runtime_into_view(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The runtime as stored now (an authoritative read), applied to the view; None if gone."""
        stored = await runtimes.read_runtime(*key)
        self._seen(stored, "ToolRuntime")
        return stored

    def _wrote(self, snap: snapshot_mod.Snapshot, written: dict[str, Any] | None) -> None:
        """A write of the runtime itself: applied to the view, and the base (resourceVersion,
        finalizers) of this plan's later writes of it."""
        self._seen(written, "ToolRuntime")
        if written is not None:
            snap.runtime = written

    async def _write_status(self, snap: snapshot_mod.Snapshot, action: p.WriteStatus, key: tuple[str, str]) -> None:
        ns, name = key
        o = snap.observed
        patch = runtimes.merge_patch(o.status.wire(), action.status.wire())
        if not patch:
            return
        # Always carry the token, changed or not: the CEL rule (new >= stored) is the fence
        # that rejects this write if another holder has written a newer token meanwhile.
        patch["fencingToken"] = action.status.fencing_token
        delayed = await self._fault_delay(action, key)
        # (A write held back by the fault injection skips this local check on purpose: that
        # test proves the API server's own fence, the CEL rule on fencingToken.)
        if not delayed and key in self.held and not self.holds(key):
            metrics.FENCING_REJECTIONS.inc()
            raise Aborted("status write refused: this replica's Lease is not fresh (safety margin)")
        # The version this plan was decided on (or its own last write of the runtime): a write
        # that reaches the API server after any later one, this holder's own included (delayed in
        # the network, sent again after a timeout), is refused instead of rolling status back.
        rv = str((snap.runtime.get("metadata") or {}).get("resourceVersion") or "")
        if delayed and os.environ.get("BATON_FAULT_STATUS_WRITE_FRESH_RV"):
            rv = await self._fault_fresh_rv(key) or rv
        try:
            self._wrote(snap, await runtimes.patch_runtime_status(ns, name, patch, resource_version=rv))
        except client.ApiError as exc:
            if client.is_conflict(exc):
                # Counted as baton_api_requests_total{verb="PATCH",resource="toolruntimes/status",code="409"}.
                await self._read_runtime_into_view(key)
                raise Superseded("status write refused: the runtime changed since this pass read it "
                                 f"(resourceVersion {rv}); read again") from exc
            text = client.short(exc)
            if exc.status == 422 and "fencingToken" in text:
                metrics.FENCING_REJECTIONS.inc()
                log.error("status write rejected by the API server, stale fencing token %s: %s",
                          action.status.fencing_token, text, extra={"runtime": f"{ns}/{name}"})
                self.drop(key)
                raise Aborted("fenced out by the API server") from exc
            if exc.status == 404 and key in self.held:
                # The runtime is gone: its deletion finished (Lease deleted, then the finalizer)
                # while this replica's view still had it, and the Lease was just created again
                # for it. Delete that one Lease (by UID) rather than leave it to the garbage
                # collector (found by tests/chaos seed 1).
                await self.abandon(key)
                raise Aborted("the runtime is gone: the Lease taken for it deleted") from exc
            raise

    async def _fault_delay(self, action: p.WriteStatus, key: tuple[str, str]) -> bool:
        """Fault injection for tests only: BATON_FAULT_DELAY_STATUS_WRITE="<step>=<seconds>".

        Delays a status write that moves a transition to <step>, so a test can freeze this
        process (SIGSTOP) between deciding and writing and prove the API server fences it.
        """
        spec = os.environ.get("BATON_FAULT_DELAY_STATUS_WRITE", "")
        step, _, seconds = spec.partition("=")
        t = action.status.transition
        if not step or t is None or str(t.step.value if isinstance(t.step, enum.Enum) else t.step) != step:
            return False
        log.warning("fault injection: delaying the status write to step %s by %ss (token %s)",
                    step, seconds, action.status.fencing_token, extra={"runtime": "/".join(key)})
        await asyncio.sleep(float(seconds or "0"))
        return True

    async def _fault_fresh_rv(self, key: tuple[str, str]) -> str | None:
        """Fault injection for tests only: BATON_FAULT_STATUS_WRITE_FRESH_RV=1 sends a delayed
        status write (above) with the runtime's resourceVersion read after the delay, so the
        resourceVersion precondition passes it and only the CEL rule on fencingToken can refuse it
        (a test of that rule on its own)."""
        fresh = await runtimes.read_runtime(*key)
        rv = (fresh or {}).get("metadata", {}).get("resourceVersion")
        log.warning("fault injection: the delayed status write carries the current resourceVersion %s", rv,
                    extra={"runtime": "/".join(key)})
        return str(rv) if rv else None

    def _record(self, action: p.Record) -> None:
        labels = dict(action.labels)
        m = p.Metric
        if action.metric == m.HANDOFFS:
            metrics.HANDOFFS.labels(**labels).inc()
        elif action.metric == m.CLEANUP_FAILURES:
            metrics.CLEANUP_FAILURES.labels(**labels).inc()
        elif action.metric == m.FORCE_RECOVERIES:
            metrics.FORCE_RECOVERIES.inc()
        elif action.metric == m.STALE_VERBS:
            metrics.STALE_VERBS.labels(**labels).inc()
        elif action.metric == m.DRAIN_INCOMPLETE:
            metrics.DRAIN_INCOMPLETE.inc()
        elif action.metric == m.CONNECT_TIMEOUTS:
            metrics.CONNECT_TIMEOUTS.inc()
        elif action.metric == m.LOCK_TIMEOUTS:
            metrics.LOCK_TIMEOUTS.inc()
        elif action.metric == m.STEP_DURATION:
            metrics.STEP_DURATION.labels(**labels).observe(action.value)
        elif action.metric == m.POD_REJECTIONS:
            metrics.POD_REJECTIONS.inc()
        elif action.metric == m.NAME_CONFLICTS:
            metrics.NAME_CONFLICTS.labels(**labels).inc()
        elif action.metric == m.TRANSITIONS:
            metrics.TRANSITIONS.labels(**labels).inc()
        elif action.metric == m.RETIREMENTS_BLOCKED:
            metrics.RETIREMENTS_BLOCKED_TOTAL.inc()
        elif action.metric == m.FORCE_RETIRES:
            metrics.FORCE_RETIRES.inc()


def _claim_phases_together(actions: tuple[p.Action, ...]) -> list[p.Action | tuple[p.SetClaimPhase, ...]]:
    """The plan's actions in order, each run of SetClaimPhase as one tuple (sent concurrently)."""
    out: list[p.Action | tuple[p.SetClaimPhase, ...]] = []
    for action in actions:
        if isinstance(action, p.SetClaimPhase) and out and isinstance(out[-1], tuple):
            out[-1] = (*out[-1], action)
        elif isinstance(action, p.SetClaimPhase):
            out.append((action,))
        else:
            out.append(action)
    return out
