"""Status between transitions: conditions, the Service, claim phases, and foreign objects."""

from __future__ import annotations

import datetime
from typing import Any

from baton.lifecycle import conditions
from baton.lifecycle import dormancy
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import claims as claims_model
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st


def foreign_name_holders(o: obs.Observed) -> list[str]:
    """Objects holding one of the runtime's names that the runtime does not own."""
    found = []
    named = o.pod_by_name(names.pod_name(o.name))
    if named is not None and not named.owned:
        found.append(f"pod {o.namespace}/{named.name} (uid {named.uid})")
    if o.spec.service is not None and o.service.exists and not o.service.owned:
        found.append(f"Service {o.namespace}/{o.name}")
    return found


def foreign_claimants(o: obs.Observed) -> list[obs.PodInfo]:
    """Pods labelled for this runtime under another name that it does not own (never touched)."""
    return [pod for pod in o.pods if not pod.owned and pod.labelled and pod.name != names.pod_name(o.name)]


def name_conflict_message(squatters: list[str]) -> str:
    """The NameConflict message naming the objects that hold the runtime's names."""
    return (", ".join(squatters) + " has this runtime's name but is not owned by it: Baton does not "
            "touch it and starts no generation under that name until it is gone")


def multiple_pods_message(o: obs.Observed, claimants: list[obs.PodInfo]) -> str:
    """The MultiplePods message naming the foreign claimants."""
    foreign = ", ".join(f"{pod.name} (uid {pod.uid})" for pod in claimants)
    return (f"pods labelled {names.LABEL_RUNTIME}={o.name} but not owned by it: {foreign}; nothing is created "
            "until only one pod of the runtime remains")


def claim_phases(o: obs.Observed, now: datetime.datetime) -> tuple[p.Action, ...]:
    """Bound while the claimed generation exists; Stale once it is gone (it then pins nothing).
    Written only between transitions, each claim once per change (of its phase, or of its Bound
    condition: a claim an earlier version marked has none yet)."""
    current = o.status.current
    live = {pod.generation for pod in o.owned_pods() if pod.generation is not None}
    if current is not None:
        live.add(current.generation)
    allocated = max([o.status.latest_generation, *live, 0])
    actions: list[p.Action] = []
    for c in o.claims:
        if c.generation in live:
            want, msg = claims_model.ClaimPhase.BOUND, f"generation {c.generation} of {o.name} exists"
        elif c.generation <= allocated:
            want, msg = claims_model.ClaimPhase.STALE, (
                f"generation {c.generation} of {o.name} is gone" + (f" (now {current.generation})" if current else ""))
        else:
            continue  # a generation not started yet: nothing to say
        if (c.phase != want.value or c.bound != claims_model.bound_status(want)) and c.uid:
            actions.append(p.SetClaimPhase(c.name, c.uid, want.value, msg, at=now))
    return tuple(actions)


def new_warnings(old: st.ToolRuntimeStatus, new: st.ToolRuntimeStatus) -> tuple[p.Action, ...]:
    """A Warning event (and a count) when a condition newly reports a conflict or a cause that
    blocks the start: said once, when it appears or its message changes, never once per pass."""
    actions: list[p.Action] = []
    for kind, reason in ((st.ConditionType.DEGRADED, st.Reason.NAME_CONFLICT), (st.ConditionType.READY, st.Reason.MULTIPLE_PODS),
                         (st.ConditionType.DEGRADED, st.Reason.INVALID_SPEC), (st.ConditionType.DEGRADED, st.Reason.SERVICE_ERROR),
                         (st.ConditionType.DEGRADED, st.Reason.CONFIG_REF_MISSING)):
        before, after = old.condition(kind), new.condition(kind)
        if after is not None and after.reason == reason.value and (
            before is None or before.reason != reason.value or before.message != after.message
        ):
            actions.append(p.Event("Warning", reason.value, after.message))
            if reason in (st.Reason.NAME_CONFLICT, st.Reason.MULTIPLE_PODS):
                actions.append(p.Record(p.Metric.NAME_CONFLICTS, (("kind", reason.value),)))
    return tuple(actions)


