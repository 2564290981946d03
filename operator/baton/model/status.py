"""ToolRuntime status: the persisted lifecycle state (docs/design.md, "Status")."""

from __future__ import annotations

import datetime
import enum
from typing import Annotated, Union

import pydantic

from baton.model import base


class ConditionType(str, enum.Enum):
    """The condition types this version writes. Others (another tool's) are kept as they are."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    CLEANUP_FAILED = "CleanupFailed"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    UPDATE_PENDING = "UpdatePending"
    RETIREMENT_BLOCKED = "RetirementBlocked"


# Present from a runtime's first status write on; the later ones appear when they first apply.
INITIAL_CONDITIONS = (ConditionType.READY, ConditionType.PROGRESSING, ConditionType.CLEANUP_FAILED,
                      ConditionType.DEGRADED, ConditionType.SUSPENDED)


class Reason(str, enum.Enum):
    """Condition and event reasons: one CamelCase word each."""

    GENERATION_READY = "GenerationReady"
    IDLE = "Idle"
    CLEAN = "Clean"
    HEALTHY = "Healthy"
    ACTIVE = "Active"
    NO_GENERATION = "NoGeneration"
    POD_NOT_READY = "PodNotReady"
    STOPPING_ADMISSION = "StoppingAdmission"
    DRAINING = "Draining"
    DRAIN_INCOMPLETE = "DrainIncomplete"
    TERMINATING = "Terminating"
    AWAITING_POD_GONE = "AwaitingPodGone"
    CREATING = "Creating"
    CONNECTING = "Connecting"
    CONNECT_TIMEOUT = "ConnectTimeout"
    LOCK_TIMEOUT = "LockTimeout"
    POD_STUCK_TERMINATING = "PodStuckTerminating"
    DELETE_REJECTED = "DeleteRejected"
    FORCE_RECOVERED = "ForceRecovered"
    POD_GONE = "PodGone"
    SUSPENDED = "Suspended"
    BACKING_OFF = "BackingOff"
    DELETING = "Deleting"
    CONFIG_REF_MISSING = "ConfigRefMissing"
    CONFIG_REF_UNREADABLE = "ConfigRefUnreadable"
    POD_REJECTED = "PodRejected"
    NAME_CONFLICT = "NameConflict"
    MULTIPLE_PODS = "MultiplePods"
    INVALID_SPEC = "InvalidSpec"
    UNKNOWN_STEP = "UnknownStep"
    SERVICE_ERROR = "ServiceError"
    LEASE_OUTSIDE_VIEW = "LeaseOutsideView"  # Degraded: the Lease exists, but not with our label
    DRAIN_PROBE_MISCONFIGURED = "DrainProbeMisconfigured"  # Degraded, event: the probe's path is not the tool's
    WAITING_FOR_IDLE = "WaitingForIdle"  # UpdatePending: policy WhenIdle
    WAITING_FOR_RESET = "WaitingForReset"  # UpdatePending: policy Manual
    UP_TO_DATE = "UpToDate"  # UpdatePending=False
    AWAITING_PIN_RELEASE = "AwaitingPinRelease"  # Progressing: a retire waits for claims' pins
    PINNED_BY_COMMIT_ELIGIBLE_CLAIM = "PinnedByCommitEligibleClaim"  # RetirementBlocked=True
    NOT_BLOCKED = "NotBlocked"  # RetirementBlocked=False
    FORCE_RETIRED = "ForceRetired"  # event: a person retired a pinned generation
    STALE_FORCE_RETIRE = "StaleForceRetire"  # event: a force-retire naming another generation
    # Idle and wake (spec.idle). IDLE (above) is also Ready=False while idle.
    WAKING = "Waking"  # Ready=False while the wake's pod starts; event: a wake began
    WAKE_FAILED = "WakeFailed"  # Ready=False, Degraded=True: the wake missed spec.idle.wakeSeconds
    WAKE_TIMEOUT = "WakeTimeout"  # Baton-Reason: the gateway's 503 to held calls past wakeSeconds
    WOKEN = "Woken"  # event: the wake's generation is Ready
    # Hooks (spec.hooks; issue 45): CleanupFailed=True (preRetire) or Degraded=True (postReady) while
    # a Fail hook's failure holds the step; events for each hook's end, and a retry verb refused.
    HOOK_FAILED = "HookFailed"
    HOOK_SUCCEEDED = "HookSucceeded"  # event
    HOOK_IGNORED = "HookIgnored"  # event: a failed Ignore hook, and the step went on
    HOOK_RETRIED = "HookRetried"  # event: baton.dev/retry-hook ran a failed hook again
    STALE_RETRY_HOOK = "StaleRetryHook"  # event: baton.dev/retry-hook named no failed hook
    # Event-only reasons.
    TRANSITION_STARTED = "TransitionStarted"
    POD_LOST = "PodLost"
    CREATE_IN_DOUBT = "CreateInDoubt"
    STALE_RESET = "StaleReset"
    STALE_FORCE_RECOVERY = "StaleForceRecovery"
    CLEANUP_FAILED = "CleanupFailed"
    LEASE_ACQUIRED = "LeaseAcquired"


class Step(str, enum.Enum):
    """Where a transition stands; persisted in status.transition.step before it is acted on."""

    STOPPING_ADMISSION = "StoppingAdmission"
    DRAINING = "Draining"
    TERMINATING = "Terminating"
    AWAITING_POD_GONE = "AwaitingPodGone"
    CLEANUP_FAILED = "CleanupFailed"
    PRE_RETIRE_HOOK = "PreRetireHook"  # after the drain, before the delete: spec.hooks.preRetire runs
    CREATING = "Creating"
    CONNECTING = "Connecting"
    FINALIZING = "Finalizing"


class TransitionKind(str, enum.Enum):
    CREATE = "Create"  # no predecessor: start generation `to`
    HANDOFF = "Handoff"  # retire `from`, then start `to`
    RETIRE = "Retire"  # retire `from`, start nothing (suspend, connect failure, orphan)
    DELETE = "Delete"  # retire `from` if any, then remove Service, Lease and the finalizer


class Trigger(str, enum.Enum):
    INITIAL = "Initial"
    TEMPLATE_CHANGED = "TemplateChanged"
    RESET = "Reset"
    POD_LOST = "PodLost"
    CONNECT_TIMEOUT = "ConnectTimeout"
    RETRY = "Retry"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    DELETED = "Deleted"
    ORPHAN = "Orphan"
    IDLE = "Idle"  # the retire of an idle generation (spec.idle): nothing is started after it
    WAKE = "Wake"  # the create of an idle runtime's next generation, demanded by a call or a person


class Outcome(str, enum.Enum):
    """How a generation ended, in status.history."""

    RETIRED = "Retired"
    RESET = "Reset"
    FORCE_RECOVERED = "ForceRecovered"
    CONNECT_TIMEOUT = "ConnectTimeout"
    SUSPENDED = "Suspended"
    DELETED = "Deleted"
    LOST = "Lost"
    ORPHANED = "Orphaned"  # deleted with --cascade=orphan (or disowned mid-delete): the pod is left running
    IDLED = "Idled"  # retired as idle (spec.idle): the runtime waits for a wake


# A known value parses as its enum member, anything else stays a plain string (left to right).
StepValue = Annotated[Union[Step, str], pydantic.Field(union_mode="left_to_right")]
KindValue = Annotated[Union[TransitionKind, str], pydantic.Field(union_mode="left_to_right")]
TriggerValue = Annotated[Union[Trigger, str], pydantic.Field(union_mode="left_to_right")]
OutcomeValue = Annotated[Union[Outcome, str], pydantic.Field(union_mode="left_to_right")]
ReasonValue = Annotated[Union[Reason, str], pydantic.Field(union_mode="left_to_right")]


class Condition(base.Model):
    # A plain string: conditions of types this version does not know are kept verbatim.
    type: str
    status: str
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: datetime.datetime | None = None


class Current(base.Model):
    generation: int
    pod: str
    uid: str
    template_hash: str
    # What the hash was built from: "template" and each referenced "ConfigMap/<name>" or
    # "Secret/<name>", each with its own digest; tells which of them a later change touched.
    parts: dict[str, str] | None = None
    started_at: datetime.datetime | None = None
    ready_since: datetime.datetime | None = None
    hooks: tuple[HookRecord, ...] = ()  # its postReady, carried into its history entry


class GatewayCalls(base.Model):
    """What the live gateway replicas said of the retiring generation at the last ask (only with
    spec.service.gateway, only while StoppingAdmission and Draining; cleared when the retire moves
    on): calls in flight on it, calls held for the next generation, how many replicas answered,
    and (Draining) the MCP sessions they last forwarded to it."""

    inflight: int | None = None  # summed over the replicas that answered; None: none could be read
    held: int | None = None  # None: no replica answered with a held count (an older gateway)
    replicas: int = 0  # live replicas asked
    unconfirmed: int = 0  # of those, how many did not answer
    # Distinct over the replicas that answered; None: none answered, or one without the list (an
    # older gateway). Carried into the history entry as sessionsToRebind.
    sessions: int | None = None


class Transition(base.Model):
    # Values this version does not know (written by a newer Baton before a rollback) parse as
    # plain strings: observation never fails on them, and decide() treats them conservatively.
    kind: KindValue
    trigger: TriggerValue
    # Wire name "from" (a Python keyword). No plain `alias`: mypy (without the pydantic plugin)
    # would then require `from=` in the constructor, which cannot be spelled.
    from_: int | None = pydantic.Field(
        default=None, validation_alias=pydantic.AliasChoices("from", "from_"), serialization_alias="from"
    )
    from_pod: str | None = None
    from_uid: str | None = None
    from_started_at: datetime.datetime | None = None
    to: int | None = None
    to_uid: str | None = None
    template_hash: str | None = None
    step: StepValue
    started_at: datetime.datetime
    step_started_at: datetime.datetime
    deadline: datetime.datetime | None = None
    drain_incomplete: bool = False
    # What the drain did not do, for the history entry: calls cut at the budget, or not waited for.
    drain_note: str | None = None
    # The gateway replicas' last answer about the retiring pod (written only when it changed).
    gateway_calls: GatewayCalls | None = None
    # Its session count, kept from the drain's end (gatewayCalls is cleared then) for the history entry.
    sessions_to_rebind: int | None = None
    forced: bool = False
    message: str | None = None
    attempt: int | None = None  # refusals of this step by the API server (pod creation)
    not_before: datetime.datetime | None = None  # back-off: the step is not retried before
    # Pins (ToolRuntimeClaims): when this retire began waiting for them before stopping admission,
    # whether it is past budgets.pinSeconds (RetirementBlocked), and a force-retire that ended it.
    pin_wait_since: datetime.datetime | None = None
    pin_blocked: bool = False
    force_retired: str | None = None
    # spec.hooks: the hook in progress (or held failed), and the ones this transition ended.
    hook: HookRun | None = None
    hooks: tuple[HookRecord, ...] = ()

    @property
    def retiring(self) -> bool:
        return self.step in (
            Step.STOPPING_ADMISSION,
            Step.DRAINING,
            Step.TERMINATING,
            Step.AWAITING_POD_GONE,
            Step.CLEANUP_FAILED,
            Step.PRE_RETIRE_HOOK,
        )


class HookName(str, enum.Enum):
    PRE_RETIRE = "preRetire"
    POST_READY = "postReady"


class HookOutcome(str, enum.Enum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"  # failurePolicy Fail: the step is held (until a retry or a force recovery)
    IGNORED = "Ignored"  # failed, failurePolicy Ignore: the step went on
    FORCE_RECOVERED = "ForceRecovered"  # failed, and a person let the retire go on


HookNameValue = Annotated[Union[HookName, str], pydantic.Field(union_mode="left_to_right")]
HookOutcomeValue = Annotated[Union[HookOutcome, str], pydantic.Field(union_mode="left_to_right")]
# A hook's answer kept in status (bytes of text): enough to say why, never the tool's whole body.
HOOK_MESSAGE_LIMIT = 256
# Hook records a transition, a current generation or a history entry keeps.
HOOK_RECORDS_LIMIT = 4


class HookRun(base.Model):
    """The hook in progress (status.transition.hook): persisted before it is called, its outcome
    persisted before the lifecycle moves on. A holder that finds it without an outcome (the one
    before crashed mid-call) calls it again: hooks are at least once."""

    hook: HookNameValue
    generation: int
    started_at: datetime.datetime
    attempts: int = 1
    # The token of the holder that calls it (the Baton-Fencing-Token it carries): a run found
    # without an outcome under another token was left by a holder that crashed, and is called again.
    fencing_token: int = 0
    # When the httpPost answered 2xx (a gate, if any, is waited for from here).
    called_at: datetime.datetime | None = None
    outcome: HookOutcomeValue | None = None
    message: str | None = None


class HookRecord(base.Model):
    """One hook's end, for the generation's history entry."""

    hook: HookNameValue
    outcome: HookOutcomeValue
    seconds: float
    attempts: int = 1
    message: str | None = None


class CleanupFailure(base.Model):
    generation: int
    pod: str
    uid: str
    reason: ReasonValue
    message: str
    at: datetime.datetime


class Retry(base.Model):
    attempt: int
    not_before: datetime.datetime | None = None


class HistoryEntry(base.Model):
    generation: int
    pod: str | None = None
    uid: str | None = None
    template_hash: str | None = None
    started_at: datetime.datetime | None = None
    retired_at: datetime.datetime | None = None
    outcome: OutcomeValue
    message: str | None = None
    # With spec.service.gateway: the MCP sessions the gateway replicas had last forwarded to this
    # generation when its drain ended, each re-bound to the next at its next call (None: unknown).
    sessions_to_rebind: int | None = None
    hooks: tuple[HookRecord, ...] = ()  # its hooks: postReady as it started, preRetire as it retired


class WakeOutcome(str, enum.Enum):
    WOKEN = "Woken"
    FAILED = "Failed"


WakeOutcomeValue = Annotated[Union[WakeOutcome, str], pydantic.Field(union_mode="left_to_right")]


class LastWake(base.Model):
    """The last wake of an idle runtime: when it was asked, when (and how fast) it served."""

    requested_at: datetime.datetime
    ready_at: datetime.datetime | None = None
    seconds: float | None = None  # requested_at to ready_at (Woken) or to the miss (Failed)
    outcome: WakeOutcomeValue | None = None  # None: under way
    message: str | None = None


class IdleStatus(base.Model):
    """status.idle (spec.idle): `since` is set while the runtime is idle (no generation, none
    started until a wake); the gateway reads it to hold calls as demand."""

    since: datetime.datetime | None = None
    last_wake: LastWake | None = None


class PendingReset(base.Model):
    """A reset seen mid-transition: persisted, so its wait is bounded across replicas."""

    value: str
    since: datetime.datetime


class PendingChange(base.Model):
    """A change the handoff policy holds back (WhenIdle, Manual): what it is, since when."""

    template_hash: str
    since: datetime.datetime
    changed: tuple[str, ...] = ()  # "template", "ConfigMap/<name>", "Secret/<name>"


class ToolRuntimeStatus(base.Model):
    observed_generation: int | None = None
    fencing_token: int = 0
    latest_generation: int = 0
    holder: str | None = None
    current: Current | None = None
    transition: Transition | None = None
    last_cleanup_failure: CleanupFailure | None = None
    retry: Retry | None = None
    pending_reset: PendingReset | None = None
    pending: PendingChange | None = None
    idle: IdleStatus | None = None
    history: tuple[HistoryEntry, ...] = ()
    conditions: tuple[Condition, ...] = ()

    def condition(self, kind: ConditionType) -> Condition | None:
        for c in self.conditions:
            if c.type == kind.value:
                return c
        return None


def text(value: enum.Enum | str) -> str:
    """The wire text of a known enum member or of a value this version does not know."""
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def arrow(t: Transition) -> str:
    """A transition's generations as "g4→g5" ("-" for none)."""
    a = f"g{t.from_}" if t.from_ else "-"
    b = f"g{t.to}" if t.to else "-"
    return f"{a}→{b}"
