"""One worker per runtime: observe → decide → execute, woken by watch events or its own timer.

Does I/O (through baton.k8s and baton.execute). Workers of different runtimes run
concurrently; one runtime's steps are strictly sequential inside its worker, and across
processes they are serialized by the runtime's Lease.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Iterable

from baton import drainprobe, execute, metrics, settings as settings_mod
from baton.k8s import client, leases, observe
from baton.lifecycle import manifests as mf
from baton import lifecycle
from baton.lifecycle import plan as p
from baton.model import status as st

log = logging.getLogger("baton.runner")

# Per runtime, passes are rate-limited by a token bucket: a handoff's burst of steps runs at
# once, but no input (a decide/observe disagreement, an API error that repeats) can turn into
# more than PASS_RATE passes a second for one runtime.
PASS_BURST = 20.0
PASS_RATE = 1.0
# Failed passes back off exponentially with jitter, up to this many seconds.
FAILURE_BACKOFF_CAP = 30.0


class PassBucket:
    def __init__(self, *, burst: float = PASS_BURST, rate: float = PASS_RATE) -> None:
        self.burst, self.rate = burst, rate
        self.tokens = burst
        self.at = time.monotonic()

    def take(self) -> float:
        """Seconds to wait before the next pass (0: go now); takes a token."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        wait = (1.0 - self.tokens) / self.rate
        self.tokens = 0.0
        self.at = now + wait
        return wait


def failure_backoff(failures: int) -> float:
    return float(min(FAILURE_BACKOFF_CAP, 0.5 * 2 ** min(failures, 8)) * random.uniform(0.8, 1.2))


