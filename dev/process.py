"""What a developer script does with the processes it starts: asks an operator whether it is
healthy, stops them, runs the local plane (hack/cluster.py)."""
from __future__ import annotations

import subprocess
import urllib.request
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


def healthy(port: int) -> bool:
    """The operator serving /healthz on 127.0.0.1:`port` answers 200 (False while it cannot)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def plane(python: str, *args: str | Path, **run: Any) -> subprocess.CompletedProcess[Any]:
    """`hack/cluster.py ARGS` (up, down, status) with `python`; `run` goes to subprocess.run."""
    return subprocess.run([python, str(ROOT / "hack" / "cluster.py"), *map(str, args)], **run)
