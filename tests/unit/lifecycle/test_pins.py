"""The pin decision (baton.lifecycle.pins), pure: every combination of a claim's state, whether it
references a branch, whether that branch's claim is on the same generation and of the same fork;
then properties over random claim sets (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from baton.lifecycle import pins as pn
from baton.model import claims as cm

pytestmark = pytest.mark.unit

RT, N = "search-mcp", 7
STATES = list(cm.ClaimState)
EAGER = {cm.ClaimState.COMMIT_ELIGIBLE, cm.ClaimState.COMMITTED}  # written out, not taken from the module


def claim(name: str, *, state: cm.ClaimState, generation: int = N, fork: str = "plan-42", branch: str = "b",
          references: tuple[str, ...] = (), runtime: str = RT) -> cm.Claim:
    return cm.Claim(name=name, uid=f"uid-{name}", runtime=runtime, generation=generation, fork=fork, branch=branch,
                    state=state, references=references)


# x: the claim that may pin; y: the claim of branch "a" that x may reference.
COMBINATIONS = list(itertools.product(STATES, (True, False), (N, N - 1), ("same", "other"), (N, N - 1), STATES))


@pytest.mark.parametrize(
    "x_state, references, x_gen, y_fork, y_gen, y_state", COMBINATIONS,
    ids=[f"x={s.value}-{'refs-a' if r else 'no-refs'}-xg{xg}-y{f}-fork-yg{yg}-y={ys.value}"
         for s, r, xg, f, yg, ys in COMBINATIONS])
def test_pin_table(x_state: cm.ClaimState, references: bool, x_gen: int, y_fork: str, y_gen: int,
                   y_state: cm.ClaimState) -> None:
    x = claim("x", state=x_state, generation=x_gen, branch="b", references=("a",) if references else ())
    y = claim("y", state=y_state, generation=y_gen, branch="a", fork="plan-42" if y_fork == "same" else "plan-43")
    got = pn.pins(claims=[x, y], runtime=RT, generation=N)

    through_a = references and y_fork == "same" and y_gen == N
    x_pins = x_state in EAGER and (x_gen == N or through_a)
    y_pins = y_state in EAGER and y_gen == N
    assert got.claims == tuple(sorted(n for n, on in (("x", x_pins), ("y", y_pins)) if on))
    assert got.pinned == (x_pins or y_pins)
    assert got.branches == ((("plan-42", "a"),) if x_pins and through_a else ())


def test_claims_of_other_runtimes_and_released_claims_pin_nothing() -> None:
    claims = [claim("other-rt", state=cm.ClaimState.COMMITTED, runtime="other-mcp"),
              claim("released", state=cm.ClaimState.RELEASED),
              claim("abandoned", state=cm.ClaimState.ABANDONED),
              claim("speculative", state=cm.ClaimState.SPECULATIVE, references=("b",))]
    assert pn.pins(claims=claims, runtime=RT, generation=N) == pn.Pins()
    # ...but the abandoned branch still counts as a footprint of N for an eligible sibling.
    eligible = claim("eligible", state=cm.ClaimState.COMMIT_ELIGIBLE, generation=N - 1, branch="c", references=("b",))
    got = pn.pins(claims=[*claims, eligible], runtime=RT, generation=N)
    assert got.claims == ("eligible",) and got.branches == (("plan-42", "b"),)
    assert got.describe() == "claims eligible (through branches plan-42/b)"


def test_a_state_this_version_does_not_know_pins_nothing() -> None:
    odd = cm.Claim.model_validate({"name": "odd", "runtime": RT, "generation": N, "fork": "f", "branch": "b",
                                   "state": "Merged"})
    assert odd.state == "Merged"
    assert not pn.pins(claims=[odd], runtime=RT, generation=N).pinned


# --- properties --------------------------------------------------------------------------------

BRANCHES = ["a", "b", "c"]
claims_strategy = hs.lists(
    hs.builds(
        lambda i, runtime, generation, fork, branch, state, refs: claim(
            f"c{i}", runtime=runtime, generation=generation, fork=fork, branch=branch, state=state,
            references=tuple(refs)),
        hs.integers(0, 10_000), hs.sampled_from([RT, "other-mcp"]), hs.integers(N - 2, N + 1),
        hs.sampled_from(["plan-42", "plan-43"]), hs.sampled_from(BRANCHES), hs.sampled_from(STATES),
        hs.lists(hs.sampled_from(BRANCHES), max_size=3, unique=True)),
    max_size=8, unique_by=lambda c: c.name)


def footprint_refs(claims: list[cm.Claim]) -> set[str]:
    """Claims that are commit-eligible or committed and touch generation N's footprint: claim N,
    or reference a same-fork branch holding a claim on N (brute force, straight from the rule)."""
    out = set()
    for c in claims:
        if c.runtime != RT or c.state not in EAGER:
            continue
        if c.generation == N or any(d.runtime == RT and d.fork == c.fork and d.branch in c.references
                                    and d.generation == N for d in claims):
            out.add(c.name)
    return out


@settings(max_examples=400, deadline=None)
@given(claims_strategy)
def test_pinned_exactly_when_an_eligible_claim_touches_the_footprint(claims: list[cm.Claim]) -> None:
    got = pn.pins(claims=claims, runtime=RT, generation=N)
    assert set(got.claims) == footprint_refs(claims)
    assert got.pinned == bool(footprint_refs(claims))


@settings(max_examples=400, deadline=None)
@given(claims_strategy, hs.data())
def test_releasing_or_abandoning_a_claim_never_adds_a_pin(claims: list[cm.Claim], data: hs.DataObject) -> None:
    if not claims:
        return
    i = data.draw(hs.integers(0, len(claims) - 1))
    to = data.draw(hs.sampled_from([cm.ClaimState.RELEASED, cm.ClaimState.ABANDONED]))
    before = set(pn.pins(claims=claims, runtime=RT, generation=N).claims)
    moved = [c.model_copy(update={"state": to}) if j == i else c for j, c in enumerate(claims)]
    after = set(pn.pins(claims=moved, runtime=RT, generation=N).claims)
    assert after <= before
    assert claims[i].name not in after
