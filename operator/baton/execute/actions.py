"""One coroutine per kind of action, and the table the executor dispatches through. Does I/O
(through baton.k8s, async).

Every object a write returns is applied to the watch-fed views (read-your-writes: the next pass
never sees an older state than it wrote). The API server is the fence: a pod create is refused
while any pod of the runtime exists (one name per runtime), deletes and relabels carry the pod's
UID, status writes carry the resourceVersion and fencing token (baton.execute.statuswrite).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Any, Awaitable, Callable

from baton import clock as clock_mod
from baton import faults as faults_mod
from baton import metrics
from baton.cache import snapshot
from baton.cache import views as views_mod
from baton.execute import events as events_mod
from baton.execute import leasekeeper, outcomes, statuswrite
from baton.k8s import api, claims, client, leases, networkpolicies, pods, runtimes, services
from baton.lifecycle import pins
from baton.lifecycle import plan
from baton.model import claims as claims_model
from baton.model import names

log = logging.getLogger("baton.execute")


@dataclasses.dataclass
class Context:
    """What an action runs with: the pass's snapshot and the executor's parts."""

    snap: snapshot.Snapshot
    key: tuple[str, str]
    outcome: outcomes.Outcome
    views: views_mod.Views
    keeper: leasekeeper.LeaseKeeper
    events: events_mod.EventSender
    identity: str
    clock: clock_mod.Clock
    faults: faults_mod.Faults
    wake: Callable[[], None]
    lease_free: bool = False  # the plan may relabel and delete pods without the Lease (Plan.lease_free)

    def wrote(self, written: dict[str, Any] | None) -> None:
        statuswrite.wrote(self.views, self.snap, written)

    @property
    def where(self) -> dict[str, str]:
        return {"runtime": "/".join(self.key)}


async def add_finalizer(ctx: Context, action: plan.AddFinalizer) -> None:
    ns, name = ctx.key
    meta: dict[str, Any] = ctx.snap.runtime.get("metadata") or {}
    fins = list(meta.get("finalizers") or []) + [names.FINALIZER]
    ctx.wrote(await runtimes.patch_runtime_finalizers(ns, name, fins, meta["resourceVersion"]))


async def remove_finalizer(ctx: Context, action: plan.RemoveFinalizer) -> None:
    ns, name = ctx.key
    meta: dict[str, Any] = ctx.snap.runtime.get("metadata") or {}
    fins = [f for f in meta.get("finalizers") or [] if f != names.FINALIZER]
    unfinalized = await runtimes.patch_runtime_finalizers(ns, name, fins, meta["resourceVersion"])
    ctx.wrote(unfinalized)
    wmeta = (unfinalized or {}).get("metadata") or {}
    if unfinalized is not None and wmeta.get("deletionTimestamp") and not wmeta.get("finalizers"):
        # Deleting with no finalizer left: the API server has removed it. A pass woken (by the
        # Lease's or Service's DELETED) before the runtime's own DELETED arrives would find it in
        # the view with our finalizer and take the Lease again: drop it now.
        ctx.views.runtimes.delete(unfinalized)


async def confirm_no_pod(ctx: Context, action: plan.ConfirmNoPod) -> None:
    ns, _ = ctx.key
    ctx.outcome.reads += 1
    pod = await pods.read_pod(ns, action.pod)
    if pod is not None and client.owned_by(pod, ctx.snap.observed.uid):
        # Not in the views (label edited off, or created late): the next pass reads the name
        # fresh (name_taken) and retires it before anything else goes.
        ctx.outcome.name_taken = True
        raise outcomes.Superseded(f"pod {action.pod} uid={pod['metadata']['uid']} still exists: retire it first")


async def remove_annotation(ctx: Context, action: plan.RemoveAnnotation) -> None:
    ns, name = ctx.key
    removed = await runtimes.remove_annotation(ns, name, action.key, action.value)
    if removed is None:
        log.info("annotation %s changed before it was removed; left as it is", action.key, extra=ctx.where)
        if action.consumes:
            # Consumed by another replica (or changed): it refused it, not us. Read the runtime
            # again so this view stops showing the verb, then decide again (gone: back off until
            # the watch says so, rather than decide again on this view).
            stored = await ctx.views.reread_runtime(ctx.key)
            still = ((stored or {}).get("metadata") or {}).get("annotations") or {}
            if stored is None or still.get(action.key) == action.value:
                raise outcomes.Aborted(f"annotation {action.key}={action.value} not removed")  # backed off, not spun
            raise outcomes.Superseded(f"annotation {action.key}={action.value} consumed elsewhere")
    ctx.wrote(removed)


async def acquire_lease(ctx: Context, action: plan.AcquireLease) -> None:
    try:
        await ctx.keeper.acquire(snap=ctx.snap, action=action, key=ctx.key, wake=ctx.wake)
        ctx.outcome.lease_outside_view = ""
    except leases.LeaseOutsideView as exc:
        # Learnt for decide(): Degraded LeaseOutsideView names the Lease and what to do.
        ctx.outcome.lease_outside_view = str(exc)
        metrics.LEASE_CONFLICTS.inc()
        raise outcomes.Aborted(f"Lease not acquired: {exc}") from exc
    except api.ApiError as exc:
        if api.is_namespace_terminating(exc):
            # Learnt for decide(): a deleted runtime there finishes without the Lease.
            ctx.outcome.namespace_terminating = True
            raise outcomes.Aborted("Lease not created: the namespace is being deleted") from exc
        raise
    ctx.outcome.lease_acquired_at = ctx.clock.wall()
    ctx.outcome.lease_token = action.token


async def release_lease(ctx: Context, action: plan.ReleaseLease) -> None:
    await ctx.keeper.release(key=ctx.key, observed=ctx.snap.lease)


async def delete_lease(ctx: Context, action: plan.DeleteLease) -> None:
    await ctx.keeper.delete(ctx.key)


async def write_status(ctx: Context, action: plan.WriteStatus) -> None:
    await statuswrite.write_status(snap=ctx.snap, action=action, key=ctx.key, views=ctx.views,
                                   keeper=ctx.keeper, faults=ctx.faults)


async def event(ctx: Context, action: plan.Event) -> None:
    ns, name = ctx.key
    message = action.message
    if ctx.identity not in message:
        message = f"{message} [by {ctx.identity}]"
    ctx.events.post(namespace=ns, runtime=name, runtime_uid=ctx.snap.observed.uid, type_=action.type,
                    reason=action.reason, message=message, identity=ctx.identity)
    log.info("%s %s: %s", action.type, action.reason, action.message, extra={**ctx.where, "reason": action.reason})


async def record(ctx: Context, action: plan.Record) -> None:
    metrics.record(action.metric, labels=dict(action.labels), value=action.value)


async def ensure_service(ctx: Context, action: plan.EnsureService) -> None:
    ns, _ = ctx.key
    svc = ctx.snap.observed.service
    try:
        ctx.views.apply(await services.apply_service(ns, action.manifest, uid=svc.uid if svc.exists and svc.owned else None),
                        "Service")
        ctx.outcome.service_taken = False
        ctx.outcome.service_error = ""
    except services.NotOwned:
        ctx.outcome.service_taken = True  # read it fresh next pass: Degraded NameConflict
        raise
    except client.ApiError as exc:
        if 400 <= exc.status < 500 and exc.status not in (408, 409, 429):
            # The API server refuses this Service as specified (invalid, quota, admission): said as
            # Degraded ServiceError by the next pass; the plan fails, so it is retried backed off.
            ctx.outcome.service_error = client.short(exc)
        raise


async def delete_service(ctx: Context, action: plan.DeleteService) -> None:
    ns, name = ctx.key
    if ctx.snap.observed.service.uid:
        await services.delete_service(ns, name, ctx.snap.observed.service.uid)


async def ensure_gateway_slice(ctx: Context, action: plan.EnsureGatewaySlice) -> None:
    ns, _ = ctx.key
    ctx.views.apply(await services.apply_slice(ns, action.manifest, uid=action.uid), "EndpointSlice")


async def delete_endpoint_slice(ctx: Context, action: plan.DeleteEndpointSlice) -> None:
    ns, _ = ctx.key
    await services.delete_slice(ns, action.name, action.uid)


async def ensure_network_policy(ctx: Context, action: plan.EnsureNetworkPolicy) -> None:
    ns, _ = ctx.key
    ctx.views.apply(await networkpolicies.apply_policy(ns, action.manifest, uid=action.uid), "NetworkPolicy")


async def delete_network_policy(ctx: Context, action: plan.DeleteNetworkPolicy) -> None:
    ns, _ = ctx.key
    await networkpolicies.delete_policy(ns, action.name, action.uid)


async def create_pod(ctx: Context, action: plan.CreatePod) -> None:
    ns, _ = ctx.key
    try:
        try:
            ctx.views.apply(await pods.create_pod(ns, action.manifest), "Pod")
        except BaseException as exc:
            if not (isinstance(exc, client.ApiError) and exc.status is not None and 400 <= exc.status < 500):
                # No definite answer (a timeout, a dropped connection, a 5xx, the pass cancelled):
                # the create may still land, so decide() gives its number up rather than send it
                # again (invariant 2).
                ctx.outcome.create_in_doubt = int(action.manifest["metadata"]["labels"][names.LABEL_GENERATION])
            raise
        ctx.outcome.name_taken = False
    except client.ApiError as exc:
        if client.is_conflict(exc):
            # AlreadyExists: a pod holds the runtime's name. The API server refused a second one;
            # the next pass reads that name fresh and says whose it is.
            ctx.outcome.name_taken = True
            log.info("pod %s already exists: create refused by the API server", action.manifest["metadata"]["name"],
                     extra=ctx.where)
            return
        if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
            # Refused for good as sent (invalid pod, PodSecurity, quota): decide() records it,
            # quoting the API server, and backs off with the Lease released.
            ctx.outcome.pod_rejected = client.short(exc)  # counted when decide() records it
            raise outcomes.Aborted(f"pod create refused: {ctx.outcome.pod_rejected}") from exc
        raise
    log.info("created pod %s", action.manifest["metadata"]["name"], extra=ctx.where)


async def set_serving(ctx: Context, action: plan.SetServing) -> None:
    ns, name = ctx.key
    if not action.serving and action.pins_of is not None:
        check_pins_at_send(ctx.views, ns, name, action.pins_of)
    patched = await pods.patch_pod_serving(ns, action.pod, action.uid, action.serving)
    if patched is None:
        # The API server says this UID is gone (404 by name, or the name holds another UID; UIDs
        # are never reused). A view that still shows it (its watch behind) would plan the same
        # flip again at once, pass after pass: drop it from the view.
        ctx.views.pods.delete({"metadata": {"namespace": ns, "name": action.pod, "uid": action.uid}})
    ctx.views.apply(patched, "Pod")


def check_pins_at_send(views: views_mod.Views, ns: str, name: str, generation: int) -> None:
    """decide() let admission stop on the view it planned from; this pass may send later (a
    pause, a slow pass). Pins are judged again on the view now, as the Lease's freshness is:
    a claim committed meanwhile, or a claims view no longer listed, stops the plan (fail
    closed); the next pass decides on what the view shows then."""
    found = pins.pins(claims=(c for c in map(snapshot.claim_info, views.claims.by_label(ns, name)) if c is not None),
                      runtime=name, generation=generation, known=views.claims_known(ns))
    if found.pinned:
        metrics.PIN_RECHECK_ABORTS.inc()
        raise outcomes.Aborted(f"admission to generation {generation} not stopped: {found.describe()} at send time")


async def delete_pod(ctx: Context, action: plan.DeletePod) -> None:
    ns, _ = ctx.key
    ctx.views.apply(await pods.delete_pod(ns, action.pod, action.uid, action.grace_seconds))
    log.info("deleted pod %s uid=%s grace=%ss", action.pod, action.uid, action.grace_seconds, extra=ctx.where)


async def force_delete_pod(ctx: Context, action: plan.ForceDeletePod) -> None:
    ns, _ = ctx.key
    await pods.force_delete_pod(ns, action.pod, action.uid)
    log.warning("force-deleted pod %s uid=%s", action.pod, action.uid, extra=ctx.where)


async def set_claim_phase(ctx: Context, action: plan.SetClaimPhase) -> None:
    ns, _ = ctx.key
    at = action.at or datetime.datetime.now(datetime.timezone.utc)
    try:
        written = await claims.patch_claim_status(
            ns, action.name, uid=action.uid,
            status_patch=claims_model.status_wire(claims_model.ClaimPhase(action.phase), action.message, at))
    except Exception as exc:  # a claim's phase is information, never a reason to stop
        log.warning("phase %s of claim %s not written: %s", action.phase, action.name, client.short(exc),
                    extra=ctx.where)
        return
    ctx.views.apply(written, "ToolRuntimeClaim")


Handler = Callable[[Context, Any], Awaitable[None]]

HANDLERS: dict[type, Handler] = {
    plan.AddFinalizer: add_finalizer,
    plan.RemoveFinalizer: remove_finalizer,
    plan.ConfirmNoPod: confirm_no_pod,
    plan.RemoveAnnotation: remove_annotation,
    plan.AcquireLease: acquire_lease,
    plan.ReleaseLease: release_lease,
    plan.DeleteLease: delete_lease,
    plan.WriteStatus: write_status,
    plan.Event: event,
    plan.Record: record,
    plan.EnsureService: ensure_service,
    plan.DeleteService: delete_service,
    plan.EnsureGatewaySlice: ensure_gateway_slice,
    plan.EnsureNetworkPolicy: ensure_network_policy,
    plan.DeleteNetworkPolicy: delete_network_policy,
    plan.DeleteEndpointSlice: delete_endpoint_slice,
    plan.CreatePod: create_pod,
    plan.SetServing: set_serving,
    plan.DeletePod: delete_pod,
    plan.ForceDeletePod: force_delete_pod,
    plan.SetClaimPhase: set_claim_phase,
}
