"""Paths of the pinned tools that `make tools` (hack/build-tools.sh) builds into the cache.

``pinned_tool("promtool")`` is the promtool built from the Prometheus Go module pinned in
hack/versions.env, never one found on PATH: the tests check the rules with the version the
repository pins. A tool that is not built is an AssertionError naming the fix (`make tools`),
never a skip.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pinned_tool(name: str) -> str:
    proc = subprocess.run(["bash", str(ROOT / "hack" / "build-tools.sh"), "--print-tool", name],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise AssertionError(f"{name} is not built ({proc.stderr.strip()}): run `make tools`")
    return proc.stdout.strip()
