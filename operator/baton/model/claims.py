"""ToolRuntimeClaim, as decide() sees it: a consumer's record that it depends on one generation."""

from __future__ import annotations

import datetime
import enum
from typing import Annotated, Any, Union

import pydantic

from baton.model import base


class ClaimState(str, enum.Enum):
    SPECULATIVE = "Speculative"
    COMMIT_ELIGIBLE = "CommitEligible"
    COMMITTED = "Committed"
    RELEASED = "Released"
    ABANDONED = "Abandoned"


# These pin the generation they name (and the generations of the branches they reference).
PINNING = (ClaimState.COMMIT_ELIGIBLE, ClaimState.COMMITTED)

StateValue = Annotated[Union[ClaimState, str], pydantic.Field(union_mode="left_to_right")]


class ClaimPhase(str, enum.Enum):
    BOUND = "Bound"
    STALE = "Stale"  # the generation it names is gone: it pins nothing


# The claim's condition saying the same as its phase (API conventions: conditions, not a phase):
# Bound=True reason GenerationExists, Bound=False reason Stale.
BOUND_CONDITION = "Bound"
BOUND_REASONS = {ClaimPhase.BOUND: "GenerationExists", ClaimPhase.STALE: "Stale"}


def bound_status(phase: ClaimPhase) -> str:
    """The Bound condition's status for `phase`."""
    return "True" if phase == ClaimPhase.BOUND else "False"


def status_wire(phase: ClaimPhase, message: str, at: datetime.datetime) -> dict[str, Any]:
    """The claim's whole status as written: its phase, and the Bound condition saying the same
    (written only when one of them changes, so `at` is when its status last changed)."""
    return {"phase": phase.value, "message": message, "conditions": [{
        "type": BOUND_CONDITION, "status": bound_status(phase), "reason": BOUND_REASONS[phase], "message": message,
        "lastTransitionTime": at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}]}


class Claim(base.Model):
    name: str
    uid: str = ""
    runtime: str  # spec.runtimeRef.name
    generation: int
    fork: str
    branch: str
    # A state this version does not know parses as a plain string, and pins nothing.
    state: StateValue
    references: tuple[str, ...] = ()
    phase: str | None = None  # status.phase as last written
    bound: str | None = None  # status of its Bound condition as last written (None: none yet)
