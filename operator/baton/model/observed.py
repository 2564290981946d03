"""The snapshot decide() works from: what the API server said, plus this process's own facts.

Built by ``baton.cache.snapshot`` from the views; everything here is plain data.
"""

from __future__ import annotations

import datetime

import pydantic

from baton.model import base, spec, status
from baton.model import claims as claims_model
from baton.model import status as status_model  # inside Observed, `status` names the field


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
    # Controller ownerReference names this runtime's UID. Baton acts only on pods it owns: a
    # pod that merely has the runtime's name or labels is never patched, adopted or deleted.
    owned: bool = True
    labelled: bool = True  # carries baton.dev/runtime=<this runtime>
    # A container that ended: its name, exit status and termination message (bounded), e.g. a
    # stdio child's "exit status 1; stderr: ..." (docs/stdio.md); None while none has ended.
    terminated: str | None = None


class LeaseInfo(base.Model):
    exists: bool = False
    holder: str | None = None
    renew_time: datetime.datetime | None = None  # the holder's clock: shown, never compared
    duration_seconds: int = 15
    token: int = 0
    # How long this process has seen the Lease unchanged (same resourceVersion), by its own
    # monotonic clock. Expiry is judged from this, never from renewTime: another machine's
    # timestamp compared with our wall clock breaks as soon as the clocks drift.
    unchanged_seconds: float = 0.0

    def free(self) -> bool:
        """Nobody holds it: never taken, released, or its holder stopped renewing."""
        return not self.holder or self.unchanged_seconds >= self.duration_seconds

    def seconds_until_free(self) -> float:
        return 0.0 if self.free() else self.duration_seconds - self.unchanged_seconds


class ServiceInfo(base.Model):
    """The parts of the runtime's Service that Baton owns."""

    exists: bool = False
    owned: bool = True  # controller ownerReference to this runtime; a foreign one is never touched
    uid: str | None = None
    selector: dict[str, str] = pydantic.Field(default_factory=dict)
    ports: tuple[spec.ServicePort, ...] = ()
    session_affinity: str | None = None


class GatewayEndpoint(base.Model):
    """A gateway pod that may take the runtime's calls (spec.service.gateway): Ready, not being
    deleted, with an IP and its calls port (names.GATEWAY_PORT_NAME)."""

    pod: str
    namespace: str
    uid: str
    ip: str
    port: int
    node: str | None = None


class SliceInfo(base.Model):
    """An EndpointSlice of the runtime's Service, as far as decide() compares it."""

    name: str
    uid: str
    manager: str | None = None  # label endpointslice.kubernetes.io/managed-by
    owned: bool = False  # controller ownerReference to this runtime
    shape: str = ""  # manifests.slice_shape: what Baton writes of it, canonical


class NetworkPolicyInfo(base.Model):
    """The runtime's tool-pod NetworkPolicy (names.tool_pod_policy_name), as decide() compares it."""

    exists: bool = False
    owned: bool = True  # controller ownerReference to this runtime; a foreign one is never touched
    uid: str | None = None
    shape: str = ""  # manifests.policy_shape: what Baton writes of it, canonical


class Activity(base.Model):
    """What the live gateway replicas said of a runtime's calls (GET /v1/activity; spec.idle)."""

    idle_seconds: float  # min over the live gateway replicas: seconds since a call that counts
    inflight: int  # summed over the replicas
    held: int


class ToolPodIsolation(base.Model):
    """BATON_ISOLATE_TOOL_PODS on: who may reach a gateway-routed runtime's pods. The gateway's
    pods (LABEL_COMPONENT=gateway) and the operator's (these labels) in `system_namespace`."""

    system_namespace: str
    operator_pod_labels: tuple[tuple[str, str], ...]