def steady_status(o: obs.Observed, now: datetime.datetime, current_pod: obs.PodInfo | None) -> st.ToolRuntimeStatus:
    """Status between transitions: pending change and reset cleared when stale, and Ready,
    Suspended, Degraded as the runtime stands; `status` itself when nothing changes."""
    status = o.status
    if status.pending_reset is not None and status.pending_reset.value != o.annotations.get(names.ANN_RESET):
        # The reset it recorded was refused or consumed once the transition had ended: a wait left
        # behind would shorten the wait of a later reset with the same value.
        status = status.model_copy(update={"pending_reset": None})
    status = dormancy.steady(o, status)  # suspended (or spec.idle removed) while idle: not idle any more
    current = status.current
    if current is not None and o.adopt_hash is not None and current.template_hash == o.desired_hash:
        # An object unreadable when this generation started is readable now: its value now becomes
        # the generation's (no handoff; a change made before this moment is not seen), so that
        # its later changes are.
        current = current.model_copy(update={"template_hash": o.adopt_hash, "parts": dict(o.adopt_parts)})
        status = status.model_copy(update={"current": current})
    if (status.pending is not None or conditions.condition_true(status, st.ConditionType.UPDATE_PENDING)) and (
            current is None or current.template_hash == o.desired_hash):
        # The change was undone (or nothing serves to hold back): nothing waits any more.
        status = conditions.with_conditions(status.model_copy(update={"pending": None}), o, now,
                                  (st.ConditionType.UPDATE_PENDING, False, st.Reason.UP_TO_DATE, "the spec matches the serving generation"))
    squatters = foreign_name_holders(o)
    claimants = foreign_claimants(o)
    if (not status.conditions and not o.spec.suspend and not o.missing_config_refs and not o.unreadable_config_refs
            and not squatters and not claimants and o.spec_error is None and o.service_error is None):
        return status  # the first transition writes the initial conditions
    changes: list[conditions.Cond] = [(st.ConditionType.PROGRESSING, False, st.Reason.IDLE, "")]
    if o.spec.suspend:
        changes += [
            (st.ConditionType.SUSPENDED, True, st.Reason.SUSPENDED, "spec.suspend is true: no generation runs"),
            (st.ConditionType.READY, False, st.Reason.SUSPENDED, "suspended"),
        ]
    else:
        changes.append((st.ConditionType.SUSPENDED, False, st.Reason.ACTIVE, ""))
        current = status.current
        if claimants:
            changes.append((st.ConditionType.READY, False, st.Reason.MULTIPLE_PODS, multiple_pods_message(o, claimants)))
        elif current is not None and current_pod is not None and not current_pod.owned:
            changes.append((st.ConditionType.READY, False, st.Reason.NAME_CONFLICT,
                            f"pod {current_pod.name} of generation {current.generation} is no longer owned by this "
                            "runtime (its ownerReference was removed)"))
        elif current is not None and current_pod is not None:
            # The serving pod's readiness, as its kubelet reports it (no handoff: it may recover).
            if current_pod.ready:
                changes.append((st.ConditionType.READY, True, st.Reason.GENERATION_READY, f"generation {current.generation} serves ({current.pod})"))
            else:
                changes.append((st.ConditionType.READY, False, st.Reason.POD_NOT_READY,
                                f"pod {current.pod} of generation {current.generation} is not Ready"))
        elif current is None and squatters:
            changes.append((st.ConditionType.READY, False, st.Reason.NAME_CONFLICT, name_conflict_message(squatters)))
        if status.current is None and status.retry and status.retry.not_before and now < status.retry.not_before:
            changes.append((st.ConditionType.READY, False, st.Reason.BACKING_OFF,
                            f"retrying after a failed start at {status.retry.not_before.isoformat()}"))
    degraded = status.condition(st.ConditionType.DEGRADED)
    disowned = current_pod is not None and not current_pod.owned
    if o.spec_error is not None:
        changes.append((st.ConditionType.DEGRADED, True, st.Reason.INVALID_SPEC, f"spec cannot be read: {o.spec_error}"))
    elif squatters or disowned:
        what = squatters or [f"pod {o.namespace}/{current_pod.name} (uid {current_pod.uid})" if current_pod else ""]
        changes.append((st.ConditionType.DEGRADED, True, st.Reason.NAME_CONFLICT, name_conflict_message(what)))
    elif o.missing_config_refs:
        changes.append((st.ConditionType.DEGRADED, True, st.Reason.CONFIG_REF_MISSING,
                        "missing: " + ", ".join(sorted(o.missing_config_refs))))
    elif o.service_error is not None and o.spec.service is not None:
        changes.append((st.ConditionType.DEGRADED, True, st.Reason.SERVICE_ERROR,
                        f"the Service {o.namespace}/{o.name} was refused: {o.service_error}"))
    elif o.unreadable_config_refs and not (degraded and degraded.reason in (st.Reason.CONNECT_TIMEOUT.value, st.Reason.POD_REJECTED.value)
                                           and degraded.status == "True"):
        changes.append((st.ConditionType.DEGRADED, True, st.Reason.CONFIG_REF_UNREADABLE,
                        "not readable by Baton (see the chart's rbac values), so changes of their data "
                        "start no handoff until Baton may read them again: " + ", ".join(sorted(o.unreadable_config_refs))))
    else:
        if degraded and degraded.reason in (st.Reason.CONFIG_REF_MISSING.value, st.Reason.CONFIG_REF_UNREADABLE.value,
                                            st.Reason.NAME_CONFLICT.value, st.Reason.INVALID_SPEC.value, st.Reason.UNKNOWN_STEP.value,
                                            st.Reason.SERVICE_ERROR.value):
            changes.append((st.ConditionType.DEGRADED, False, st.Reason.HEALTHY, "no conflict, referenced config present, spec readable"))
        elif degraded and degraded.reason in (st.Reason.LOCK_TIMEOUT.value, st.Reason.LEASE_OUTSIDE_VIEW.value):
            changes.append((st.ConditionType.DEGRADED, False, st.Reason.HEALTHY, "lifecycle Lease acquired"))
    new = conditions.with_conditions(conditions.initial_conditions(status, o, now), o, now, *changes)
    if new == status:
        return status
    return new.model_copy(update={"observed_generation": o.meta_generation})


