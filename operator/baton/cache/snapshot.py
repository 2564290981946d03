"""Build decide()'s snapshot of one runtime from the views, plus the few fresh reads a
guarantee needs. Does I/O only for those reads (through baton.k8s).

The fresh reads: a GET by name of each pod the runtime's status depends on that the view does
not show (a pod whose labels were edited away leaves a label-selected view, yet still exists:
only a GET that says 404, or shows another UID, proves it gone), and of the runtime's name when
a create was refused as AlreadyExists (a pod Baton does not own holds it).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pydantic

from baton import clock as clock_mod
from baton.cache import views as views_mod
from baton.k8s import client, configrefs, pods, services
from baton.lifecycle import manifests
from baton.model import claims as claims_model
from baton.model import names
from baton.model import observed as observed_mod
from baton.model import spec as spec_model
from baton.model import status as status_mod


@dataclasses.dataclass
class SnapshotMemo:
    """What building a runtime's snapshots remembers from one pass to the next."""

    # The Lease version this process saw last, and when (its own monotonic clock): a foreign
    # Lease is expired only once it has stayed unchanged for its duration here.
    lease_seen_rv: str | None = None
    lease_seen_at: float = 0.0
    # The runtime object last parsed (by resourceVersion): parsing once per version.
    parsed_rv: str | None = None
    parsed: tuple[spec_model.ToolRuntimeSpec, status_mod.ToolRuntimeStatus, str | None] | None = None
    reads: int = 0  # fresh GETs made for this runtime (a measure of what the view saves)

    def lease_unchanged_seconds(self, lease: dict[str, Any] | None, now: float) -> float:
        rv = str(((lease or {}).get("metadata") or {}).get("resourceVersion") or "")
        if rv != self.lease_seen_rv:
            self.lease_seen_rv, self.lease_seen_at = rv, now
        return now - self.lease_seen_at


@dataclasses.dataclass
class Learnt:
    """What this process learnt about a runtime by acting on it, which the API does not show
    (baton.reconcile.Memory keeps it from pass to pass; the snapshot only reads it)."""

    lock_wait_since: datetime.datetime | None = None
    idle_checked_at: datetime.datetime | None = None  # last drain probe for a change waiting for idle
    last_error: str | None = None
    pod_rejected: str | None = None  # the API server's refusal of our last pod create
    create_in_doubt: int | None = None  # our create of this generation got no definite answer
    tokens_here: tuple[int, ...] = ()  # the fencing tokens this process acquired (the last few)
    name_taken: bool = False  # our last create got AlreadyExists: read the name fresh
    service_taken: bool = False  # our Service create got AlreadyExists: read it fresh
    namespace_terminating: bool = False  # our Lease create was refused: the namespace is being deleted
    lease_outside_view: str | None = None  # our Lease create met a Lease outside the view: what to do
    service_error: str | None = None  # the API server refused our last Service write: its message


@dataclasses.dataclass(frozen=True)
class Facts:
    """What this process is, as one pass reads it: not in the API either."""

    identity: str
    lease_duration_seconds: int
    backoff_base_seconds: float
    lease_held_here: bool = False
    shutting_down: bool = False
    bridge_image: str = ""  # BATON_IMAGE: a stdio runtime's pod copies the bridge from it


@dataclasses.dataclass
class Snapshot:
    observed: observed_mod.Observed
    runtime: dict[str, Any]
    pods: list[dict[str, Any]]
    lease: dict[str, Any] | None = None  # as seen: the version an acquisition must replace


def pod_info(pod: dict[str, Any], *, runtime: str = "", runtime_uid: str = "") -> observed_mod.PodInfo:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    gen_text = labels.get(names.LABEL_GENERATION)
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return observed_mod.PodInfo(
        name=meta["name"],
        uid=meta["uid"],
        generation=int(gen_text) if gen_text and gen_text.isdigit() else None,
        phase=status.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        serving=labels.get(names.LABEL_SERVING) == "true",
        created_at=client.parse_time(meta.get("creationTimestamp")),
        ip=status.get("podIP"),
        template_hash=annotations.get(names.ANN_TEMPLATE_HASH),
        owned=client.owned_by(pod, runtime_uid),
        labelled=labels.get(names.LABEL_RUNTIME) == runtime,
        terminated=terminated_text(status),
    )


# The kubelet keeps at most 4096 bytes of a termination message; a condition shows this much.
TERMINATION_MESSAGE_SHOWN = 1024


