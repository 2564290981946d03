"""Carries a Plan out through ``baton.k8s``, keeps the Leases this process holds, records metrics.

Does I/O (through baton.k8s, in worker threads). Pod-changing actions are fenced locally: they
run only while this process holds the runtime's Lease and renewed it within its duration.
Status writes are fenced by the API server (CEL rule on status.fencingToken).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import time
from typing import Any, Callable

from baton import metrics
from baton.k8s import client, events, leases, observe, pods, runtimes, services
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p

log = logging.getLogger("baton.execute")


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclasses.dataclass
class HeldLease:
    token: int
    duration: int
    renewed: float  # time.monotonic() of the last successful acquire/renew
    renewer: asyncio.Task[None] | None = None

    def fresh(self) -> bool:
        # Stop acting a second before the Lease could expire for others.
        return time.monotonic() - self.renewed < self.duration - 1.0


class Aborted(Exception):
    """The rest of the plan must not run; re-observe."""


class Executor:
    def __init__(self, *, identity: str, lease_seconds: int) -> None:
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.held: dict[tuple[str, str], HeldLease] = {}

    # --- Lease keeping -----------------------------------------------------------------------

    def holds(self, key: tuple[str, str]) -> bool:
        held = self.held.get(key)
        return held is not None and held.fresh()

    def drop(self, key: tuple[str, str]) -> None:
        held = self.held.pop(key, None)
        if held and held.renewer and held.renewer is not asyncio.current_task():
            held.renewer.cancel()

    async def _renew_forever(self, key: tuple[str, str], wake: Callable[[], None]) -> None:
        ns, name = key
        while True:
            held = self.held.get(key)
            if held is None:
                return
            await asyncio.sleep(max(0.5, held.duration / 3))
            held = self.held.get(key)
            if held is None:
                return
            try:
                await asyncio.to_thread(
                    leases.renew_lease, namespace=ns, name=mf.lease_name(name),
                    identity=self.identity, token=held.token, now=utcnow(),
                )
                held.renewed = time.monotonic()
            except leases.LeaseLost as exc:
                log.warning("lost lifecycle Lease of %s/%s: %s", ns, name, exc, extra={"runtime": f"{ns}/{name}"})
                metrics.LEASE_CONFLICTS.inc()
                self.drop(key)
                wake()
                return
            except Exception as exc:  # transient API trouble: retry at the next tick
                log.warning("Lease renewal of %s/%s failed: %s", ns, name, client.short(exc))

    # --- the plan ----------------------------------------------------------------------------

    async def execute(
        self,
        snap: observe.Snapshot,
        plan: p.Plan,
        local: observe.Local,
        wake: Callable[[], None],
    ) -> bool:
        """True if every action succeeded. Stops at the first failure."""
        o = snap.observed
        key = (o.namespace, o.name)
        for action in plan.actions:
            try:
                await self._one(snap, action, local, key, wake)
            except Aborted as exc:
                log.info("plan for %s/%s stopped: %s", o.namespace, o.name, exc, extra={"runtime": f"{o.namespace}/{o.name}"})
                return False
            except Exception as exc:
                local.last_error = client.short(exc)
                metrics.ACTION_ERRORS.labels(action=type(action).__name__).inc()
                log.warning(
                    "%s for %s/%s failed: %s", type(action).__name__, o.namespace, o.name, local.last_error,
                    extra={"runtime": f"{o.namespace}/{o.name}"},
                )
                return False
        if plan.actions:
            local.last_error = None
        return True

    async def _one(
        self,
        snap: observe.Snapshot,
        action: p.Action,
        local: observe.Local,
        key: tuple[str, str],
        wake: Callable[[], None],
    ) -> None:
        o = snap.observed
        ns, name = key
        meta: dict[str, Any] = snap.runtime.get("metadata") or {}
        if isinstance(action, p.FENCED) and not self.holds(key):
            metrics.FENCING_REJECTIONS.inc()
            raise Aborted(f"{type(action).__name__} refused: this replica does not hold a fresh Lease")
        run = asyncio.to_thread
        if isinstance(action, p.AddFinalizer):
            fins = list(meta.get("finalizers") or []) + [mf.FINALIZER]
            await run(runtimes.patch_runtime_finalizers, ns, name, fins, meta["resourceVersion"])
        elif isinstance(action, p.RemoveFinalizer):
            fins = [f for f in meta.get("finalizers") or [] if f != mf.FINALIZER]
            await run(runtimes.patch_runtime_finalizers, ns, name, fins, meta["resourceVersion"])
        elif isinstance(action, p.RemoveAnnotation):
            await run(runtimes.patch_runtime_metadata, ns, name, {"annotations": {action.key: None}})
        elif isinstance(action, p.AcquireLease):
            await self._acquire(o, action, local, key, wake)
        elif isinstance(action, p.ReleaseLease):
            self.drop(key)
            await run(leases.release_lease, namespace=ns, name=mf.lease_name(name), identity=self.identity)
        elif isinstance(action, p.DeleteLease):
            self.drop(key)
            await run(leases.delete_lease, ns, mf.lease_name(name))
        elif isinstance(action, p.WriteStatus):
            await self._write_status(o, action, key, str(meta.get("resourceVersion") or ""))
        elif isinstance(action, p.Event):
            message = action.message
            if self.identity not in message:
                message = f"{message} [by {self.identity}]"
            try:
                await run(events.emit_event, namespace=ns, runtime=name, runtime_uid=o.uid, type_=action.type,
                          reason=action.reason, message=message, identity=self.identity)
            except Exception as exc:  # an event is a notification, never a reason to stop
                log.warning("event %s for %s/%s not posted: %s", action.reason, ns, name, client.short(exc))
            log.info("%s %s: %s", action.type, action.reason, action.message,
                     extra={"runtime": f"{ns}/{name}", "reason": action.reason})
        elif isinstance(action, p.Record):
            self._record(action)
        elif isinstance(action, p.EnsureService):
            await run(services.apply_service, ns, action.manifest)
        elif isinstance(action, p.DeleteService):
            await run(services.delete_service, ns, name)
        elif isinstance(action, p.CreatePod):
            try:
                await run(pods.create_pod, ns, action.manifest)
            except client.ApiException as exc:
                if not client.is_conflict(exc):  # AlreadyExists: the next observation adopts it
                    raise
            log.info("created pod %s", action.manifest["metadata"]["name"], extra={"runtime": f"{ns}/{name}"})
        elif isinstance(action, p.SetServing):
            await run(pods.patch_pod_serving, ns, action.pod, action.uid, action.serving)
        elif isinstance(action, p.DeletePod):
            await run(pods.delete_pod, ns, action.pod, action.uid, action.grace_seconds)
            log.info("deleted pod %s uid=%s grace=%ss", action.pod, action.uid, action.grace_seconds,
                     extra={"runtime": f"{ns}/{name}"})
        elif isinstance(action, p.ForceDeletePod):
            await run(pods.force_delete_pod, ns, action.pod, action.uid)
            log.warning("force-deleted pod %s uid=%s", action.pod, action.uid, extra={"runtime": f"{ns}/{name}"})
        else:  # pragma: no cover - exhaustive
            raise TypeError(f"unknown action {action!r}")

    async def _acquire(
        self, o: Any, action: p.AcquireLease, local: observe.Local, key: tuple[str, str], wake: Callable[[], None]
    ) -> None:
        ns, name = key
        try:
            await asyncio.to_thread(
                leases.acquire_lease, namespace=ns, name=mf.lease_name(name), runtime=name, runtime_uid=o.uid,
                identity=self.identity, token=action.token, duration_seconds=self.lease_seconds, now=utcnow(),
            )
        except leases.LeaseLost as exc:
            metrics.LEASE_CONFLICTS.inc()
            raise Aborted(f"Lease not acquired: {exc}") from exc
        self.drop(key)
        held = HeldLease(token=action.token, duration=self.lease_seconds, renewed=time.monotonic())
        self.held[key] = held
        held.renewer = asyncio.create_task(self._renew_forever(key, wake), name=f"renew {ns}/{name}")
        if local.lock_wait_since is not None:
            metrics.LOCK_WAIT.observe(max(0.0, (utcnow() - local.lock_wait_since).total_seconds()))
            local.lock_wait_since = None
        log.info("acquired lifecycle Lease of %s/%s, fencing token %s", ns, name, action.token,
                 extra={"runtime": f"{ns}/{name}"})

    async def _write_status(self, o: Any, action: p.WriteStatus, key: tuple[str, str], snap_rv: str) -> None:
        ns, name = key
        patch = runtimes.merge_patch(o.status.wire(), action.status.wire())
        if not patch:
            return
        # Always carry the token, changed or not: the CEL rule (new >= stored) is the fence
        # that rejects this write if another holder has written a newer token meanwhile.
        patch["fencingToken"] = action.status.fencing_token
        await self._fault_delay(action, key)
        try:
            rv = None if key in self.held else (snap_rv or None)
            await asyncio.to_thread(runtimes.patch_runtime_status, ns, name, patch, resource_version=rv)
        except client.ApiException as exc:
            text = client.short(exc)
            if exc.status == 422 and "fencingToken" in text:
                metrics.FENCING_REJECTIONS.inc()
                log.error("status write rejected by the API server, stale fencing token %s: %s",
                          action.status.fencing_token, text, extra={"runtime": f"{ns}/{name}"})
                self.drop(key)
                raise Aborted("fenced out by the API server") from exc
            raise

    async def _fault_delay(self, action: p.WriteStatus, key: tuple[str, str]) -> None:
        """Fault injection for tests only: BATON_FAULT_DELAY_STATUS_WRITE="<step>=<seconds>".

        Delays a status write that moves a transition to <step>, so a test can freeze this
        process (SIGSTOP) between deciding and writing and prove the API server fences it.
        """
        spec = os.environ.get("BATON_FAULT_DELAY_STATUS_WRITE", "")
        step, _, seconds = spec.partition("=")
        t = action.status.transition
        if not step or t is None or t.step.value != step:
            return
        log.warning("fault injection: delaying the status write to step %s by %ss (token %s)",
                    step, seconds, action.status.fencing_token, extra={"runtime": "/".join(key)})
        await asyncio.sleep(float(seconds or "0"))

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
        elif action.metric == m.TRANSITIONS:
            metrics.TRANSITIONS.labels(**labels).inc()
