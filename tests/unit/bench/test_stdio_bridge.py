"""bench/stdio_bridge.py (`make bench-bridge`): its pure figure, and a smoke run at a tiny count
(the real bridge, the real mcp-server-time, loopback; about 10 s) so that the bench still runs."""
from __future__ import annotations

import contextlib
import io
import os

import pytest

from bench import stdio_bridge


def test_added_is_bridge_minus_direct_in_milliseconds() -> None:
    direct = [0.001, 0.002, 0.003, 0.004, 0.005]
    bridge = [0.0015, 0.0025, 0.0035, 0.0045, 0.0105]
    a = stdio_bridge.added(direct=direct, bridge=bridge)
    assert a.direct_p50 == pytest.approx(3.0) and a.bridge_p50 == pytest.approx(3.5)
    assert a.added_p50 == pytest.approx(0.5)
    assert a.added_p95 == pytest.approx(a.bridge_p95 - a.direct_p95)
    # Pair by pair: four pairs differ by 0.5 ms, one by 5.5 ms: the median is 0.5.
    assert a.paired_median == pytest.approx(0.5)


def test_added_refuses_unpaired_timings() -> None:
    with pytest.raises(ValueError, match="one timing each per pair"):
        stdio_bridge.added(direct=[0.001], bridge=[0.001, 0.002])
    with pytest.raises(ValueError, match="one timing each per pair"):
        stdio_bridge.added(direct=[], bridge=[])


def test_bad_flags_name_the_flag() -> None:
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
        stdio_bridge.main(["--calls", "0"])
    assert "--calls must be in 1..100000, got 0" in err.getvalue()


def test_the_bench_runs_at_a_tiny_count() -> None:
    pytest.importorskip("mcp_server_time", reason="the test extras install mcp-server-time")
    before = set(_children())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert stdio_bridge.main(["--calls", "5", "--rounds", "1", "--round-seconds", "0.2",
                                  "--concurrency", "2", "--max-seconds", "120"]) == 0
    text = out.getvalue()
    assert "SDK client, 5 calls each" in text and "raw JSON-RPC" in text and "throughput" in text, text
    assert "SDK client in the 2026-07-28 era, 5 calls each" in text, text
    assert "VmHWM" in text, text
    # Whatever it started is gone: no child of this process left (the bridge, its child, the two
    # direct children).
    left = sorted(set(_children()) - before)
    assert left == [], left


def _children() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == os.getpid()]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return -1
    return int(stat[stat.rindex(")") + 2:].split()[1])
