"""The pin decision: may generation N of a runtime be retired, given the claims on it? Pure.

A claim pins generation N when it is CommitEligible or Committed and either names N itself, or
references a branch of its own fork that holds any claim on N (whatever that claim's state, even
Abandoned: the effects this branch observed came from N). Released, Speculative and Abandoned
claims pin nothing by themselves; neither does a claim on another generation unless it references
such a branch. Claims of other runtimes are ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from baton.model import claims as cm


@dataclasses.dataclass(frozen=True)
class Pins:
    """What pins a generation: the pinning claims (names) and the referenced branches
    ((fork, branch)) through which they pin it. Empty: the generation may be retired."""

    claims: tuple[str, ...] = ()
    branches: tuple[tuple[str, str], ...] = ()
    unknown: bool = False  # the claims could not be read: treated as pinned (fail closed)

    @property
    def pinned(self) -> bool:
        return bool(self.claims) or self.unknown

    def describe(self) -> str:
        if self.unknown:
            return "ToolRuntimeClaims not yet readable (the claims view is not listed, or forbidden)"
        text = "claims " + ", ".join(self.claims)
        if self.branches:
            text += " (through branches " + ", ".join(f"{fork}/{branch}" for fork, branch in self.branches) + ")"
        return text


def pins(*, claims: Iterable[cm.Claim], runtime: str, generation: int, known: bool = True) -> Pins:
    if not known:
        return Pins(unknown=True)
    mine = [c for c in claims if c.runtime == runtime]
    # (fork, branch) of every claim on this generation, whatever its state.
    on_generation = {(c.fork, c.branch) for c in mine if c.generation == generation}
    pinning: list[str] = []
    through: set[tuple[str, str]] = set()
    for c in mine:
        if c.state not in cm.PINNING:
            continue
        referenced = sorted({(c.fork, ref) for ref in c.references} & on_generation)
        if c.generation == generation or referenced:
            pinning.append(c.name)
            through.update(referenced)
    return Pins(claims=tuple(sorted(pinning)), branches=tuple(sorted(through)))