def terminated_text(status: dict[str, Any]) -> str | None:
    """Why the pod's first ended container ended (init containers first, then the others), or
    None: `container <name> exited with status <n> (<reason>): <message>`, the message (a stdio
    child's last stderr lines, written by the bridge) cut to TERMINATION_MESSAGE_SHOWN characters
    with a note of how much was left out. A pod's status is untrusted input: odd shapes are skipped."""
    for group in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(group) or []:
            if not isinstance(cs, dict):
                continue
            term = (cs.get("state") or {}).get("terminated")
            if not isinstance(term, dict):
                continue
            code = term.get("exitCode")
            if group == "initContainerStatuses" and code == 0:
                continue  # an init container that did its job
            text = f"container {cs.get('name') or '?'} exited with status {code}"
            if term.get("signal"):
                text += f" (signal {term.get('signal')})"
            if term.get("reason"):
                text += f" ({term.get('reason')})"
            message = str(term.get("message") or "").strip()
            if message:
                if len(message) > TERMINATION_MESSAGE_SHOWN:
                    cut = len(message) - TERMINATION_MESSAGE_SHOWN
                    # The end holds the last stderr lines, the likeliest to say why: keep it.
                    message = f"[{cut} characters left out] ...{message[-TERMINATION_MESSAGE_SHOWN:]}"
                text += f": {message}"
            return text
    return None


def gateway_endpoint(pod: dict[str, Any] | None) -> observed_mod.GatewayEndpoint | None:
    """A gateway pod as the runtime's EndpointSlice lists it: Running and Ready, not being
    deleted, with an IP and a TCP container port named names.GATEWAY_PORT_NAME; else None."""
    if pod is None:
        return None
    info = pod_info(pod)
    if info.phase != "Running" or not info.ready or info.deleting or not info.ip:
        return None
    ports = [pt.get("containerPort") for c in (pod.get("spec") or {}).get("containers") or []
             for pt in c.get("ports") or [] if pt.get("name") == names.GATEWAY_PORT_NAME and pt.get("protocol", "TCP") == "TCP"]
    if not ports or not isinstance(ports[0], int) or isinstance(ports[0], bool):
        return None
    meta = pod.get("metadata") or {}
    return observed_mod.GatewayEndpoint(pod=info.name, namespace=str(meta.get("namespace") or ""), uid=info.uid,
                                        ip=info.ip, port=ports[0], node=(pod.get("spec") or {}).get("nodeName") or None)


def slice_info(eps: dict[str, Any], runtime_uid: str) -> observed_mod.SliceInfo:
    meta = eps.get("metadata") or {}
    return observed_mod.SliceInfo(name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
                                  manager=(meta.get("labels") or {}).get(names.LABEL_SLICE_MANAGED_BY),
                                  owned=client.owned_by(eps, runtime_uid), shape=manifests.slice_shape(eps))


def lease_info(lease: dict[str, Any] | None, default_duration: int, unchanged_seconds: float = 0.0) -> observed_mod.LeaseInfo:
    if lease is None:
        return observed_mod.LeaseInfo(exists=False, duration_seconds=default_duration)
    spec = lease.get("spec") or {}
    return observed_mod.LeaseInfo(
        exists=True,
        holder=spec.get("holderIdentity") or None,
        renew_time=client.parse_time(spec.get("renewTime")),
        duration_seconds=int(spec.get("leaseDurationSeconds") or default_duration),
        token=int(spec.get("leaseTransitions") or 0),
        unchanged_seconds=unchanged_seconds,
    )


def service_info(svc: dict[str, Any] | None, runtime_uid: str = "") -> observed_mod.ServiceInfo:
    if svc is None:
        return observed_mod.ServiceInfo(exists=False)
    spec = svc.get("spec") or {}
    ports = tuple(
        spec_model.ServicePort(
            name=pt.get("name"), port=pt["port"], target_port=pt.get("targetPort"), protocol=pt.get("protocol", "TCP")
        )
        for pt in spec.get("ports") or []
    )
    return observed_mod.ServiceInfo(
        exists=True, owned=client.owned_by(svc, runtime_uid), uid=(svc.get("metadata") or {}).get("uid"),
        selector=spec.get("selector") or {}, ports=ports, session_affinity=spec.get("sessionAffinity"),
    )