def _service_same(have: obs.ServiceInfo, want: dict[str, Any]) -> bool:
    return (
        have.exists
        and have.selector == want["spec"].get("selector", {})
        and have.session_affinity == want["spec"]["sessionAffinity"]
        and [pt.wire() for pt in have.ports] == [spec_model.ServicePort.model_validate(x).wire() for x in want["spec"]["ports"]]
    )


def routed_to_gateway(o: obs.Observed) -> bool:
    """Whether the runtime's Service should point at the gateway now: spec.service.gateway, the
    gateway pods' view listed, and at least one of them Ready. With none (the gateway not
    installed, or every replica down) the Service selects the serving pod as without the field:
    clients keep reaching the tool, and a handoff's stop of admission still takes the old pod
    out (its serving label), so nothing waits on a gateway that is not there."""
    return (o.spec.service is not None and o.spec.service.gateway and o.gateway_endpoints_known
            and mf.gateway_endpoints(o.gateway_endpoints)[1] is not None)


def _our_slices(o: obs.Observed) -> list[obs.SliceInfo]:
    return [s for s in o.slices if s.name == names.gateway_slice_name(o.name) and s.owned and s.manager == names.SLICE_MANAGER]


def unreachable_replicas_out(o: obs.Observed) -> tuple[p.Action, ...]:
    """While a retire waits for the gateway replicas (the seal, then the in-flight count), the
    ones that did not answer (`gateway_unconfirmed`, their Leases baton-gateway.<pod name>) are
    taken out of the runtime's EndpointSlice, so new clients of the Service stop reaching a
    replica that is paused or cut off. The step still waits for them within its budget: a
    replica out of the slice may still forward calls on connections it holds. Written only when
    the slice changes; never emptied; put back by the steady Service once the transition ends."""
    if not o.gateway_unconfirmed or not routed_to_gateway(o) or (o.service.exists and not o.service.owned):
        return ()
    ours = _our_slices(o)
    gone = set(o.gateway_unconfirmed)
    kept = tuple(e for e in o.gateway_endpoints if names.gateway_lease_name(e.pod) not in gone)
    if not ours or not kept or len(kept) == len(o.gateway_endpoints) or o.spec.service is None:
        return ()
    want = mf.build_gateway_slice(namespace=o.namespace, runtime=o.name, runtime_uid=o.uid,
                                  service=o.spec.service, endpoints=kept)
    return () if ours[0].shape == mf.slice_shape(want) else (p.EnsureGatewaySlice(want, ours[0].uid),)


def service_actions(o: obs.Observed) -> tuple[p.Action, ...]:
    """The Service and its EndpointSlice, then the tool-pod NetworkPolicy (BATON_ISOLATE_TOOL_PODS).
    The policy's delete comes first, its create last: the pods are shut off only once the Service
    routes to the gateway, and open again before the Service selects them."""
    policy = network_policy_actions(o)
    deletes = tuple(a for a in policy if isinstance(a, p.DeleteNetworkPolicy))
    return deletes + _service_and_slice_actions(o) + tuple(a for a in policy if a not in deletes)


