"""Carries a Plan out: its actions in order, stopping at the first failure; what it came to is
returned as an Outcome. Does I/O (through the actions, async; no thread pool).

The fencing check is made here, once for every action that changes pods: it runs only while
this process holds the runtime's Lease fresh (baton.execute.leasekeeper).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from baton import clock as clock_mod
from baton import faults as faults_mod
from baton import metrics
from baton.cache import snapshot
from baton.cache import views as views_mod
from baton.execute import actions, leasekeeper, outcomes
from baton.execute import events as events_mod
from baton.k8s import client
from baton.lifecycle import plan

log = logging.getLogger("baton.execute")


class Executor:
    def __init__(self, *, identity: str, lease_seconds: int, views: views_mod.Views, clock: clock_mod.Clock,
                 faults: faults_mod.Faults) -> None:
        self.identity = identity
        self.views = views
        self.clock = clock
        self.faults = faults
        self.leases = leasekeeper.LeaseKeeper(identity=identity, lease_seconds=lease_seconds, views=views, clock=clock)
        self.events = events_mod.EventSender()

    async def execute(self, snap: snapshot.Snapshot, planned: plan.Plan, wake: Callable[[], None]) -> outcomes.Outcome:
        """Not ok when an action failed (the caller backs off); stops at the first failure. A plan
        cut short because the runtime changed since this pass read it is not a failure: the
        runtime was read again, to be decided again at once (again_now)."""
        o = snap.observed
        key = (o.namespace, o.name)
        outcome = outcomes.Outcome()
        ctx = actions.Context(snap=snap, key=key, outcome=outcome, views=self.views, keeper=self.leases,
                              events=self.events, identity=self.identity, clock=self.clock, faults=self.faults,
                              wake=wake)
        ctx.lease_free = planned.lease_free
        for action in claim_phases_together(planned.actions):
            try:
                if isinstance(action, tuple):
                    # Claims' phases are independent and never fail the plan (see actions): sent
                    # at once, so a fork's twenty claims hold the Lease for one round trip.
                    await asyncio.gather(*(self._one(ctx, a) for a in action))
                else:
                    await self._one(ctx, action)
            except outcomes.Superseded as exc:
                log.info("plan for %s/%s stopped: %s", o.namespace, o.name, exc, extra={"runtime": f"{o.namespace}/{o.name}"})
                outcome.again_now = True
                return outcome
            except outcomes.Aborted as exc:
                log.info("plan for %s/%s stopped: %s", o.namespace, o.name, exc, extra={"runtime": f"{o.namespace}/{o.name}"})
                outcome.ok = False
                return outcome
            except Exception as exc:
                outcome.last_error = client.short(exc)
                kind = "SetClaimPhase" if isinstance(action, tuple) else type(action).__name__
                metrics.ACTION_ERRORS.labels(action=kind).inc()
                log.warning(
                    "%s for %s/%s failed: %s", kind, o.namespace, o.name, outcome.last_error,
                    extra={"runtime": f"{o.namespace}/{o.name}"},
                )
                outcome.ok = False
                return outcome
        outcome.ran_through = bool(planned.actions)
        return outcome

    async def _one(self, ctx: actions.Context, action: plan.Action) -> None:
        if (isinstance(action, plan.FENCED) and not self.leases.holds(ctx.key)
                and not (ctx.lease_free and isinstance(action, plan.LEASE_FREE_IN_TERMINATING_NAMESPACE))):
            metrics.FENCING_REJECTIONS.inc()
            raise outcomes.Aborted(f"{type(action).__name__} refused: this replica does not hold a fresh Lease")
        handler = actions.HANDLERS.get(type(action))
        if handler is None:  # pragma: no cover - exhaustive
            raise TypeError(f"unknown action {action!r}")
        await handler(ctx, action)


def claim_phases_together(actions_: tuple[plan.Action, ...]) -> list[plan.Action | tuple[plan.SetClaimPhase, ...]]:
    """The plan's actions in order, each run of SetClaimPhase as one tuple (sent concurrently)."""
    out: list[plan.Action | tuple[plan.SetClaimPhase, ...]] = []
    for action in actions_:
        if isinstance(action, plan.SetClaimPhase) and out and isinstance(out[-1], tuple):
            out[-1] = (*out[-1], action)
        elif isinstance(action, plan.SetClaimPhase):
            out.append((action,))
        else:
            out.append(action)
    return out
