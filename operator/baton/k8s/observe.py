"""Build the Observed snapshot of one runtime from fresh API reads (never from a cache)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from baton.k8s import client, configrefs, leases, pods, runtimes, services
from baton.lifecycle import manifests as mf
from baton.model import observed as obs
from baton.model import spec as spec_model
from baton.model import status as st


@dataclasses.dataclass
class Local:
    """What this process knows about a runtime that is not in the API."""

    identity: str
    lease_duration_seconds: int
    backoff_base_seconds: float
    lease_held_here: bool = False
    lock_wait_since: datetime.datetime | None = None
    reset_seen_since: datetime.datetime | None = None
    last_error: str | None = None
    shutting_down: bool = False


@dataclasses.dataclass
class Snapshot:
    observed: obs.Observed
    runtime: dict[str, Any]
    pods: list[dict[str, Any]]


def pod_info(pod: dict[str, Any]) -> obs.PodInfo:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    gen_text = labels.get(mf.LABEL_GENERATION)
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return obs.PodInfo(
        name=meta["name"],
        uid=meta["uid"],
        generation=int(gen_text) if gen_text and gen_text.isdigit() else None,
        phase=status.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        serving=labels.get(mf.LABEL_SERVING) == "true",
        created_at=client.parse_time(meta.get("creationTimestamp")),
        ip=status.get("podIP"),
        template_hash=annotations.get(mf.ANN_TEMPLATE_HASH),
    )


def lease_info(lease: dict[str, Any] | None, default_duration: int) -> obs.LeaseInfo:
    if lease is None:
        return obs.LeaseInfo(exists=False, duration_seconds=default_duration)
    spec = lease.get("spec") or {}
    return obs.LeaseInfo(
        exists=True,
        holder=spec.get("holderIdentity") or None,
        renew_time=client.parse_time(spec.get("renewTime")),
        duration_seconds=int(spec.get("leaseDurationSeconds") or default_duration),
        token=int(spec.get("leaseTransitions") or 0),
    )


def service_info(svc: dict[str, Any] | None) -> obs.ServiceInfo:
    if svc is None:
        return obs.ServiceInfo(exists=False)
    spec = svc.get("spec") or {}
    ports = tuple(
        spec_model.ServicePort(
            name=pt.get("name"), port=pt["port"], target_port=pt.get("targetPort"), protocol=pt.get("protocol", "TCP")
        )
        for pt in spec.get("ports") or []
    )
    return obs.ServiceInfo(
        exists=True, selector=spec.get("selector") or {}, ports=ports, session_affinity=spec.get("sessionAffinity")
    )


def read_snapshot(namespace: str, name: str, local: Local) -> Snapshot | None:
    """None when the runtime no longer exists."""
    rt = runtimes.read_runtime(namespace, name)
    if rt is None:
        return None
    meta = rt.get("metadata") or {}
    spec = spec_model.ToolRuntimeSpec.model_validate(rt.get("spec") or {})
    status = st.ToolRuntimeStatus.model_validate(rt.get("status") or {})
    uid = meta["uid"]
    raw_pods = pods.list_runtime_pods(namespace, name, uid)
    lease = leases.read_lease(namespace, mf.lease_name(name))
    svc = services.read_service(namespace, name) if (spec.service is not None or status.transition is None) else None
    digest, missing, unreadable = configrefs.read_config_digest(namespace, mf.config_refs(spec.template))
    pod_infos = tuple(pod_info(pd) for pd in raw_pods)
    endpoints_listed: bool | None = None
    t = status.transition
    if t is not None and t.step == st.Step.STOPPING_ADMISSION and spec.service is not None and t.from_uid:
        endpoints_listed = services.endpoints_list_pod_ready(namespace, name, t.from_uid, t.from_pod or "")
    observed = obs.Observed(
        namespace=namespace,
        name=name,
        uid=uid,
        meta_generation=int(meta.get("generation") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        annotations=meta.get("annotations") or {},
        spec=spec,
        status=status,
        desired_hash=mf.template_hash(spec.template, digest),
        pods=pod_infos,
        lease=lease_info(lease, local.lease_duration_seconds),
        service=service_info(svc),
        endpoints_list_retiring_pod=endpoints_listed,
        missing_config_refs=tuple(missing),
        unreadable_config_refs=tuple(unreadable),
        identity=local.identity,
        lease_duration_seconds=local.lease_duration_seconds,
        lease_held_here=local.lease_held_here,
        lock_wait_since=local.lock_wait_since,
        reset_waiting_since=local.reset_seen_since,
        last_error=local.last_error,
        shutting_down=local.shutting_down,
        backoff_base_seconds=local.backoff_base_seconds,
    )
    return Snapshot(observed=observed, runtime=rt, pods=raw_pods)