def network_policy_actions(o: obs.Observed) -> tuple[p.Action, ...]:
    """With BATON_ISOLATE_TOOL_PODS: the runtime's pods admit only the gateway (and the operator)
    exactly while its Service routes to the gateway (routed_to_gateway). Turning `gateway` off,
    dropping spec.service, or every gateway replica gone (the Service then selects the pod
    itself) removes the policy, so clients are never shut out of a Service that sends them
    straight to the pod. Never touches a foreign policy of that name; nothing while either view
    is not listed (an empty view says nothing)."""
    iso = o.tool_pod_isolation
    if iso is None or not o.network_policy_known or (o.network_policy.exists and not o.network_policy.owned):
        return ()
    if o.spec.service is not None and o.spec.service.gateway and not o.gateway_endpoints_known:
        return ()  # routed as it stands until the gateway pods' view is listed: so is the policy
    have = o.network_policy
    if not routed_to_gateway(o):
        return (p.DeleteNetworkPolicy(names.tool_pod_policy_name(o.name), have.uid),) if have.exists and have.uid else ()
    want = mf.build_tool_pod_policy(namespace=o.namespace, runtime=o.name, runtime_uid=o.uid, isolation=iso)
    if have.exists and have.shape == mf.policy_shape(want):
        return ()
    return (p.EnsureNetworkPolicy(want, have.uid if have.exists else None),)


def _service_and_slice_actions(o: obs.Observed) -> tuple[p.Action, ...]:
    """Ensure or delete the runtime's Service (and, routed to the gateway, its EndpointSlice) as
    spec.service says; never touch a foreign one. Order keeps the Service reachable: turning the
    gateway on writes the slice before the selector goes, turning it off brings the selector back
    before the slice goes."""
    if o.service.exists and not o.service.owned:
        return ()  # someone else's Service with this name: never patched or deleted
    ours = _our_slices(o)
    drop_ours = tuple(p.DeleteEndpointSlice(s.name, s.uid) for s in ours)
    if o.spec.service is None:
        return ((p.DeleteService(),) if o.service.exists else ()) + drop_ours
    if not routed_to_gateway(o):
        direct = o.spec.service.model_copy(update={"gateway": False})
        want = mf.build_service(namespace=o.namespace, runtime=o.name, runtime_uid=o.uid, service=direct)
        if o.spec.service.gateway and not o.gateway_endpoints_known and o.service.exists and not o.service.selector:
            return ()  # routed to the gateway, and its pods' view not listed yet: leave it as it stands
        return (() if _service_same(o.service, want) else (p.EnsureService(want),)) + drop_ours
    _, port, _ = mf.gateway_endpoints(o.gateway_endpoints)
    want_slice = mf.build_gateway_slice(namespace=o.namespace, runtime=o.name, runtime_uid=o.uid,
                                        service=o.spec.service, endpoints=o.gateway_endpoints)
    same_slice = bool(ours) and ours[0].shape == mf.slice_shape(want_slice)
    slice_actions = () if same_slice else (p.EnsureGatewaySlice(want_slice, ours[0].uid if ours else None),)
    want = mf.build_service(namespace=o.namespace, runtime=o.name, runtime_uid=o.uid, service=o.spec.service,
                            gateway_port=port)
    service = () if _service_same(o.service, want) else (p.EnsureService(want),)
    # The EndpointSlice controller's slices of this Service, left from when it had a selector:
    # they would still send clients straight to the pod (removed once the selector is gone).
    stale = tuple(p.DeleteEndpointSlice(s.name, s.uid) for s in o.slices if s.manager == names.SLICE_CONTROLLER
                  and o.service.exists and not o.service.selector) if not service else ()
    return slice_actions + service + stale


def foreign_blocking_create(o: obs.Observed) -> list[str]:
    """What stops a pod create: a foreign pod holding the name, or foreign claimants."""
    named = o.pod_by_name(names.pod_name(o.name))
    found = [f"pod {o.namespace}/{named.name} (uid {named.uid})"] if named is not None and not named.owned else []
    return found + [f"pod {o.namespace}/{pod.name} (uid {pod.uid})" for pod in foreign_claimants(o)]
