"""Stopping what a developer script started: its operator processes, then its local plane."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]


def stop(procs: Iterable[subprocess.Popen[bytes]], *, timeout: float, terminate: bool = True) -> None:
    """SIGTERM each process (unless `terminate` is False: the caller signalled them already), then
    wait up to `timeout` seconds for each, killing one that has not exited by then."""
    procs = list(procs)
    if terminate:
        for proc in procs:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def plane(python: str, *args: str | Path, **run: Any) -> subprocess.CompletedProcess[Any]:
    """`hack/cluster.py ARGS` (up, down, status) with `python`; `run` goes to subprocess.run."""
    return subprocess.run([python, str(ROOT / "hack" / "cluster.py"), *map(str, args)], **run)
