"""The fenced status write of a runtime. Does I/O (through baton.k8s.runtimes, async).

A merge patch that always carries the fencing token (the CRD's CEL rule, new >= stored, is the
API server's fence) and the resourceVersion the plan was decided on (a write overtaken by any
later one, the writer's own included, is refused: 409, then read again and decided again).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any

from baton import faults as faults_mod
from baton import metrics
from baton.cache import snapshot
from baton.cache import views as views_mod
from baton.execute import leasekeeper, outcomes
from baton.k8s import client, runtimes
from baton.lifecycle import plan

log = logging.getLogger("baton.execute")


def wrote(views: views_mod.Views, snap: snapshot.Snapshot, written: dict[str, Any] | None) -> None:
    """A write of the runtime itself: applied to the view, and the base (resourceVersion,
    finalizers) of this plan's later writes of it."""
    views.apply(written, "ToolRuntime")
    if written is not None:
        snap.runtime = written


async def write_status(
    *, snap: snapshot.Snapshot, action: plan.WriteStatus, key: tuple[str, str], views: views_mod.Views,
    keeper: leasekeeper.LeaseKeeper, faults: faults_mod.Faults,
) -> None:
    ns, name = key
    o = snap.observed
    patch = runtimes.merge_patch(o.status.wire(), action.status.wire())
    if not patch:
        return
    # Always carry the token, changed or not: the CEL rule (new >= stored) is the fence
    # that rejects this write if another holder has written a newer token meanwhile.
    patch["fencingToken"] = action.status.fencing_token
    delayed = await _fault_delay(action, key, faults)
    # A write held back by the fault injection skips this local check on purpose: that test
    # proves the API server's own fence, the CEL rule on fencingToken.
    if not delayed and key in keeper.held and not keeper.holds(key):
        metrics.FENCING_REJECTIONS.inc()
        raise outcomes.Aborted("status write refused: this replica's Lease is not fresh (safety margin)")
    # The version this plan was decided on (or its own last write of the runtime): a write
    # that reaches the API server after any later one, this holder's own included (delayed in
    # the network, sent again after a timeout), is refused instead of rolling status back.
    rv = str((snap.runtime.get("metadata") or {}).get("resourceVersion") or "")
    if delayed and faults.status_write_fresh_rv:
        rv = await _fault_fresh_rv(key) or rv
    try:
        wrote(views, snap, await runtimes.patch_runtime_status(ns, name, patch, resource_version=rv))
    except client.ApiError as exc:
        if client.is_conflict(exc):
            # Counted as baton_api_requests_total{verb="PATCH",resource="toolruntimes/status",code="409"}.
            await views.reread_runtime(key)
            raise outcomes.Superseded("status write refused: the runtime changed since this pass read it "
                                      f"(resourceVersion {rv}); read again") from exc
        text = client.short(exc)
        if exc.status == 422 and "fencingToken" in text:
            metrics.FENCING_REJECTIONS.inc()
            log.error("status write rejected by the API server, stale fencing token %s: %s",
                      action.status.fencing_token, text, extra={"runtime": f"{ns}/{name}"})
            keeper.drop(key)
            raise outcomes.Aborted("fenced out by the API server") from exc
        if exc.status == 404 and key in keeper.held:
            # The runtime is gone: its deletion finished (Lease deleted, then the finalizer)
            # while this replica's view still had it, and the Lease was just created again for
            # it. Delete that one Lease (by UID) rather than leave it to the garbage collector.
            await keeper.abandon(key)
            raise outcomes.Aborted("the runtime is gone: the Lease taken for it deleted") from exc
        raise


async def _fault_delay(action: plan.WriteStatus, key: tuple[str, str], faults: faults_mod.Faults) -> bool:
    """Fault injection for tests only (baton.faults): delays a status write that moves a
    transition to the configured step."""
    step, _, seconds = faults.delay_status_write.partition("=")
    t = action.status.transition
    if not step or t is None or str(t.step.value if isinstance(t.step, enum.Enum) else t.step) != step:
        return False
    log.warning("fault injection: delaying the status write to step %s by %ss (token %s)",
                step, seconds, action.status.fencing_token, extra={"runtime": "/".join(key)})
    await asyncio.sleep(float(seconds or "0"))
    return True


async def _fault_fresh_rv(key: tuple[str, str]) -> str | None:
    """Fault injection for tests only (baton.faults): the runtime's resourceVersion read after
    the delay, so the resourceVersion precondition passes and only the CEL rule can refuse."""
    fresh = await runtimes.read_runtime(*key)
    rv = (fresh or {}).get("metadata", {}).get("resourceVersion")
    log.warning("fault injection: the delayed status write carries the current resourceVersion %s", rv,
                extra={"runtime": "/".join(key)})
    return str(rv) if rv else None