def network_policy_info(policy: dict[str, Any] | None, runtime_uid: str) -> observed_mod.NetworkPolicyInfo:
    if policy is None:
        return observed_mod.NetworkPolicyInfo(exists=False)
    return observed_mod.NetworkPolicyInfo(exists=True, owned=client.owned_by(policy, runtime_uid),
                                          uid=(policy.get("metadata") or {}).get("uid"),
                                          shape=manifests.policy_shape(policy))


def claim_info(obj: dict[str, Any]) -> claims_model.Claim | None:
    """A ToolRuntimeClaim as decide() reads it; None for one the CRD should not have let through."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    try:
        return claims_model.Claim.model_validate({
            "name": meta["name"], "uid": meta.get("uid") or "", "runtime": (spec.get("runtimeRef") or {}).get("name") or "",
            "generation": spec.get("generation"), "fork": spec.get("fork"), "branch": spec.get("branch"),
            "state": spec.get("state"), "references": tuple(spec.get("references") or ()),
            "phase": (obj.get("status") or {}).get("phase"), "bound": _claim_bound(obj)})
    except (KeyError, TypeError, pydantic.ValidationError):
        return None


def _claim_bound(obj: dict[str, Any]) -> str | None:
    """The status of the claim's Bound condition, if it has one."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == claims_model.BOUND_CONDITION:
            return str(c.get("status"))
    return None


def _error_text(exc: pydantic.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first.get("loc", ()))
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if not where:  # a check of the whole spec (e.g. spec.stdio against the template): its text names the field
        return f"{str(first.get('msg', 'invalid')).removeprefix('Value error, ')}{more}"
    return f"spec.{where}: {first.get('msg', 'invalid')}{more}"


def _parse(rt: dict[str, Any], memo: SnapshotMemo) -> tuple[spec_model.ToolRuntimeSpec, status_mod.ToolRuntimeStatus, str | None]:
    rv = str((rt.get("metadata") or {}).get("resourceVersion") or "")
    if memo.parsed is not None and memo.parsed_rv == rv:
        return memo.parsed
    spec_error: str | None = None
    try:
        spec = spec_model.ToolRuntimeSpec.model_validate(rt.get("spec") or {})
        manifests.config_refs(spec.template)  # reads the template's references: fails on a malformed one
    except pydantic.ValidationError as exc:
        # A malformed field the CRD let through: keep observing with safe defaults, so the
        # runtime reports it (Degraded InvalidSpec) and can still be retired and deleted.
        spec, spec_error = spec_model.ToolRuntimeSpec(template={}), _error_text(exc)
    except (AttributeError, TypeError, ValueError) as exc:
        # e.g. `volumes: "x"`, stored before the CRD carried the PodSpec schema (which refuses it now).
        spec_error = f"spec.template cannot be read: {type(exc).__name__}: {exc}"
    status = status_mod.ToolRuntimeStatus.model_validate(rt.get("status") or {})
    memo.parsed_rv, memo.parsed = rv, (spec, status, spec_error)
    return memo.parsed


async def _pods(views: views_mod.Views, namespace: str, name: str, status: status_mod.ToolRuntimeStatus, *,
                memo: SnapshotMemo, name_taken: bool) -> list[dict[str, Any]]:
    found = {pd["metadata"]["uid"]: pd for pd in views.pods.by_label(namespace, name)}
    named = views.pods.get(namespace, names.pod_name(name))
    if named is not None:
        found[named["metadata"]["uid"]] = named
    wanted: set[str] = set()
    t = status.transition
    if t is not None and t.retiring and t.from_uid and t.from_uid not in found:
        wanted.add(t.from_pod or names.pod_name(name))
    if t is not None and t.to_uid and t.to_uid not in found:
        wanted.add(names.pod_name(name))
    if status.current is not None and status.current.uid not in found:
        wanted.add(status.current.pod)
    if name_taken:
        wanted.add(names.pod_name(name))
    for pod_name in sorted(wanted):
        memo.reads += 1
        pod = await pods.read_pod(namespace, pod_name)
        # The GET is fresher than the view: drop what the view says under that name.
        found = {u: pd for u, pd in found.items() if pd["metadata"]["name"] != pod_name}
        if pod is not None:
            found[pod["metadata"]["uid"]] = pod
    return sorted(found.values(), key=lambda pd: (pd["metadata"].get("creationTimestamp") or "", pd["metadata"]["name"]))


