"""The controller: watch events and deadlines enqueue runtimes; a bounded number of workers
take them one at a time and run passes (baton.reconcile). Does I/O (through the views it starts,
and the pass).

The shape controller-runtime gives Go operators: reading (watch-fed views) apart from acting
(a rate-limited queue, bounded workers). A runtime waiting in the queue holds no worker; a worker
keeps a runtime while its passes ask to act at once (so a Lease it just took is used at once,
never left to expire in the queue), and hands it back with its wait as a wake-up.
One runtime's passes are strictly sequential (the queue never gives a key to two workers);
across processes they are serialized by the runtime's Lease. The controller knows keys and
Results only: what a pass's Result means for the queue is decided in one place, `_turn`.
Drain probes are a component of their own (baton.probing.Probes, owned here): a pass starts the
probe it needs and returns; the answer wakes the runtime, so a probe never holds a worker.
"""

from __future__ import annotations

import asyncio
import random
import logging
import time
from typing import Any, Iterable

from baton import clock as clock_mod
from baton import drainprobe, execute, metrics, probing, reconcile, sealing, triggers
from baton import faults as faults_mod
from baton import queue as queue_mod
from baton import settings as settings_mod
from baton.cache import store, views as views_mod
from baton.k8s import client
from baton.model import names

log = logging.getLogger("baton.runner")

Key = tuple[str, str]
# A worker keeps a runtime for at most this many passes in a row before requeueing it.
MAX_PASSES_PER_TURN = 25


