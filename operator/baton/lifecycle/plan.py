"""What decide() returns: actions for the executor to carry out, in order, and how long to wait.

Plain frozen dataclasses; the executor (``baton.execute``) is the only thing that acts on them.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any, Union

from baton.model import status


class Metric(str, enum.Enum):
    HANDOFFS = "handoffs"  # labels: outcome
    CLEANUP_FAILURES = "cleanup_failures"  # labels: reason
    FORCE_RECOVERIES = "force_recoveries"
    STALE_VERBS = "stale_verbs"  # labels: verb
    DRAIN_INCOMPLETE = "drain_incomplete"
    CONNECT_TIMEOUTS = "connect_timeouts"
    LOCK_TIMEOUTS = "lock_timeouts"
    STEP_DURATION = "step_duration"  # labels: step; value: seconds
    TRANSITIONS = "transitions"  # labels: kind
    POD_REJECTIONS = "pod_rejections"
    NAME_CONFLICTS = "name_conflicts"  # labels: kind
    RETIREMENTS_BLOCKED = "retirements_blocked"  # a retire became RetirementBlocked (counter)
    FORCE_RETIRES = "force_retires"
    WAKES = "wakes"  # labels: outcome (Woken | Failed); spec.idle
    WAKE_SECONDS = "wake_seconds"  # value: seconds from the wake's start to Ready (Woken only)
    HOOK_RUNS = "hook_runs"  # labels: hook, outcome (spec.hooks)
    HOOK_SECONDS = "hook_seconds"  # labels: hook; value: seconds from the hook's start to its end


@dataclasses.dataclass(frozen=True)
class AddFinalizer:
    pass


@dataclasses.dataclass(frozen=True)
class RemoveFinalizer:
    pass


@dataclasses.dataclass(frozen=True)
class ConfirmNoPod:
    """The authoritative GET of the runtime's one pod name, when the plan is carried out (not
    when it was decided): a pod of that name owned by the runtime stops the plan, and the next
    pass reads it and retires it. Views are label-selected, so a late create whose label was
    edited off, or one that landed after this plan was decided, is seen only here."""

    pod: str


@dataclasses.dataclass(frozen=True)
class RemoveAnnotation:
    """Remove a verb annotation only if it still holds `value` (the one acted on): a newer
    request written meanwhile is never lost."""

    key: str
    value: str
    # A refusal is said by whoever consumes the verb: with `consumes`, the rest of the plan (its
    # Warning event) runs only if this removal landed; another replica that removed it first
    # has said it (several replicas refusing one stale verb posted one event each).
    consumes: bool = False


@dataclasses.dataclass(frozen=True)
class AcquireLease:
    token: int


@dataclasses.dataclass(frozen=True)
class ReleaseLease:
    pass


@dataclasses.dataclass(frozen=True)
class DeleteLease:
    pass


@dataclasses.dataclass(frozen=True)
class WriteStatus:
    """Persist this whole status (the executor writes only the fields that changed)."""

    status: status.ToolRuntimeStatus


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Record:
    metric: Metric
    labels: tuple[tuple[str, str], ...] = ()
    value: float = 1.0


@dataclasses.dataclass(frozen=True)
class EnsureService:
    manifest: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class DeleteService:
    pass


@dataclasses.dataclass(frozen=True)
class EnsureGatewaySlice:
    """Create or replace the EndpointSlice that routes the runtime's Service to the gateway pods
    (`uid`: the one this runtime owns, as observed; None: create it)."""

    manifest: dict[str, Any]
    uid: str | None


@dataclasses.dataclass(frozen=True)
class DeleteEndpointSlice:
    """Delete exactly this EndpointSlice of the runtime's Service (UID precondition)."""

    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class EnsureNetworkPolicy:
    """Create the runtime's tool-pod NetworkPolicy, or patch the one it owns (`uid`, as observed;
    None: create it)."""

    manifest: dict[str, Any]
    uid: str | None


@dataclasses.dataclass(frozen=True)
class DeleteNetworkPolicy:
    """Delete exactly the runtime's tool-pod NetworkPolicy (UID precondition)."""

    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class CreatePod:
    manifest: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class SetServing:
    """Label the pod (by UID) into or out of the Service.

    ``pins_of``: the generation whose pins gate this stop of admission. decide() found none on
    the view it planned from; the executor checks again on the view it sends from, because a
    slow or paused pass may send later (a claim committed, or the claims view lost, meanwhile).
    None: no pin gate (admission to it goes on, or a person force-retired it, or it is lost)."""

    pod: str
    uid: str
    serving: bool
    pins_of: int | None = None


@dataclasses.dataclass(frozen=True)
class DeletePod:
    """Delete with a UID precondition, so a same-named successor can never be hit."""

    pod: str
    uid: str
    grace_seconds: int


@dataclasses.dataclass(frozen=True)
class ForceDeletePod:
    """Grace 0 and strip finalizers: abandons the pod. Only after a recorded force recovery."""

    pod: str
    uid: str


@dataclasses.dataclass(frozen=True)
class SetClaimPhase:
    """Write a ToolRuntimeClaim's status.phase (Bound, or Stale once its generation is gone) and
    its Bound condition, which says the same (`at`: its lastTransitionTime, as decided)."""

    name: str
    uid: str
    phase: str
    message: str
    at: datetime.datetime | None = None


Action = Union[
    AddFinalizer,
    RemoveFinalizer,
    ConfirmNoPod,
    RemoveAnnotation,
    AcquireLease,
    ReleaseLease,
    DeleteLease,
    WriteStatus,
    Event,
    Record,
    EnsureService,
    DeleteService,
    EnsureGatewaySlice,
    DeleteEndpointSlice,
    EnsureNetworkPolicy,
    DeleteNetworkPolicy,
    CreatePod,
    SetServing,
    DeletePod,
    ForceDeletePod,
    SetClaimPhase,
]

# Actions that change pods: the executor refuses them unless this process holds the Lease, fresh
# (renewed within its duration minus a safety margin, by the local monotonic clock). Status
# writes of a holder are held to the same rule; a non-holder's (LockTimeout) carry the
# resourceVersion it read, so they never overwrite the holder's.
FENCED = (CreatePod, SetServing, DeletePod, ForceDeletePod)
# What a lease_free plan may send without the Lease: never a create.
LEASE_FREE_IN_TERMINATING_NAMESPACE = (SetServing, DeletePod, ForceDeletePod)


@dataclasses.dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    # None: nothing is due until something changes (an event wakes the runtime).
    # 0: observe again at once. N: observe again after N seconds at the latest.
    wait_seconds: float | None = None
    note: str = ""
    # True while this runtime needs the Lease and another process holds it (lock wait).
    lease_wait: bool = False
    # Carried out without the Lease: a deleted runtime in a namespace being deleted, where no
    # Lease can be created again and the API server refuses every pod create, for everyone.
    # The executor then lets pod relabels and deletes through (never a create).
    lease_free: bool = False

    def kinds(self) -> list[str]:
        return [type(a).__name__ for a in self.actions]

    def find(self, kind: type[Any]) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]
