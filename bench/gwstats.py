"""The pure statistics of bench/gateway.py (no I/O, unit-tested in tests/unit/bench): percentiles,
what each call's failure was caused by, and the failures of a run of calls summed up.
"""
from __future__ import annotations

import collections
import errno
import math
import socket
from dataclasses import dataclass, field


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's
    default): percentile([1, 2, 3, 4], 50) == 2.5. An empty list is an error, not a zero."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside 0..100")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class NoEndpoint(Exception):
    """The Service had no ready endpoint when the call was made (kube-proxy rejects the
    connection: the client sees it refused)."""


def cause_of_exception(exc: BaseException) -> str:
    """A short, bounded name for why a call failed before a response arrived."""
    if isinstance(exc, NoEndpoint):
        return "no ready endpoint"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"OSError {errno.errorcode.get(exc.errno, exc.errno)}"
    return type(exc).__name__


def cause_of_status(status: int, reason: str | None) -> str:
    """'' for a 2xx answer; else 'HTTP <status>' and the Baton-Reason when there is one."""
    if 200 <= status < 300:
        return ""
    return f"HTTP {status} {reason}" if reason else f"HTTP {status}"


@dataclass(frozen=True)
class Call:
    """One call: when it started (monotonic seconds), how long it took, why it failed ('' = ok)."""

    at: float
    seconds: float
    cause: str = ""

    @property
    def ok(self) -> bool:
        return not self.cause


@dataclass
class Tally:
    """The failures of a run of calls: how many, by cause, how many handoffs saw one, and the
    longest outage (from the first failed call's start to the end of the last one in a run of
    consecutive failures, calls ordered by start)."""

    calls: int = 0
    failed: int = 0
    causes: collections.Counter[str] = field(default_factory=collections.Counter)
    handoffs_hit: int = 0
    longest_outage: float = 0.0


def tally(calls: list[Call], handoffs: list[tuple[float, float]] | None = None) -> Tally:
    """Sum up `calls`; `handoffs` are (start, end) windows: a handoff is hit when a failed call
    started inside it (or in the second after it ended, when stale views still act)."""
    t = Tally(calls=len(calls))
    run_start: float | None = None
    for c in sorted(calls, key=lambda c: c.at):
        if c.ok:
            run_start = None
            continue
        t.failed += 1
        t.causes[c.cause] += 1
        if run_start is None:
            run_start = c.at
        t.longest_outage = max(t.longest_outage, c.at + c.seconds - run_start)
    for start, end in handoffs or []:
        if any(not c.ok and start <= c.at <= end + 1.0 for c in calls):
            t.handoffs_hit += 1
    return t


def causes_text(causes: collections.Counter[str], limit: int = 3) -> str:
    """'12 connection refused, 3 timeout' (most common first), '-' when none."""
    if not causes:
        return "-"
    return ", ".join(f"{n} {cause}" for cause, n in causes.most_common(limit))


def added(via: list[float], direct: list[float], q: float) -> float:
    """What the q-th percentile of `via` adds to that of `direct` (same units)."""
    return percentile(via, q) - percentile(direct, q)
