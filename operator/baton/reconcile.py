"""One pass of one runtime: memory → snapshot → probe answers → gateway seal → decide → execute →
Result. Does I/O (through baton.cache, baton.execute and the gateways; probes it needs are started
on the Probes runner, never waited for).

The pass knows one runtime and returns what the queue should do as a Result; it never imports
the controller (`wake` is a parameter). What the run of a plan learnt comes back as an Outcome
and is folded into this pass's own Memory, read by the next pass's snapshot.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from typing import Callable

from baton import clock as clock_mod
from baton import execute, hooking, lifecycle, metrics, probing, sealing, triggers
from baton.cache import snapshot
from baton.cache import views as views_mod
from baton.lifecycle import manifests, plan
from baton.model import status as status_mod

log = logging.getLogger("baton.runner")

Key = tuple[str, str]


# How many of its own fencing tokens a runtime's memory keeps: a transition written under one of
# them was acted on by this process, which knows what its create came to (lifecycle.lease).
TOKENS_KEPT = 4


@dataclasses.dataclass
class Memory(snapshot.Learnt):
    """What this process knows about a runtime that is not in the API, from pass to pass: what it
    learnt by acting (written here only), and the snapshot's parse-once memo."""

    snapshot: snapshot.SnapshotMemo = dataclasses.field(default_factory=snapshot.SnapshotMemo)

    def fold(self, outcome: execute.Outcome) -> None:
        """What the run of a plan learnt (this memory's one writer besides the pass itself)."""
        if outcome.lease_acquired_at is not None and self.lock_wait_since is not None:
            metrics.LOCK_WAIT.observe(max(0.0, (outcome.lease_acquired_at - self.lock_wait_since).total_seconds()))
        if outcome.lease_acquired_at is not None:
            self.lock_wait_since = None
        if outcome.lease_token is not None:
            self.tokens_here = (*self.tokens_here, outcome.lease_token)[-TOKENS_KEPT:]
        if outcome.last_error is not None:
            self.last_error = outcome.last_error
        if outcome.pod_rejected is not None:
            self.pod_rejected = outcome.pod_rejected
        if outcome.create_in_doubt is not None:
            self.create_in_doubt = outcome.create_in_doubt  # inert once that number is given up
        if outcome.name_taken is not None:
            self.name_taken = outcome.name_taken
        if outcome.service_taken is not None:
            self.service_taken = outcome.service_taken
        if outcome.service_error is not None:
            self.service_error = outcome.service_error or None
        if outcome.lease_outside_view is not None:
            self.lease_outside_view = outcome.lease_outside_view or None
        if outcome.namespace_terminating:
            self.namespace_terminating = True  # a namespace being deleted never comes back
        if outcome.ran_through:
            self.last_error = None
            self.pod_rejected = None  # recorded in status by this plan
        self.snapshot.reads += outcome.reads


class GaugeStatus(typing.NamedTuple):
    """A runtime's last status, as far as the runtime gauges report it."""

    conditions: dict[str, str]  # type -> "True"/"False"/"Unknown"
    started: float | None  # the transition under way's start (epoch seconds)
    budget_sum: float  # its budgets' sum: the bound its duration is compared with


@dataclasses.dataclass(frozen=True)
class Result:
    """What one pass asks of the queue."""

    wait: float | None = None  # wake the runtime after this long (None: only an event wakes it)
    again_now: bool = False  # the plan asks to act again at once
    failed: bool = False  # an action failed: back off
    moved: bool = False  # the pass only read, or took the lifecycle a step on: not charged
    gone: bool = False  # the runtime no longer exists: everything about it forgotten


