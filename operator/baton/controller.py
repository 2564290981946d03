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
from typing import Any, Callable, Iterable

from baton import clock as clock_mod
from baton import drainprobe, execute, exporter, hookcall, hooking, metrics, probing, reconcile, replicashare, sealing
from baton import triggers
from baton import faults as faults_mod
from baton import queue as queue_mod
from baton import settings as settings_mod
from baton.cache import snapshot, store, views as views_mod
from baton.k8s import client, gateways
from baton.k8s import runtimes as runtimes_api
from baton.model import names
from baton.model import observed as observed_mod
from baton.sharding import keeper as shard_keeper
from baton.sharding import ranges as ranges_mod

log = logging.getLogger("baton.runner")

Key = tuple[str, str]
# A worker keeps a runtime for at most this many passes in a row before requeueing it.
MAX_PASSES_PER_TURN = 25
# A runtime whose range's renewals are late is looked at again after this long.
RANGE_LAPSE_RETRY_SECONDS = 1.0


class Controller:
    def __init__(self, settings: settings_mod.Settings, *, clock: clock_mod.Clock, faults: faults_mod.Faults) -> None:
        self.settings = settings
        self.clock = clock
        self.views = views_mod.Views(namespaces=settings.namespaces, watch_configmaps=settings.watch_configmaps,
                                     watch_secrets=settings.watch_secrets, system_namespace=settings.system_namespace,
                                     shard_ranges=settings.shard_ranges,
                                     tool_pod_isolation=observed_mod.ToolPodIsolation(
                                         system_namespace=settings.system_namespace,
                                         operator_pod_labels=settings.operator_pod_labels)
                                     if settings.isolate_tool_pods else None)
        self.executor = execute.Executor(identity=settings.identity, lease_seconds=settings.lease_seconds,
                                         views=self.views, clock=clock, faults=faults)
        self.configs = triggers.ConfigIndex(on_unreferenced=self.views.forget_config)
        # Drain probes run apart from the workers: a tool that hangs holds a probe slot of its
        # own runtime, never a worker every runtime needs.
        self.probes = probing.Probes(
            prober=drainprobe.Prober(allowed=settings.probe_allowed), concurrency=settings.probe_concurrency,
            clock=clock, wake=lambda key: self.wake(*key))
        self.hooks = hooking.Hooks(caller=hookcall.Caller(allowed=settings.probe_allowed),  # spec.hooks, the same way
                                   concurrency=settings.probe_concurrency, clock=clock, wake=lambda key: self.wake(*key))
        self.gateways = sealing.ApiGateways(namespace=settings.system_namespace, clock=clock,
                                            admin_key_file=settings.gateway_admin_key_file,
                                            leases=self.views.gateway_leases_listed)
        self.reconciler = reconcile.Reconciler(
            identity=settings.identity, lease_seconds=settings.lease_seconds,
            backoff_base_seconds=settings.backoff_base_seconds, views=self.views, executor=self.executor,
            probes=self.probes, clock=clock, configs=self.configs,
            gateways=self.gateways, bridge_image=settings.image, hooks=self.hooks,
        )
        # One replica of the installation reports the per-runtime series (baton.exporter).
        self.exporter = exporter.Exporter(
            namespace=settings.system_namespace, name=names.metrics_lease_name(settings.namespaces),
            identity=settings.identity, duration_seconds=settings.lease_seconds, clock=clock)
        held = self.executor.leases.held
        # A runtime whose Lease this replica holds is mid-transition: served first, so it finishes
        # and hands the Lease back instead of renewing it while new work queues ahead of it.
        self.queue: queue_mod.WorkQueue[Key] = queue_mod.WorkQueue(first=lambda key: key in held,
                                                                   observer=metrics.QueueObserver())
        self.backoff: queue_mod.Backoff[Key] = queue_mod.Backoff()
        self.budget: queue_mod.PassBudget[Key] = queue_mod.PassBudget()
        # Sharding (BATON_SHARD_RANGES): which runtimes this replica tries (baton.replicashare).
        self.share = replicashare.ReplicaShare(
            settings=settings, clock=clock, views=self.views, held=held, queue=self.queue, wake=self.wake,
            forget=lambda key: self.reconciler.forget(key))
        self.ranges = self.share.ranges
        self.shutting_down = False
        self.started = False
        self.busy = 0
        metrics.WORKERS_MAX.set(settings.workers)
        self._workers: list[asyncio.Task[None]] = []
        self._resync: asyncio.Task[None] | None = None
        self._exporting: asyncio.Task[None] | None = None
        self._unwatching: asyncio.Task[None] | None = None

    # --- wiring: view changes enqueue runtimes ---------------------------------------------------

    async def prepare(self) -> None:
        """Before start: sharded, whether the API server filters ToolRuntimes by shardSelector
        (then each range's are listed and watched apart; else all, filtered here)."""
        if self.settings.shard_ranges:
            scope = self.settings.namespaces[0] if self.settings.namespaces else None
            try:
                self.views.runtimes_sharded = await runtimes_api.shard_selector_honoured(scope)
            except Exception as exc:  # no answer: the fallback is correct either way
                log.warning("could not tell whether the API server honours shardSelector: %s", client.short(exc))
            log.info("sharded: ToolRuntimes %s", "listed and watched per range (shardSelector)"
                     if self.views.runtimes_sharded else "all listed and watched: the API server ignores shardSelector")

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
        if v.network_policies is not None:
            v.network_policies.listeners.append(self._listener(triggers.by_label(names.LABEL_RUNTIME)))
        v.gateway_pods.listeners.append(self._listener(
            lambda old, new: triggers.on_gateway_pod(old, new, endpoint=snapshot.gateway_endpoint, routed=self._routed)))
        # A gateway replica that begins holding calls for an idle runtime lists it on its Lease:
        # that runtime's pass runs at once (the wake starts), not at the next resync.
        v.gateway_leases.listeners.append(self._listener(
            gateway_lease_trigger(self.gateways.demand_sightings, self.clock.monotonic)))
        if v.configmaps is not None:
            v.configmaps.listeners.append(self._listener(self.configs.on_config("ConfigMap")))
        if v.secrets is not None:
            v.secrets.listeners.append(self._listener(self.configs.on_config("Secret")))
        # The informers on a pool of their own: with many watched namespaces their long watches
        # would otherwise take every connection the writes need.
        v.start(client.open_watches(informers=v.informer_count()))
        if self.ranges is not None:
            self.ranges.start()
            self._unwatching = asyncio.create_task(self.share.unwatch_forever(), name="baton range watches")
        for i in range(self.settings.workers):
            self._workers.append(asyncio.create_task(self._work(), name=f"baton worker {i}"))
        self._resync = asyncio.create_task(self._resync_forever(), name="baton resync")
        self._exporting = asyncio.create_task(self.exporter.run(), name="baton metrics lease")

    def _routed(self) -> list[Key]:
        """The runtimes in view whose spec asks for the gateway (their EndpointSlice lists its pods)."""
        return [store.key_of(rt) for rt in self.views.runtimes.items()
                if (((rt.get("spec") or {}).get("service") or {}).get("gateway") is True)]

    async def _resync_forever(self) -> None:
        """Every resync_seconds, each runtime in view gets a pass within the next period (an
        earlier wake-up it already has stands: add_after keeps the earliest)."""
        period = float(self.settings.resync_seconds)
        while not self.shutting_down:
            await asyncio.sleep(period)
            keys = [store.key_of(rt) for rt in list(self.views.runtimes.items()) if self.share.mine_runtime(rt)]
            for key, delay in triggers.resync(keys, period=period, draw=random.random):
                if not self.shutting_down:
                    self.queue.add_after(key, delay)
            metrics.RESYNCS.inc()

    def wake(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key in self.executor.leases.held or (not self.shutting_down and self.share.mine(key)):
            self.queue.add(key)

    def _listener(self, trigger: triggers.Trigger) -> store.Listener:
        def listener(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            for key, delay in trigger(old, new):
                if delay <= 0:
                    self.wake(*key)
                elif not self.shutting_down and self.share.mine(key):
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
                self.queue.add_rate_limited(key, self.backoff.when(key))
            finally:
                self.busy -= 1
                metrics.WORKERS_BUSY.set(self.busy)
                self.queue.done(key)

    async def _turn(self, key: Key) -> None:
        """Passes of one runtime while they ask to act at once; then its wait becomes a wake-up."""
        ns, name = key
        for _ in range(MAX_PASSES_PER_TURN):
            standing = self.share.standing(key)
            holding = key in self.executor.leases.held
            if standing == shard_keeper.Standing.OTHER and not holding:
                return  # another replica's runtime: it tries it
            if standing == shard_keeper.Standing.LAPSED and not holding:
                # The range's renewals are late: start nothing, look again shortly (the runtime's
                # own Lease still fences whatever a held transition does meanwhile).
                self.queue.add_after(key, RANGE_LAPSE_RETRY_SECONDS)
                return
            throttle = self.budget.take(key)
            if throttle > 0:
                metrics.PASSES_THROTTLED.inc()
                self.queue.add_rate_limited(key, throttle)
                return
            if standing == shard_keeper.Standing.MINE and self.ranges is not None:
                await self.share.adopt(key)
            started = time.monotonic()
            try:
                # Not this replica's any more but its Lease held: like a shutdown, the transition
                # is persisted and its Lease handed back, nothing new is started.
                result = await self.reconciler.reconcile(
                    key, wake=lambda: self.wake(ns, name),
                    shutting_down=self.shutting_down or standing == shard_keeper.Standing.OTHER)
            except Exception:
                metrics.PASSES.labels(result=metrics.PassResult.ERROR.value).inc()  # a crash: _work logs it
                raise
            finally:
                metrics.PASS_DURATION.observe(time.monotonic() - started)
            metrics.PASSES.labels(result=pass_result(result).value).inc()
            if result.gone:
                self.backoff.forget(key)
                self.budget.forget(key)
                return
            if result.moved:
                self.budget.refund(key)
            if result.failed:
                self.queue.add_rate_limited(key, self.backoff.when(key))
                return
            self.backoff.forget(key)
            if result.again_now:
                continue
            if result.wait is not None:
                self.queue.add_after(key, result.wait)
            return
        self.queue.add(key)  # still asking to act at once: back of the line, fair to the others

    def running(self) -> list[float]:
        """Seconds each worker's turn under way has run (baton_queue_unfinished_work_seconds)."""
        return self.queue.running()

    # --- shutdown -------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Start nothing new; runtimes this process holds take one more turn, which persists where
        they are and hands their Lease back; anything left is released at the end."""
        held = self.executor.leases.held
        self.shutting_down = True
        metrics.SHUTTING_DOWN.set(1)
        if self.ranges is not None:
            # Ranges first: the others take them over while this replica's held runtimes finish
            # their turn (they then wait only for each runtime's own Lease, handed back below).
            await self.ranges.stop()
        for key in list(held):
            self.queue.add(key)
        deadline = time.monotonic() + self.settings.shutdown_grace_seconds
        while held and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.queue.shut_down()
        tasks = [*self._workers, *(t for t in (self._resync, self._exporting, self._unwatching) if t is not None)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.exporter.release()
        await self.probes.close()
        await self.hooks.close()
        await self.gateways.close()
        if held:
            log.warning("%d runtimes still held after the shutdown grace", len(held))
        await self.executor.leases.release_all()
        await self.executor.events.flush(timeout=5.0)
        await self.views.stop()

    def idle_runtimes(self) -> int | None:
        """baton_runtimes_idle: the runtimes in view that are idle, on the replica(s) that report
        the per-runtime series (as runtime_gauges: sharded, each its own ranges'); None elsewhere."""
        if self.ranges is None and not self.exporter.active():
            return None
        return sum(1 for rt in list(self.views.runtimes.items()) if is_idle(rt) and self.share.mine_runtime(rt))

    def runtime_gauges(self) -> Iterable[tuple[str, str, dict[str, str], float | None, float | None]]:
        """Every runtime's last status, on the replica that reports them (baton.exporter); none elsewhere.
        Sharded, each replica reports the runtimes of its own ranges instead: it runs passes (so
        knows the status) of those only, and the ranges do not overlap."""
        if self.ranges is None and not self.exporter.active():
            return
        for (ns, name), last in list(self.reconciler.last_status.items()):
            if self.ranges is not None:
                rt = self.views.runtimes.get(ns, name)
                if rt is None or not self.share.mine_runtime(rt):
                    continue
            yield ns, name, last.conditions, last.started, last.budget_sum if last.started is not None else None


def is_idle(rt: dict[str, Any]) -> bool:
    """status.idle.since set: the runtime is idle (no generation until a wake)."""
    idle = (rt.get("status") or {}).get("idle")
    return isinstance(idle, dict) and bool(idle.get("since"))


def gateway_lease_trigger(sightings: ranges_mod.Sightings, monotonic: Callable[[], float]) -> triggers.Trigger:
    """A gateway replica's Lease seen by the watch: recorded in `sightings` by this process's
    clock (a write seen is what makes its demand believed: sealing.demanding), and the runtimes
    it lists as demanded due at once (wake_demanded)."""
    def trigger(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[tuple[Key, float]]:
        if new is not None:
            meta = new.get("metadata") or {}
            name, uid, version = meta.get("name"), meta.get("uid"), meta.get("resourceVersion")
            if name and uid and version:
                sightings.observe(name=str(name), version=f"{uid}/{version}", now=monotonic())
        return wake_demanded(old, new)
    return trigger


def wake_demanded(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[tuple[Key, float]]:
    """A gateway Lease written: the runtimes its ANN_WAKE_DEMAND lists, each due at once. Every
    write, not only the one that added a runtime: a demand first seen before its replica was seen
    writing (this process just started) is believed at the replica's next write (its renewal),
    and that pass must run then. Demand lists only runtimes idle with calls held: few, briefly."""
    if new is None or (old is not None and (old.get("metadata") or {}).get("resourceVersion")
                       == (new.get("metadata") or {}).get("resourceVersion")):
        return []
    listed = gateways.wake_demand(new)
    return [((ns, name), 0.0) for ns, name in sorted(tuple(k.split("/", 1)) for k in listed)]


def pass_result(result: reconcile.Result) -> metrics.PassResult:
    """The `result` label of one pass (controller-runtime's: error, requeue, requeue_after, success)."""
    if result.failed:
        return metrics.PassResult.ERROR
    if result.gone:
        return metrics.PassResult.SUCCESS
    if result.again_now:
        return metrics.PassResult.REQUEUE
    if result.wait is not None:
        return metrics.PassResult.REQUEUE_AFTER
    return metrics.PassResult.SUCCESS