async def read_snapshot(
    views: views_mod.Views, namespace: str, name: str, *, memo: SnapshotMemo, learnt: Learnt, facts: Facts,
    clock: clock_mod.Clock,
) -> Snapshot | None:
    """None when the runtime no longer exists."""
    rt = views.runtimes.get(namespace, name)
    if rt is None:
        return None
    meta = rt.get("metadata") or {}
    spec, status, spec_error = _parse(rt, memo)
    uid = meta["uid"]
    raw_pods = await _pods(views, namespace, name, status, memo=memo, name_taken=learnt.name_taken)
    lease = views.leases.get(namespace, names.lease_name(name))
    svc = views.services.get(namespace, name)
    if svc is None and learnt.service_taken:
        memo.reads += 1
        svc = await services.read_service(namespace, name)
    refs = manifests.config_refs(spec.template) if spec_error is None else []
    digest, missing, unreadable, config_parts, adopt = (
        await configrefs.read_config_digest(namespace, refs, views.config_lookup, cache=views.config_digests,
                                            before=status.current.parts if status.current is not None else None)
        if refs else ("", [], [], [], None))
    endpoints_listed: bool | None = None
    t = status.transition
    if t is not None and t.step == status_mod.Step.STOPPING_ADMISSION and spec.service is not None and t.from_uid:
        # Before the EndpointSlice view is listed, an empty view proves nothing: stop admission
        # waits (within drainSeconds) instead of taking "no slice lists it" for an answer.
        endpoints_listed = (services.endpoints_list_pod_ready(
            views.slices.by_label(namespace, name), t.from_uid, t.from_pod or "")
            if views.known(views.slices, namespace) else True)
    gateway = spec.service is not None and spec.service.gateway
    gateway_endpoints = tuple(e for e in (gateway_endpoint(pd) for pd in views.gateway_pods.items()) if e is not None) if gateway else ()
    policies = views.network_policies
    policy = policies.get(namespace, names.tool_pod_policy_name(name)) if policies is not None else None
    observed = observed_mod.Observed(
        namespace=namespace,
        name=name,
        uid=uid,
        meta_generation=int(meta.get("generation") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        annotations=meta.get("annotations") or {},
        spec=spec,
        status=status,
        desired_hash=manifests.template_hash(manifests.pod_definition(spec), digest),
        desired_parts=(("template", manifests.template_hash(manifests.pod_definition(spec))), *config_parts),
        adopt_hash=manifests.template_hash(manifests.pod_definition(spec), adopt[0]) if adopt is not None else None,
        adopt_parts=(("template", manifests.template_hash(manifests.pod_definition(spec))), *adopt[1]) if adopt is not None else (),
        pods=tuple(pod_info(pd, runtime=name, runtime_uid=uid) for pd in raw_pods),
        lease=lease_info(lease, facts.lease_duration_seconds, memo.lease_unchanged_seconds(lease, clock.monotonic())),
        service=service_info(svc, uid),
        endpoints_list_retiring_pod=endpoints_listed,
        gateway_endpoints=gateway_endpoints,
        gateway_endpoints_known=gateway and views.known(views.gateway_pods, views.system_namespace),
        slices=tuple(slice_info(eps, uid) for eps in views.slices.by_label(namespace, name)),
        tool_pod_isolation=views.tool_pod_isolation,
        network_policy=network_policy_info(policy, uid),
        network_policy_known=policies is not None and views.known(policies, namespace),
        claims=tuple(c for c in (claim_info(obj) for obj in views.claims.by_label(namespace, name)) if c is not None),
        claims_known=views.claims_known(namespace),
        missing_config_refs=tuple(missing),
        unreadable_config_refs=tuple(unreadable),
        identity=facts.identity,
        lease_duration_seconds=facts.lease_duration_seconds,
        lease_held_here=facts.lease_held_here,
        lock_wait_since=learnt.lock_wait_since,
        idle_checked_at=learnt.idle_checked_at,
        last_error=learnt.last_error,
        pod_rejected=learnt.pod_rejected,
        create_in_doubt=learnt.create_in_doubt,
        tokens_here=learnt.tokens_here,
        namespace_terminating=learnt.namespace_terminating,
        lease_outside_view=learnt.lease_outside_view,
        service_error=learnt.service_error,
        spec_error=spec_error,
        shutting_down=facts.shutting_down,
        backoff_base_seconds=facts.backoff_base_seconds,
        bridge_image=facts.bridge_image,
    )
    return Snapshot(observed=observed, runtime=rt, pods=raw_pods, lease=lease)
