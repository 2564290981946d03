"""The controller: watch events and deadlines enqueue runtimes; a bounded number of workers
take them one at a time: snapshot from the views → decide → execute. Does I/O (through
baton.cache, baton.execute and baton.drainprobe).

The shape controller-runtime gives Go operators: reading (watch-fed views) apart from acting
(a rate-limited queue, bounded workers). A runtime waiting in the queue holds no worker; a worker
keeps a runtime while its passes ask to act at once (so a Lease it just took is used at once,
never left to expire in the queue), and hands it back with its wait as a wake-up.
One runtime's passes are strictly sequential (the queue never gives a key to two workers);
across processes they are serialized by the runtime's Lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterable

from baton import clock as clock_mod
from baton import drainprobe, execute, lifecycle, metrics, settings as settings_mod
from baton import faults as faults_mod
from baton import queue as q
from baton.cache import snapshot as snapshot_mod
from baton.cache import store as st_mod
from baton.cache import views as vw
from baton.k8s import client
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import spec as spec_model
from baton.model import status as st

log = logging.getLogger("baton.runner")

Key = tuple[str, str]
# A worker keeps a runtime for at most this many passes in a row before requeueing it.
MAX_PASSES_PER_TURN = 25
# A claim only changes what a retire would do: while the runtime is in no transition its claims'
# events wait this long, so a burst of them (an agent forking twenty branches) is one pass.
CLAIM_SETTLE_SECONDS = 1.0


class Runner:
    def __init__(self, settings: settings_mod.Settings, *, clock: clock_mod.Clock, faults: faults_mod.Faults) -> None:
        self.settings = settings
        self.clock = clock
        self.views = vw.Views(namespaces=settings.namespaces, watch_configmaps=settings.watch_configmaps,
                              watch_secrets=settings.watch_secrets)
        self.executor = execute.Executor(identity=settings.identity, lease_seconds=settings.lease_seconds,
                                         views=self.views, clock=clock, faults=faults)
        self.prober = drainprobe.Prober(allowed=settings.probe_allowed, concurrency=settings.probe_concurrency)
        # A runtime whose Lease this replica holds is mid-transition: served first, so it finishes
        # and hands the Lease back instead of renewing it while new work queues ahead of it.
        self.queue: q.WorkQueue[Key] = q.WorkQueue(first=lambda key: key in self.executor.leases.held)
        self.backoff: q.Backoff[Key] = q.Backoff()
        self.budget: q.PassBudget[Key] = q.PassBudget()
        self.locals: dict[Key, snapshot_mod.Local] = {}
        self.last_status: dict[Key, tuple[st.ToolRuntimeStatus, float]] = {}
        # (namespace, kind, name) of a ConfigMap/Secret -> runtimes whose template references it
        self.config_users: dict[tuple[str, str, str], set[str]] = {}
        self.shutting_down = False
        self.started = False
        self.busy = 0
        self._workers: list[asyncio.Task[None]] = []

    # --- wiring: view changes enqueue runtimes ---------------------------------------------------

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        v = self.views
        v.runtimes.listeners.append(self._on_runtime)
        v.claims.listeners.append(self._on_claim)
        v.pods.listeners.append(self._by_label(st_mod.RUNTIME_LABEL))
        v.services.listeners.append(self._by_label(st_mod.RUNTIME_LABEL))
        v.slices.listeners.append(self._by_label(vw.SERVICE_NAME_LABEL))
        v.leases.listeners.append(self._on_lease)
        if v.configmaps is not None:
            v.configmaps.listeners.append(self._on_config("ConfigMap"))
        if v.secrets is not None:
            v.secrets.listeners.append(self._on_config("Secret"))
        v.start(client.work())
        for i in range(self.settings.workers):
            self._workers.append(asyncio.create_task(self._work(), name=f"baton worker {i}"))

    def wake(self, namespace: str, name: str) -> None:
        if not self.shutting_down or (namespace, name) in self.executor.leases.held:
            self.queue.add((namespace, name))

    def _on_runtime(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new or old
        if obj is not None:
            meta = obj["metadata"]
            self.wake(meta.get("namespace") or "", meta["name"])

    def _on_claim(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        # A claim pins (or stops pinning) the generation of the runtime it names. Its status is
        # ours (Bound/Stale): an update that leaves the spec alone (same metadata.generation)
        # changes nothing to decide on, so our own phase writes never wake the runtime again.
        if old is not None and new is not None and (
                (old.get("metadata") or {}).get("generation") == (new.get("metadata") or {}).get("generation")):
            return
        for obj in (old, new):
            runtime = vw.claim_runtime(obj) if obj is not None else None
            if obj is None or not runtime:
                continue
            ns = (obj.get("metadata") or {}).get("namespace") or ""
            rt = self.views.runtimes.get(ns, runtime)
            if rt is not None and (rt.get("status") or {}).get("transition"):
                self.wake(ns, runtime)  # a retire may be waiting on this claim: at once
            elif not self.shutting_down:
                self.queue.add_after((ns, runtime), CLAIM_SETTLE_SECONDS)

    def _by_label(self, label: str) -> st_mod.Listener:
        def listener(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            for obj in (old, new):
                if obj is None:
                    continue
                meta = obj.get("metadata") or {}
                value = (meta.get("labels") or {}).get(label)
                if value:
                    self.wake(meta.get("namespace") or "", value)
        return listener

    def _on_lease(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        # A renewal (ours or another's) changes nothing to decide on: only a change of holder
        # (or a Lease gone) wakes the runtime. Expiry of a foreign Lease is a timed wake-up.
        def holder(obj: dict[str, Any] | None) -> object:
            return None if obj is None else (obj.get("spec") or {}).get("holderIdentity") or ""
        if old is not None and new is not None and holder(old) == holder(new):
            return
        obj = new or old
        meta = (obj or {}).get("metadata") or {}
        runtime = (meta.get("labels") or {}).get(st_mod.RUNTIME_LABEL)
        if runtime:
            self.wake(meta.get("namespace") or "", runtime)

    def _on_config(self, kind: str) -> st_mod.Listener:
        def listener(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            obj = new or old
            if obj is None or (old is not None and new is not None and old.get("digest") == new.get("digest")):
                return
            meta = obj["metadata"]
            for runtime in sorted(self.config_users.get((meta.get("namespace") or "", kind, meta["name"]), ())):
                self.wake(meta.get("namespace") or "", runtime)
        return listener

    def index_config_refs(self, key: Key, refs: list[tuple[str, str, bool]]) -> None:
        ns, runtime = key
        wanted = {(ns, kind, name) for kind, name, _ in refs}
        for ref_key, users in list(self.config_users.items()):
            if ref_key[0] == ns and runtime in users and ref_key not in wanted:
                users.discard(runtime)
                if not users:
                    del self.config_users[ref_key]
        for ref_key in wanted:
            self.config_users.setdefault(ref_key, set()).add(runtime)

    # --- workers --------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except q.ShutDown:
                return
            self.busy += 1
            metrics.WORKERS_BUSY.set(self.busy)
            try:
                await self._turn(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pass of %s/%s crashed; again after a back-off", *key)
                self.queue.add_after(key, self.backoff.when(key))
            finally:
                self.busy -= 1
                metrics.WORKERS_BUSY.set(self.busy)
                metrics.QUEUE_DEPTH.set(len(self.queue))
                self.queue.done(key)

    def _local(self, key: Key) -> snapshot_mod.Local:
        local = self.locals.get(key)
        if local is None:
            s = self.settings
            local = self.locals[key] = snapshot_mod.Local(
                identity=s.identity, lease_duration_seconds=s.lease_seconds, backoff_base_seconds=s.backoff_base_seconds)
        return local

    async def _turn(self, key: Key) -> None:
        """Passes of one runtime while they ask to act at once; then its wait becomes a wake-up."""
        ns, name = key
        local = self._local(key)
        for _ in range(MAX_PASSES_PER_TURN):
            throttle = self.budget.take(key)
            if throttle > 0:
                metrics.PASSES_THROTTLED.inc()
                self.queue.add_after(key, throttle)
                return
            local.shutting_down = self.shutting_down
            local.lease_held_here = self.executor.leases.holds(key)
            snap = await snapshot_mod.read_snapshot(self.views, ns, name, local)
            if snap is None:
                await self.executor.leases.abandon(key)
                self._forget(key)
                return
            o = snap.observed
            self.index_config_refs(key, [] if o.spec_error else mf.config_refs(o.spec.template))
            t = o.status.transition
            if (t is not None and t.step == st.Step.DRAINING and o.spec.drain.probe is not None and t.from_uid
                    and self.executor.leases.holds(key)):
                # Only the Lease holder probes: other replicas never dial the pod.
                retiring = next((pd for pd in snap.pods if pd["metadata"]["uid"] == t.from_uid), None)
                if retiring is not None:
                    result = await self.prober.probe(pod=retiring, probe=o.spec.drain.probe)
                    snap.observed = o = o.model_copy(update={"drain_idle": result.idle, "drain_probe_error": result.error})
            elif (t is None and o.status.pending is not None and o.spec.drain.probe is not None
                  and o.status.current is not None and o.spec.handoff.policy == spec_model.HandoffPolicy.WHEN_IDLE
                  and self.executor.leases.holds(key) and lifecycle.idle_check_due(o, self.clock.wall())):
                # A change waits for idle (handoff policy WhenIdle): decide() takes the Lease only
                # when a check is due, so this probe runs at most once per check interval.
                serving = next((pd for pd in snap.pods if pd["metadata"]["uid"] == o.status.current.uid), None)
                idle: bool = False
                error: str | None = "the serving pod is not in view"
                if serving is not None:
                    result = await self.prober.probe(pod=serving, probe=o.spec.drain.probe)
                    idle, error = result.idle, result.error
                local.idle_checked_at = self.clock.wall()
                snap.observed = o = o.model_copy(update={"drain_idle": idle, "drain_probe_error": error,
                                                         "idle_checked_at": local.idle_checked_at})
            b = o.spec.budgets
            pin_wait = b.pin_seconds if t is not None and t.pin_wait_since is not None else 0
            self.last_status[key] = (o.status, float(b.lock_seconds + b.connect_seconds + b.drain_seconds
                                                      + b.cleanup_seconds + pin_wait))
            plan = lifecycle.decide(o, self.clock.wall())
            if plan.lease_wait or plan.find(p.AcquireLease):
                if local.lock_wait_since is None:
                    local.lock_wait_since = self.clock.wall()
            elif not self.executor.leases.holds(key):
                local.lock_wait_since = None
            if plan.actions:
                log.debug("plan %s: %s (%s)", name, plan.kinds(), plan.note, extra={"runtime": f"{ns}/{name}"})
            if not plan.actions or moves_forward(o.status, plan):
                # The budget stops a runtime that keeps acting without getting anywhere (a
                # foreign actor undoing our writes, a flapping spec). A pass that only read the
                # cache, or one that takes the lifecycle a step on (finite per transition), is
                # not charged: a handoff always runs at full speed.
                self.budget.refund(key)
            outcome = await self.executor.execute(snap, plan, lambda: self.wake(ns, name))
            _fold(local, outcome)
            if outcome.again_now:
                self.wake(ns, name)
            if not outcome.ok:
                self.queue.add_after(key, self.backoff.when(key))
                return
            self.backoff.forget(key)
            if plan.wait_seconds == 0:
                continue
            if plan.wait_seconds is not None:
                self.queue.add_after(key, plan.wait_seconds)
            return
        self.queue.add(key)  # still asking to act at once: back of the line, fair to the others

    def _forget(self, key: Key) -> None:
        self.executor.leases.drop(key)
        self.locals.pop(key, None)
        self.last_status.pop(key, None)
        self.backoff.forget(key)
        self.budget.forget(key)
        self.index_config_refs(key, [])

    # --- shutdown -------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Start nothing new; runtimes this process holds take one more turn, which persists where
        they are and hands their Lease back; anything left is released at the end."""
        self.shutting_down = True
        metrics.SHUTTING_DOWN.set(1)
        for key in list(self.executor.leases.held):
            self.queue.add(key)
        deadline = time.monotonic() + self.settings.shutdown_grace_seconds
        while self.executor.leases.held and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.queue.shut_down()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self.executor.leases.held:
            log.warning("%d runtimes still held after the shutdown grace", len(self.executor.leases.held))
        await self.executor.leases.release_all()
        await self.executor.events.flush(timeout=5.0)
        await self.views.stop()

    def runtime_gauges(self) -> Iterable[tuple[str, str, dict[str, str], float | None, float | None]]:
        for (ns, name), (s, budget_sum) in list(self.last_status.items()):
            conds = {c.type: c.status for c in s.conditions}
            started = s.transition.started_at.timestamp() if s.transition else None
            yield ns, name, conds, started, budget_sum if started is not None else None


