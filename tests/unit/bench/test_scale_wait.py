"""bench.scale's wait for runtimes to serve above a generation: a skipped number counts as served
(a resumed Creating gives its number up), and a timeout says what the waiting ones look like; with
--beside-single, each side waited for and timed on its own, and the replicas' table against it."""
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


def test_each_side_is_timed_on_its_own_and_counts_its_own_skipped_numbers() -> None:
    pair = view(a=(2, True, False), b=(3, True, False))
    single = view(a=(2, True, False), b=(2, True, False))
    sides = [("ns-pair", pair, {"a": 1, "b": 1}), ("ns-single", single, {"a": 1, "b": 1})]
    got = scale.wait_sides(sides, what="changes", timeout=1, interval=0.05, t0=0.0)
    assert [skipped for skipped, _ in got] == [1, 0]
    assert all(seconds > 0 for _, seconds in got)


def test_a_side_that_does_not_converge_is_named_in_the_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    sides = [("ns-pair", view(a=(2, True, False)), {"a": 1}), ("ns-single", view(a=(1, True, True)), {"a": 1})]
    with pytest.raises(WaitTimeout):
        scale.wait_sides(sides, what="changes", timeout=0.2, interval=0.05, t0=0.0)
    assert "ns-single: changes: 1 of 1 still waiting" in capsys.readouterr().err


def test_the_replicas_are_divided_by_the_single_one_beside_them(capsys: pytest.CaptureFixture[str]) -> None:
    def figures(scale_by: float) -> dict[str, float]:
        return {head: 100.0 * scale_by for head, _, _ in scale.FIGURES}
    scale.print_replicas([("scale-0", figures(0.5)), ("scale-1", figures(0.75)), ("single", figures(1.0))],
                         against_last=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[4] == "each replica against the single one beside it (issue 26: <= 0.6)"
    assert lines[5].split() == ["CPU-s", "peak", "RSS", "MiB", "watch", "events", "watch", "MiB", "cached", "objs",
                                "passes", "API", "reqs"]
    assert lines[6].split() == ["scale-0"] + ["0.50"] * len(scale.COMPARED)
    assert lines[7].split() == ["scale-1"] + ["0.75"] * len(scale.COMPARED)
    scale.print_replicas([("scale-0", figures(1.0))], against_last=False)
    assert len(capsys.readouterr().out.splitlines()) == 2