class Worker:
    def __init__(self, runner: "Runner", namespace: str, name: str) -> None:
        self.runner = runner
        self.key = (namespace, name)
        self.woken = asyncio.Event()
        s = runner.settings
        self.local = observe.Local(
            identity=s.identity, lease_duration_seconds=s.lease_seconds, backoff_base_seconds=s.backoff_base_seconds
        )
        self.last_status: st.ToolRuntimeStatus | None = None
        self.last_budget_sum: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.bucket = PassBucket()

    def wake(self) -> None:
        self.woken.set()

    async def run(self) -> None:
        ns, name = self.key
        extra = {"runtime": f"{ns}/{name}"}
        failures = 0
        while True:
            throttle = self.bucket.take()
            if throttle > 0:
                metrics.PASSES_THROTTLED.inc()
                await asyncio.sleep(throttle)
            self.woken.clear()
            self.local.shutting_down = self.runner.shutting_down
            self.local.lease_held_here = self.runner.executor.holds(self.key)
            try:
                snap = await asyncio.to_thread(observe.read_snapshot, ns, name, self.local)
            except Exception as exc:
                failures += 1
                delay = failure_backoff(failures)
                log.warning("observing %s/%s failed (%s); again in %.1fs", ns, name, client.short(exc), delay, extra=extra)
                if self.runner.shutting_down:
                    return
                await self._sleep(delay)
                continue
            if snap is None:
                self.runner.executor.drop(self.key)
                self.last_status = None
                return
            o = snap.observed
            self.runner.index_config_refs(self.key, [] if o.spec_error else mf.config_refs(o.spec.template))
            t = o.status.transition
            if (t is not None and t.step == st.Step.DRAINING and o.spec.drain.probe is not None and t.from_uid
                    and self.runner.executor.holds(self.key)):
                # Only the Lease holder probes: other replicas never dial the pod.
                retiring = next((pd for pd in snap.pods if pd["metadata"]["uid"] == t.from_uid), None)
                if retiring is not None:
                    result = await self.runner.prober.probe(pod=retiring, probe=o.spec.drain.probe)
                    snap.observed = o = o.model_copy(update={"drain_idle": result.idle, "drain_probe_error": result.error})
            self.last_status = o.status
            b = o.spec.budgets
            self.last_budget_sum = float(b.lock_seconds + b.connect_seconds + b.drain_seconds + b.cleanup_seconds)
            plan = lifecycle.decide(o, execute.utcnow())
            if plan.lease_wait or plan.find(p.AcquireLease):
                if self.local.lock_wait_since is None:
                    self.local.lock_wait_since = execute.utcnow()
            elif not self.runner.executor.holds(self.key):
                self.local.lock_wait_since = None
            if plan.actions:
                log.debug("plan %s: %s (%s)", name, plan.kinds(), plan.note, extra=extra)
            ok = await self.runner.executor.execute(snap, plan, self.local, self.wake)
            if self.runner.shutting_down and not self.runner.executor.holds(self.key) and (
                not plan.actions or all(isinstance(a, (p.ReleaseLease, p.Record, p.Event)) for a in plan.actions)
            ):
                return  # nothing held, nothing started: this worker is done
            if not ok:
                failures += 1
                await self._sleep(failure_backoff(failures))
                continue
            failures = 0
            if plan.wait_seconds == 0:
                continue
            await self._sleep(plan.wait_seconds)

    async def _sleep(self, seconds: float | None) -> None:
        if self.runner.shutting_down and seconds is None:
            seconds = 0.0
        try:
            await asyncio.wait_for(self.woken.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass


class Runner:
    def __init__(self, settings: settings_mod.Settings) -> None:
        self.settings = settings
        self.executor = execute.Executor(identity=settings.identity, lease_seconds=settings.lease_seconds)
        self.prober = drainprobe.Prober(allowed=settings.probe_allowed, concurrency=settings.probe_concurrency)
        self.workers: dict[tuple[str, str], Worker] = {}
        # (namespace, kind, name) of a ConfigMap/Secret -> runtimes whose template references it
        self.config_users: dict[tuple[str, str, str], set[str]] = {}
        self.shutting_down = False

    def wake(self, namespace: str, name: str, *, create: bool = True) -> None:
        key = (namespace, name)
        worker = self.workers.get(key)
        if worker is None or (worker.task is not None and worker.task.done()):
            if not create or self.shutting_down:
                return
            worker = Worker(self, namespace, name)
            self.workers[key] = worker
            worker.task = asyncio.create_task(self._run(worker), name=f"runtime {namespace}/{name}")
        worker.wake()

    def index_config_refs(self, key: tuple[str, str], refs: list[tuple[str, str, bool]]) -> None:
        ns, runtime = key
        wanted = {(ns, kind, name) for kind, name, _ in refs}
        for ref_key, users in list(self.config_users.items()):
            if ref_key[0] == ns and runtime in users and ref_key not in wanted:
                users.discard(runtime)
                if not users:
                    del self.config_users[ref_key]
        for ref_key in wanted:
            self.config_users.setdefault(ref_key, set()).add(runtime)

    def wake_config_users(self, namespace: str, kind: str, name: str) -> None:
        """A referenced ConfigMap/Secret changed (watch event): its runtimes re-hash their template."""
        for runtime in sorted(self.config_users.get((namespace, kind, name), ())):
            self.wake(namespace, runtime, create=False)

    async def _run(self, worker: Worker) -> None:
        try:
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("worker of %s/%s crashed; restarting it in 5s", *worker.key)
            if self.workers.get(worker.key) is worker:
                del self.workers[worker.key]
            asyncio.get_running_loop().call_later(5.0, self.wake, *worker.key)
            return
        if self.workers.get(worker.key) is worker:
            del self.workers[worker.key]

    async def shutdown(self) -> None:
        """Start nothing new; let each worker finish its action in flight, hand back its Lease."""
        self.shutting_down = True
        metrics.SHUTTING_DOWN.set(1)
        for w in list(self.workers.values()):
            w.wake()
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_seconds)
            for t in pending:
                t.cancel()
            if pending:
                log.warning("%d runtime workers did not finish within the shutdown grace", len(pending))
        # Anything still held (a worker cancelled mid-step) is handed back; the next holder resumes.
        for key in list(self.executor.held):
            ns, name = key
            self.executor.drop(key)
            try:
                await asyncio.to_thread(leases.release_lease, namespace=ns, name=mf.lease_name(name),
                                        identity=self.settings.identity)
            except Exception as exc:
                log.warning("could not release Lease of %s/%s: %s", ns, name, client.short(exc))

    def runtime_gauges(self) -> Iterable[tuple[str, str, dict[str, str], float | None, float | None]]:
        for (ns, name), w in list(self.workers.items()):
            s = w.last_status
            if s is None:
                continue
            conds = {c.type: c.status for c in s.conditions}
            started = s.transition.started_at.timestamp() if s.transition else None
            yield ns, name, conds, started, w.last_budget_sum if started is not None else None
