"""The pure parts of `bench.gateway --baseline` (bench/gwbaseline.py): call order, round order,
the within-10 % verdict."""
from __future__ import annotations

import collections
import math

import pytest

from bench import gwbaseline


def test_call_order_puts_each_path_in_each_place_equally_often() -> None:
    paths = ("direct", "gateway", "baseline")
    places: collections.Counter[tuple[str, int]] = collections.Counter()
    for i in range(600):
        order = gwbaseline.call_order(paths, i)
        assert sorted(order) == sorted(paths)
        for place, path in enumerate(order):
            places[(path, place)] += 1
    assert set(places.values()) == {200}


def test_call_order_of_two_paths_swaps_every_call() -> None:
    assert [gwbaseline.call_order(("a", "b"), i) for i in range(3)] == [("a", "b"), ("b", "a"), ("a", "b")]
    with pytest.raises(ValueError, match="paths"):
        gwbaseline.call_order((), 0)


def test_round_order_alternates_and_swaps_the_first() -> None:
    assert gwbaseline.round_order(("current", "baseline"), 2) == ["current", "baseline", "baseline", "current"]
    assert gwbaseline.round_order(("current", "baseline"), 3).count("baseline") == 3
    with pytest.raises(ValueError, match="rounds"):
        gwbaseline.round_order(("current", "baseline"), 0)


def test_verdict_counts_only_the_worse_direction() -> None:
    lower = gwbaseline.Better.LOWER
    higher = gwbaseline.Better.HIGHER
    assert gwbaseline.verdict(current=0.55, baseline=0.50, better=lower).within          # 10 % worse: within
    assert not gwbaseline.verdict(current=0.56, baseline=0.50, better=lower).within      # 12 % worse
    assert gwbaseline.verdict(current=0.20, baseline=0.50, better=lower).within          # better
    assert gwbaseline.verdict(current=3400, baseline=3700, better=higher).within          # 8 % fewer
    assert not gwbaseline.verdict(current=3300, baseline=3700, better=higher).within      # 11 % fewer
    v = gwbaseline.verdict(current=3000, baseline=2000, better=higher)
    assert v.within and v.ratio == 1.5


def test_verdict_of_a_missing_figure_is_not_within() -> None:
    v = gwbaseline.verdict(current=math.nan, baseline=1.0, better=gwbaseline.Better.LOWER)
    assert not v.within and math.isnan(v.ratio)
    assert not gwbaseline.verdict(current=1.0, baseline=0.0, better=gwbaseline.Better.HIGHER).within
    with pytest.raises(ValueError, match="tolerance"):
        gwbaseline.verdict(current=1.0, baseline=1.0, better=gwbaseline.Better.LOWER, tolerance=1.5)
