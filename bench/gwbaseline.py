"""The pure parts of `bench.gateway --baseline DIR` (issue 41): the order of the interleaved
latency calls among the paths, the order of the throughput rounds, and the verdict of a figure of
the current gateway against the same figure of the baseline gateway, measured in the same run."""
from __future__ import annotations

import dataclasses
import enum
import itertools
import math


class Better(str, enum.Enum):
    """Which way a figure improves: latency added is better lower, calls per CPU-second higher."""

    LOWER = "lower"
    HIGHER = "higher"


def call_order(paths: tuple[str, ...], i: int) -> tuple[str, ...]:
    """The order of the paths for round `i` of the interleaved latency calls: every permutation in
    turn, so that each path is first, middle and last equally often (no path always warms the tool
    or the client's caches for the others)."""
    if not paths:
        raise ValueError("paths: at least one path to call")
    orders = list(itertools.permutations(paths))
    return orders[i % len(orders)]


def round_order(sides: tuple[str, str], rounds: int) -> list[str]:
    """The throughput rounds: each side `rounds` times, alternating, the first of each pair
    swapped every round (A B, B A, A B, ...): a drift in the machine's load meanwhile falls on
    both sides alike."""
    if rounds < 1:
        raise ValueError(f"rounds: at least 1, got {rounds}")
    out: list[str] = []
    for r in range(rounds):
        out.extend(sides if r % 2 == 0 else sides[::-1])
    return out


@dataclasses.dataclass(frozen=True)
class Verdict:
    current: float
    baseline: float
    ratio: float          # current / baseline
    within: bool          # not worse than the baseline by more than the tolerance


def verdict(*, current: float, baseline: float, better: Better, tolerance: float = 0.10) -> Verdict:
    """Is `current` within `tolerance` of `baseline`, counting only the worse direction (a figure
    better than the baseline is within)? Not within when either figure is not a finite number."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance: a fraction in [0, 1), got {tolerance}")
    if not (math.isfinite(current) and math.isfinite(baseline)) or baseline == 0:
        return Verdict(current, baseline, math.nan, False)
    ratio = current / baseline
    if better is Better.LOWER:
        within = current <= baseline * (1 + tolerance)
    else:
        within = current >= baseline * (1 - tolerance)
    return Verdict(current, baseline, ratio, within)
