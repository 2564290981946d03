"""Loopback TCP ports for test and benchmark processes (operators, proxies, probes)."""
from __future__ import annotations

import atexit
import os
import random
import socket
import threading
from pathlib import Path

# Ports handed out are never handed out again while their claimant lives: within this process
# (a set) and across processes on the machine (a claim file per port holding the claimant's pid:
# a chaos run and a test run side by side, a restarted operator binding its port again). They
# come from below the kernel's ephemeral range (32768-60999 here), where no outgoing connection
# takes them. Asking the kernel for port 0 and closing the socket let two lanes started at the
# same moment get the same port ("address already in use").
_PORT_RANGE = range(20000, 32768)
_PORT_CLAIMS = Path(os.environ.get("BATON_TEST_PORT_CLAIMS", "/tmp/baton-test-ports"))
_ports_handed: set[int] = set()
_ports_lock = threading.Lock()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(port: int) -> bool:
    """Take the machine-wide claim on `port` (a file created exclusively); a dead claimant's is
    taken over."""
    _PORT_CLAIMS.mkdir(parents=True, exist_ok=True)
    path = _PORT_CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner and _alive(owner):
                return False
            path.unlink(missing_ok=True)  # its claimant is gone (or never wrote its pid)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


@atexit.register
def _release_claims() -> None:
    for port in _ports_handed:
        path = _PORT_CLAIMS / str(port)
        try:
            if path.read_text() == str(os.getpid()):
                path.unlink()
        except OSError:
            pass


def free_port() -> int:
    """A loopback TCP port that is free now and that no live test process was handed before."""
    with _ports_lock:
        start = random.randrange(len(_PORT_RANGE))
        for i in range(len(_PORT_RANGE)):
            port = _PORT_RANGE[(start + i) % len(_PORT_RANGE)]
            if port in _ports_handed:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            if not _claim(port):
                continue
            _ports_handed.add(port)
            return port
    raise RuntimeError(f"no free loopback port left in {_PORT_RANGE}")
