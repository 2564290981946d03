"""The README's quickstart: `make demo` (hack/demo.py) runs end to end and stops what it started."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_end_to_end_and_cleans_up() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "hack" / "demo.py")], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    for needle in ("search-mcp", "Handoff g1→g2 (TemplateChanged)", "PodStuckTerminating",
                   "force recovery of generation 2 requested", "ForceRecovered", "== demo done",
                   "[cluster] stopped"):
        assert needle in out, f"{needle!r} missing from the demo's output"
    assert not (ROOT / ".baton" / "demo" / "pids").exists(), "the demo's plane was not stopped"