class HookAnswer(base.Model):
    """The answer to the hook call of status.transition.hook (baton.hooking), for this very run."""

    ok: bool  # 2xx
    message: str  # what it answered (bounded), or why it could not be called


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
    # What desired_hash is built from: ("template", digest), ("ConfigMap/<name>", digest)...
    desired_parts: tuple[tuple[str, str], ...] = ()
    # Set when the serving generation's parts hold a referenced object as "unseen" (unreadable when
    # it started) and it is readable now: desired_hash keeps "unseen" (readability alone never
    # hands off); these are the hash and parts with its value now, which the steady status records
    # as the serving generation's (no handoff), so that its later changes are seen.
    adopt_hash: str | None = None
    adopt_parts: tuple[tuple[str, str], ...] = ()
    # What is around it.
    pods: tuple[PodInfo, ...] = ()
    lease: LeaseInfo = pydantic.Field(default_factory=LeaseInfo)
    service: ServiceInfo = pydantic.Field(default_factory=ServiceInfo)
    # Only read while stopping admission: does any EndpointSlice still list the old pod ready?
    endpoints_list_retiring_pod: bool | None = None
    # Only read while draining, by the Lease holder: did the drain probe answer 200?
    drain_idle: bool | None = None
    drain_probe_error: str | None = None  # why the last probe did not count as idle
    # The drain probe answered 404, 405 or 501 (no such endpoint): misconfigured, never "busy".
    # Asked while Draining, and once of a new generation's pod when it becomes Ready.
    drain_probe_misconfigured: bool = False
    # The new pod's one probe (is the probe's path there?) is in flight: it becomes current after.
    drain_probe_checking: bool = False
    # (Also while a change waits for idle under handoff policy WhenIdle, then of the serving pod.)
    # When this process last probed the serving pod for a waiting change (its own clock).
    idle_checked_at: datetime.datetime | None = None
    # Only with spec.service.gateway, filled by the Lease holder outside decide() (baton.sealing):
    # while stopping admission, whether every live gateway replica confirmed that it forwards no
    # new call to the retiring pod (None: not asked, counted as not confirmed); while draining,
    # the calls still in flight on it summed over the live replicas (None: a replica could not
    # be read, counted busy). `gateway_unconfirmed` names the replicas that did not answer.
    gateway_sealed: bool | None = None
    gateway_inflight: int | None = None
    gateway_unconfirmed: tuple[str, ...] = ()
    # The same ask as a person reads it in status.transition.gatewayCalls (never a decision's
    # input): in flight and held summed over the replicas that answered. None: not asked this pass.
    gateway_calls: status_model.GatewayCalls | None = None
    gateway_error: str | None = None  # the gateway Leases could not be listed: why
    # spec.idle only, filled outside decide(): the gateway replicas' activity for the runtime
    # (None: not asked, or a replica could not be read: never idled on it), and who demands a wake
    # (a gateway replica's ANN_WAKE_DEMAND naming the runtime, for messages; None: nobody).
    activity: Activity | None = None
    wake_demand: str | None = None
    # The gateway pods of the system namespace that may take calls, from their watch-fed view
    # (only read with spec.service.gateway), and whether that view is listed: until it is, the
    # Service is routed as it stands (an empty view says nothing).
    gateway_endpoints: tuple[GatewayEndpoint, ...] = ()
    gateway_endpoints_known: bool = False
    # The EndpointSlices of the runtime's Service (kubernetes.io/service-name=<runtime>).
    slices: tuple[SliceInfo, ...] = ()
    # BATON_ISOLATE_TOOL_PODS: None when off (Baton then neither makes nor removes the policy);
    # else whom the policy admits, the policy as watched, and whether that view is listed.
    tool_pod_isolation: ToolPodIsolation | None = None
    network_policy: NetworkPolicyInfo = pydantic.Field(default_factory=NetworkPolicyInfo)
    network_policy_known: bool = False
    # ToolRuntimeClaims that name this runtime (spec.runtimeRef.name), from the watch-fed view.
    claims: tuple[claims_model.Claim, ...] = ()
    # False until the claims view is listed (or while it is forbidden): pins are then unknown, and
    # a retire waits as if pinned (fail closed), within budgets.pinSeconds.
    claims_known: bool = True
    # Referenced ConfigMaps/Secrets that do not exist (names only, never data).
    missing_config_refs: tuple[str, ...] = ()
    # Referenced objects Baton may not read (RBAC): they block nothing, and keep the part they had
    # when the serving generation started (readability never changes the hash).
    unreadable_config_refs: tuple[str, ...] = ()
    # This process.
    identity: str
    lease_duration_seconds: int = 15
    # Whether this process itself holds the Lease (renewing it). The Lease may name this identity
    # and still not be held here: a container restarted under the same pod name.
    lease_held_here: bool = False
    lock_wait_since: datetime.datetime | None = None  # when this process began waiting for the Lease
    last_error: str | None = None  # the last action of this runtime that failed, if any
    # The API server refused the last pod create (4xx other than AlreadyExists): its message.
    pod_rejected: str | None = None
    # Our create of this generation got no definite answer (a timeout, a dropped connection, a
    # 5xx): it may still land, so the number is never sent again (invariant 2).
    create_in_doubt: int | None = None
    # The fencing tokens this process acquired for the runtime (the last few). A transition
    # written under one of them was acted on here: what its create came to is known here
    # (create_in_doubt), so taking the Lease again need not give its number up.
    tokens_here: tuple[int, ...] = ()
    # A Lease create was refused because the runtime's namespace is being deleted: nothing can be
    # created there again, by anyone (pods included), so a deletion finishes without the Lease.
    namespace_terminating: bool = False
    # Our Lease create was refused as AlreadyExists while the label-selected view shows no Lease:
    # one without the label `baton.dev/runtime=<rt>` holds the name (a person edited it off). The
    # message names the Lease and what to do; None once a Lease was acquired.
    lease_outside_view: str | None = None
    # The API server refused the last write of the runtime's Service (not a conflict): its message.
    service_error: str | None = None
    # The spec could not be read (a malformed field the CRD let through); `spec` then holds
    # the defaults, enough to retire and delete safely.
    spec_error: str | None = None
    shutting_down: bool = False
    backoff_base_seconds: float = 5.0
    # Baton's own image (BATON_IMAGE): a stdio runtime's pod copies the bridge from it.
    bridge_image: str = ""
    # spec.hooks, filled outside decide() for the Lease holder only (baton.hooking): the answer to
    # the call of status.transition.hook's run (None: not called yet, or still in flight).
    hook_answer: HookAnswer | None = None

    def pod_by_uid(self, uid: str | None) -> PodInfo | None:
        for p in self.pods:
            if uid is not None and p.uid == uid:
                return p
        return None

    def owned_pods(self) -> tuple[PodInfo, ...]:
        return tuple(p for p in self.pods if p.owned)

    def pod_by_name(self, name: str) -> PodInfo | None:
        for p in self.pods:
            if p.name == name:
                return p
        return None