class Controller:
    def __init__(self, settings: settings_mod.Settings, *, clock: clock_mod.Clock, faults: faults_mod.Faults) -> None:
        self.settings = settings
        self.clock = clock
        self.views = views_mod.Views(namespaces=settings.namespaces, watch_configmaps=settings.watch_configmaps,
                                     watch_secrets=settings.watch_secrets)
        self.executor = execute.Executor(identity=settings.identity, lease_seconds=settings.lease_seconds,
                                         views=self.views, clock=clock, faults=faults)
        self.configs = triggers.ConfigIndex(on_unreferenced=self.views.forget_config)
        # Drain probes run apart from the workers: a tool that hangs holds a probe slot of its
        # own runtime, never a worker every runtime needs.
        self.probes = probing.Probes(
            prober=drainprobe.Prober(allowed=settings.probe_allowed), concurrency=settings.probe_concurrency,
            clock=clock, wake=lambda key: self.wake(*key))
        self.reconciler = reconcile.Reconciler(
            identity=settings.identity, lease_seconds=settings.lease_seconds,
            backoff_base_seconds=settings.backoff_base_seconds, views=self.views, executor=self.executor,
            probes=self.probes, clock=clock, configs=self.configs,
            gateways=sealing.ApiGateways(namespace=settings.system_namespace, clock=clock),
        )
        held = self.executor.leases.held
        # A runtime whose Lease this replica holds is mid-transition: served first, so it finishes
        # and hands the Lease back instead of renewing it while new work queues ahead of it.
        self.queue: queue_mod.WorkQueue[Key] = queue_mod.WorkQueue(first=lambda key: key in held)
        self.backoff: queue_mod.Backoff[Key] = queue_mod.Backoff()
        self.budget: queue_mod.PassBudget[Key] = queue_mod.PassBudget()
        self.shutting_down = False
        self.started = False
        self.busy = 0
        self._workers: list[asyncio.Task[None]] = []
        self._resync: asyncio.Task[None] | None = None

    # --- wiring: view changes enqueue runtimes ---------------------------------------------------

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        v = self.views
        v.runtimes.listeners.append(self._listener(triggers.on_runtime))
        v.claims.listeners.append(self._listener(
            lambda old, new: triggers.on_claim(old, new, runtime_of=views_mod.claim_runtime,
                                               in_transition=self._in_transition)))
        v.pods.listeners.append(self._listener(triggers.by_label(names.LABEL_RUNTIME)))
        v.services.listeners.append(self._listener(triggers.by_label(names.LABEL_RUNTIME)))
        v.slices.listeners.append(self._listener(triggers.by_label(views_mod.SERVICE_NAME_LABEL)))
        v.leases.listeners.append(self._listener(triggers.on_lease(names.LABEL_RUNTIME)))
        if v.configmaps is not None:
            v.configmaps.listeners.append(self._listener(self.configs.on_config("ConfigMap")))
        if v.secrets is not None:
            v.secrets.listeners.append(self._listener(self.configs.on_config("Secret")))
        # The informers on a pool of their own: with many watched namespaces their long watches
        # would otherwise take every connection the writes need.
        v.start(client.open_watches(informers=v.informer_count()))
        for i in range(self.settings.workers):
            self._workers.append(asyncio.create_task(self._work(), name=f"baton worker {i}"))
        self._resync = asyncio.create_task(self._resync_forever(), name="baton resync")

    async def _resync_forever(self) -> None:
        """Every resync_seconds, each runtime in view gets a pass within the next period (an
        earlier wake-up it already has stands: add_after keeps the earliest)."""
        period = float(self.settings.resync_seconds)
        while not self.shutting_down:
            await asyncio.sleep(period)
            keys = [store.key_of(rt) for rt in list(self.views.runtimes.items())]
            for key, delay in triggers.resync(keys, period=period, draw=random.random):
                if not self.shutting_down:
                    self.queue.add_after(key, delay)
            metrics.RESYNCS.inc()

    def wake(self, namespace: str, name: str) -> None:
        if not self.shutting_down or (namespace, name) in self.executor.leases.held:
            self.queue.add((namespace, name))

    def _listener(self, trigger: triggers.Trigger) -> store.Listener:
        def listener(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            for key, delay in trigger(old, new):
                if delay <= 0:
                    self.wake(*key)
                elif not self.shutting_down:
                    self.queue.add_after(key, delay)
        return listener

    def _in_transition(self, namespace: str, name: str) -> bool:
        rt = self.views.runtimes.get(namespace, name)
        return rt is not None and bool((rt.get("status") or {}).get("transition"))

    # --- workers --------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except queue_mod.ShutDown:
                return
            self.busy += 1
            metrics.WORKERS_BUSY.set(self.busy)
            try:
                await self._turn(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.PASS_ERRORS.inc()
                log.exception("pass of %s/%s crashed; again after a back-off", *key,
                              extra={"runtime": "/".join(key)})
                self.queue.add_after(key, self.backoff.when(key))
            finally:
                self.busy -= 1
                metrics.WORKERS_BUSY.set(self.busy)
                metrics.QUEUE_DEPTH.set(len(self.queue))
                self.queue.done(key)

    async def _turn(self, key: Key) -> None:
        """Passes of one runtime while they ask to act at once; then its wait becomes a wake-up."""
        ns, name = key
        for _ in range(MAX_PASSES_PER_TURN):
            throttle = self.budget.take(key)
            if throttle > 0:
                metrics.PASSES_THROTTLED.inc()
                self.queue.add_after(key, throttle)
                return
            result = await self.reconciler.reconcile(key, wake=lambda: self.wake(ns, name),
                                                     shutting_down=self.shutting_down)
            if result.gone:
                self.backoff.forget(key)
                self.budget.forget(key)
                return
            if result.moved:
                self.budget.refund(key)
            if result.failed:
                self.queue.add_after(key, self.backoff.when(key))
                return
            self.backoff.forget(key)
            if result.again_now:
                continue
            if result.wait is not None:
                self.queue.add_after(key, result.wait)
            return
        self.queue.add(key)  # still asking to act at once: back of the line, fair to the others

    # --- shutdown -------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Start nothing new; runtimes this process holds take one more turn, which persists where
        they are and hands their Lease back; anything left is released at the end."""
        held = self.executor.leases.held
        self.shutting_down = True
        metrics.SHUTTING_DOWN.set(1)
        for key in list(held):
            self.queue.add(key)
        deadline = time.monotonic() + self.settings.shutdown_grace_seconds
        while held and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.queue.shut_down()
        tasks = [*self._workers, *([self._resync] if self._resync is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.probes.close()
        if held:
            log.warning("%d runtimes still held after the shutdown grace", len(held))
        await self.executor.leases.release_all()
        await self.executor.events.flush(timeout=5.0)
        await self.views.stop()

    def runtime_gauges(self) -> Iterable[tuple[str, str, dict[str, str], float | None, float | None]]:
        for (ns, name), (s, budget_sum) in list(self.reconciler.last_status.items()):
            conds = {c.type: c.status for c in s.conditions}
            started = s.transition.started_at.timestamp() if s.transition else None
            yield ns, name, conds, started, budget_sum if started is not None else None
