"""ToolRuntimeClaim, as decide() sees it: a consumer's record that it depends on one generation."""

from __future__ import annotations

import enum
from typing import Annotated, Union

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