class Reconciler:
    def __init__(
        self, *, identity: str, lease_seconds: int, backoff_base_seconds: float, views: views_mod.Views,
        executor: execute.Executor, probes: probing.Probes, clock: clock_mod.Clock, configs: triggers.ConfigIndex,
        gateways: sealing.Gateways | None = None, bridge_image: str = "", hooks: hooking.Hooks | None = None,
    ) -> None:
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.backoff_base_seconds = backoff_base_seconds
        self.bridge_image = bridge_image  # BATON_IMAGE: stdio runtimes' pods copy the bridge from it
        self.views = views
        self.executor = executor
        self.probes = probes
        self.hooks = hooks  # spec.hooks' calls (None: hooks are never called; their runs time out)
        self.gateways = gateways
        self.clock = clock
        self.configs = configs
        self.memories: dict[Key, Memory] = {}
        # What the runtime gauges report of each runtime's last status (baton.exporter): a few
        # values, not the status model, which a steady runtime would otherwise keep for nothing.
        self.last_status: dict[Key, GaugeStatus] = {}

    async def reconcile(self, key: Key, *, wake: Callable[[], None], shutting_down: bool) -> Result:
        planned = await self.decide(key, shutting_down=shutting_down)
        if planned is None:
            return Result(gone=True)
        snap, decided = planned
        return await self.act(snap, decided, wake=wake)

    async def decide(self, key: Key, *, shutting_down: bool) -> tuple[snapshot.Snapshot, plan.Plan] | None:
        """The first half of a pass: what to do. None when the runtime is gone (its Lease, if
        this process holds it, deleted; everything about it forgotten)."""
        ns, name = key
        memory = self.memories.get(key)
        if memory is None:
            memory = self.memories[key] = Memory()
        leases = self.executor.leases
        facts = snapshot.Facts(
            identity=self.identity, lease_duration_seconds=self.lease_seconds,
            backoff_base_seconds=self.backoff_base_seconds, lease_held_here=leases.holds(key),
            shutting_down=shutting_down, bridge_image=self.bridge_image,
        )
        snap = await snapshot.read_snapshot(self.views, ns, name, memo=memory.snapshot, learnt=memory, facts=facts,
                                            clock=self.clock)
        if snap is None:
            await leases.abandon(key)
            self.forget(key)
            return None
        o = snap.observed
        self.configs.update(key, [] if o.spec_error else manifests.config_refs(o.spec.template))
        # Never waits for a probe: a due one is started apart, its answer wakes the runtime again.
        snap.observed = o = probing.observe(snap, key=key, probes=self.probes, holds=leases.holds(key), clock=self.clock)
        memory.idle_checked_at = o.idle_checked_at
        if self.hooks is not None:
            snap.observed = o = hooking.observe(snap, key=key, hooks=self.hooks, holds=leases.holds(key), clock=self.clock)
        snap.observed = o = await sealing.observe(o, gateways=self.gateways, holds=leases.holds(key))
        t = o.status.transition
        b = o.spec.budgets
        pin_wait = b.pin_seconds if t is not None and t.pin_wait_since is not None else 0
        self.last_status[key] = GaugeStatus(
            conditions={c.type: c.status for c in o.status.conditions},
            started=t.started_at.timestamp() if t is not None else None,
            budget_sum=float(b.lock_seconds + b.connect_seconds + b.drain_seconds + b.cleanup_seconds + pin_wait))
        decided = lifecycle.decide(o, self.clock.wall())
        if decided.lease_wait or decided.find(plan.AcquireLease):
            if memory.lock_wait_since is None:
                memory.lock_wait_since = self.clock.wall()
        elif not leases.holds(key):
            memory.lock_wait_since = None
        if decided.actions:
            log.debug("plan %s: %s (%s)", name, decided.kinds(), decided.note, extra={"runtime": f"{ns}/{name}"})
        return snap, decided

    async def act(self, snap: snapshot.Snapshot, decided: plan.Plan, *, wake: Callable[[], None]) -> Result:
        """The second half of a pass: carry the plan out, fold what it learnt into memory."""
        o = snap.observed
        key = (o.namespace, o.name)
        # The budget stops a runtime that keeps acting without getting anywhere (a foreign actor
        # undoing our writes, a flapping spec). A pass that only read the cache, or one that takes
        # the lifecycle a step on (finite per transition), is not charged: a handoff always runs
        # at full speed.
        moved = not decided.actions or moves_forward(o.status, decided)
        outcome = await self.executor.execute(snap, decided, wake)
        memory = self.memories.get(key)
        if memory is not None:
            memory.fold(outcome)
        if outcome.again_now:
            wake()  # the runtime was read again: decide again at once
        if not outcome.ok:
            return Result(failed=True, moved=moved)
        if memory is not None and o.status.transition is None and decided.wait_seconds is None and not outcome.again_now:
            # At rest, nothing scheduled: the next pass comes with a change, most likely a new
            # version (parsed anew), so this version's parse is not kept for a runtime at rest.
            memory.snapshot.parsed_rv = memory.snapshot.parsed = None
        return Result(wait=decided.wait_seconds, again_now=decided.wait_seconds == 0, moved=moved)

    def forget(self, key: Key) -> None:
        self.executor.leases.drop(key)
        self.probes.forget(key)
        if self.hooks is not None:
            self.hooks.forget(key)
        self.memories.pop(key, None)
        self.last_status.pop(key, None)
        self.configs.update(key, [])


def _where(status: status_mod.ToolRuntimeStatus) -> tuple[object, ...]:
    t, cur = status.transition, status.current
    return (None if t is None else (t.to, t.step), None if cur is None else cur.generation)


def moves_forward(before: status_mod.ToolRuntimeStatus, planned: plan.Plan) -> bool:
    """Whether `planned` takes the lifecycle a step on: persists another transition step (or
    starts or ends one, or a new current generation), or creates or deletes a pod."""
    if planned.find(plan.CreatePod) or planned.find(plan.DeletePod) or planned.find(plan.ForceDeletePod):
        return True
    return any(_where(write.status) != _where(before) for write in planned.find(plan.WriteStatus))