def _fold(local: snapshot_mod.Local, outcome: execute.Outcome) -> None:
    """What the plan's run learnt, into this process's memory of the runtime."""
    if outcome.lease_acquired_at is not None and local.lock_wait_since is not None:
        metrics.LOCK_WAIT.observe(max(0.0, (outcome.lease_acquired_at - local.lock_wait_since).total_seconds()))
    if outcome.lease_acquired_at is not None:
        local.lock_wait_since = None
    if outcome.last_error is not None:
        local.last_error = outcome.last_error
    if outcome.pod_rejected is not None:
        local.pod_rejected = outcome.pod_rejected
    if outcome.name_taken is not None:
        local.name_taken = outcome.name_taken
    if outcome.service_taken is not None:
        local.service_taken = outcome.service_taken
    if outcome.ran_through:
        local.last_error = None
        local.pod_rejected = None  # recorded in status by this plan
    local.reads += outcome.reads


def _where(status: st.ToolRuntimeStatus) -> tuple[object, ...]:
    t, cur = status.transition, status.current
    return (None if t is None else (t.to, t.step), None if cur is None else cur.generation)


def moves_forward(before: st.ToolRuntimeStatus, plan: p.Plan) -> bool:
    """Whether `plan` takes the lifecycle a step on: persists another transition step (or starts
    or ends one, or a new current generation), or creates or deletes a pod."""
    if plan.find(p.CreatePod) or plan.find(p.DeletePod) or plan.find(p.ForceDeletePod):
        return True
    return any(_where(write.status) != _where(before) for write in plan.find(p.WriteStatus))
