"""The snapshot decide() works from: what the API server said, plus this process's own facts.

Built by ``baton.k8s.observe``; everything here is plain data.
"""

from __future__ import annotations

import datetime

import pydantic

from baton.model import base, spec, status


class PodInfo(base.Model):
    name: str
    uid: str
    generation: int | None = None  # from label baton.dev/generation; None for a foreign pod
    phase: str = "Pending"
    ready: bool = False
    deleting: bool = False  # deletionTimestamp set
    finalizers: tuple[str, ...] = ()
    serving: bool = False
    created_at: datetime.datetime | None = None
    ip: str | None = None
    template_hash: str | None = None  # annotation baton.dev/template-hash


class LeaseInfo(base.Model):
    exists: bool = False
    holder: str | None = None
    renew_time: datetime.datetime | None = None
    duration_seconds: int = 15
    token: int = 0

    def expires_at(self) -> datetime.datetime | None:
        if self.renew_time is None:
            return None
        return self.renew_time + datetime.timedelta(seconds=self.duration_seconds)

    def free_at(self, now: datetime.datetime) -> bool:
        """Nobody holds it: never taken, released, or its holder stopped renewing."""
        if not self.holder:
            return True
        expiry = self.expires_at()
        return expiry is None or expiry <= now


class ServiceInfo(base.Model):
    """The parts of the runtime's Service that Baton owns."""

    exists: bool = False
    selector: dict[str, str] = pydantic.Field(default_factory=dict)
    ports: tuple[spec.ServicePort, ...] = ()
    session_affinity: str | None = None


class Observed(base.Model):
    # The runtime.
    namespace: str
    name: str
    uid: str
    meta_generation: int
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    annotations: dict[str, str] = pydantic.Field(default_factory=dict)
    spec: spec.ToolRuntimeSpec
    status: status.ToolRuntimeStatus
    desired_hash: str
    # What is around it.
    pods: tuple[PodInfo, ...] = ()
    lease: LeaseInfo = pydantic.Field(default_factory=LeaseInfo)
    service: ServiceInfo = pydantic.Field(default_factory=ServiceInfo)
    # Only read while stopping admission: does any EndpointSlice still list the old pod ready?
    endpoints_list_retiring_pod: bool | None = None
    # Only read while draining: did the drain probe answer 200?
    drain_idle: bool | None = None
    # Referenced ConfigMaps/Secrets that do not exist (names only, never data).
    missing_config_refs: tuple[str, ...] = ()
    # Referenced objects Baton may not read (RBAC): they block nothing, but their data is not hashed.
    unreadable_config_refs: tuple[str, ...] = ()
    # This process.
    identity: str
    lease_duration_seconds: int = 15
    # Whether this process itself holds the Lease (renewing it). The Lease may name this identity
    # and still not be held here: a container restarted under the same pod name.
    lease_held_here: bool = False
    lock_wait_since: datetime.datetime | None = None  # when this process began waiting for the Lease
    reset_waiting_since: datetime.datetime | None = None  # when this process first saw a pending reset
    last_error: str | None = None  # the last action of this runtime that failed, if any
    shutting_down: bool = False
    backoff_base_seconds: float = 5.0

    def pod_by_uid(self, uid: str | None) -> PodInfo | None:
        for p in self.pods:
            if uid is not None and p.uid == uid:
                return p
        return None

    def pod_by_name(self, name: str) -> PodInfo | None:
        for p in self.pods:
            if p.name == name:
                return p
        return None
