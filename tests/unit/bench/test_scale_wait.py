"""bench.scale's wait for runtimes to serve above a generation: a skipped number counts as served
(a resumed Creating gives its number up), and a timeout says what the waiting ones look like."""
from __future__ import annotations

import pytest

from bench import scale, watched
from dev.wait import WaitTimeout


def view(**by_name: tuple[int | None, bool, bool]) -> watched.Watched:
    w = watched.Watched(None, "/unused", lambda obj: obj)  # never started: filled by hand
    w._by_name = dict(by_name)
    return w


def test_a_generation_above_counts_and_skipped_numbers_are_counted() -> None:
    runtimes = view(a=(2, True, False), b=(3, True, False), c=(1, True, False))
    assert scale.wait_served_above(runtimes, {"a": 1, "b": 1}, what="x", timeout=1, interval=0.05) == 1
    assert scale.wait_served_above(runtimes, {"a": 0, "b": 0, "c": 0}, what="x", timeout=1, interval=0.05) == 2


def test_a_timeout_names_what_the_waiting_ones_look_like(capsys: pytest.CaptureFixture[str]) -> None:
    runtimes = view(a=(2, True, False), b=(1, True, True), c=(None, False, True))
    with pytest.raises(WaitTimeout):
        scale.wait_served_above(runtimes, {"a": 1, "b": 1, "c": 0, "d": 0}, what="changes", timeout=0.2,
                                interval=0.05)
    err = capsys.readouterr().err
    assert "changes: 3 of 4 still waiting" in err
    assert "generation 1 (was 1), Ready True, transition True" in err
    assert "generation None (was 0), Ready False, transition True" in err
    assert "absent" in err and "e.g. b, c, d" in err
