"""Build the Observed snapshot of one runtime from fresh API reads (never from a cache).

Pods are listed by label and, for the names that matter, read by name: a GET that says 404
(or shows another UID) is the only evidence that a pod is gone.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any

import pydantic

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
    last_error: str | None = None
    pod_rejected: str | None = None  # the API server's refusal of our last pod create
    shutting_down: bool = False
    # The Lease version this process saw last, and when (its own monotonic clock): a foreign
    # Lease is expired only once it has stayed unchanged for its duration here.
    lease_seen_rv: str | None = None
    lease_seen_at: float = 0.0

    def lease_unchanged_seconds(self, lease: dict[str, Any] | None) -> float:
        rv = str(((lease or {}).get("metadata") or {}).get("resourceVersion") or "")
        now = time.monotonic()
        if rv != self.lease_seen_rv:
            self.lease_seen_rv, self.lease_seen_at = rv, now
        return now - self.lease_seen_at


@dataclasses.dataclass
class Snapshot:
    observed: obs.Observed
    runtime: dict[str, Any]
    pods: list[dict[str, Any]]
    lease: dict[str, Any] | None = None  # as read: the version an acquisition must replace


def pod_info(pod: dict[str, Any], *, runtime: str = "", runtime_uid: str = "") -> obs.PodInfo:
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
        owned=client.owned_by(pod, runtime_uid),
        labelled=labels.get(mf.LABEL_RUNTIME) == runtime,
    )


def lease_info(lease: dict[str, Any] | None, default_duration: int, unchanged_seconds: float = 0.0) -> obs.LeaseInfo:
    if lease is None:
        return obs.LeaseInfo(exists=False, duration_seconds=default_duration)
    spec = lease.get("spec") or {}
    return obs.LeaseInfo(
        exists=True,
        holder=spec.get("holderIdentity") or None,
        renew_time=client.parse_time(spec.get("renewTime")),
        duration_seconds=int(spec.get("leaseDurationSeconds") or default_duration),
        token=int(spec.get("leaseTransitions") or 0),
        unchanged_seconds=unchanged_seconds,
    )


def service_info(svc: dict[str, Any] | None, runtime_uid: str = "") -> obs.ServiceInfo:
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
        exists=True, owned=client.owned_by(svc, runtime_uid), uid=(svc.get("metadata") or {}).get("uid"),
        selector=spec.get("selector") or {}, ports=ports, session_affinity=spec.get("sessionAffinity"),
    )


def _error_text(exc: pydantic.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first.get("loc", ()))
    return f"spec.{where}: {first.get('msg', 'invalid')}" + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")


def read_pods(namespace: str, name: str, uid: str, status: st.ToolRuntimeStatus) -> list[dict[str, Any]]:
    """Pods labelled for the runtime, and, read by name (authoritative), every pod name the
    runtime's status depends on: a pod whose labels were edited away is still found."""
    found = {pd["metadata"]["uid"]: pd for pd in pods.list_labelled_pods(namespace, name)}
    names = {mf.pod_name(name)}
    if status.current is not None:
        names.add(status.current.pod)
    if status.transition is not None and status.transition.from_pod:
        names.add(status.transition.from_pod)
    for pod_name in sorted(names):
        pod = pods.read_pod(namespace, pod_name)
        # The GET is fresher than the list: drop what the list says under that name.
        found = {u: pd for u, pd in found.items() if pd["metadata"]["name"] != pod_name}
        if pod is not None:
            found[pod["metadata"]["uid"]] = pod
    return sorted(found.values(), key=lambda pd: (pd["metadata"].get("creationTimestamp") or "", pd["metadata"]["name"]))


def read_snapshot(namespace: str, name: str, local: Local) -> Snapshot | None:
    """None when the runtime no longer exists."""
    rt = runtimes.read_runtime(namespace, name)
    if rt is None:
        return None
    meta = rt.get("metadata") or {}
    spec_error: str | None = None
    try:
        spec = spec_model.ToolRuntimeSpec.model_validate(rt.get("spec") or {})
    except pydantic.ValidationError as exc:
        # A malformed field the CRD let through: keep observing with safe defaults, so the
        # runtime reports it (Degraded InvalidSpec) and can still be retired and deleted.
        spec, spec_error = spec_model.ToolRuntimeSpec(template={}), _error_text(exc)
    status = st.ToolRuntimeStatus.model_validate(rt.get("status") or {})
    uid = meta["uid"]
    raw_pods = read_pods(namespace, name, uid, status)
    lease = leases.read_lease(namespace, mf.lease_name(name))
    svc = services.read_service(namespace, name)
    refs: list[tuple[str, str, bool]] = []
    if spec_error is None:
        try:
            refs = mf.config_refs(spec.template)
        except (AttributeError, TypeError, ValueError) as exc:
            # e.g. `volumes: "x"`: the CRD preserves unknown PodSpec fields without checking them.
            spec_error = f"spec.template cannot be read: {type(exc).__name__}: {exc}"
    digest, missing, unreadable = configrefs.read_config_digest(namespace, refs) if refs else ("", [], [])
    pod_infos = tuple(pod_info(pd, runtime=name, runtime_uid=uid) for pd in raw_pods)
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
        lease=lease_info(lease, local.lease_duration_seconds, local.lease_unchanged_seconds(lease)),
        service=service_info(svc, uid),
        endpoints_list_retiring_pod=endpoints_listed,
        missing_config_refs=tuple(missing),
        unreadable_config_refs=tuple(unreadable),
        identity=local.identity,
        lease_duration_seconds=local.lease_duration_seconds,
        lease_held_here=local.lease_held_here,
        lock_wait_since=local.lock_wait_since,
        last_error=local.last_error,
        pod_rejected=local.pod_rejected,
        spec_error=spec_error,
        shutting_down=local.shutting_down,
        backoff_base_seconds=local.backoff_base_seconds,
    )
    return Snapshot(observed=observed, runtime=rt, pods=raw_pods, lease=lease)
