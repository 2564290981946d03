"""Bounded polling: every loop here ends, by count and by time."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not become true within its bound (an assertion failure in a test)."""


def wait_for(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `check` until it returns a truthy value; return that value.

    Bounded twice: at most `timeout` seconds and at most timeout/interval + 1 calls. Exceptions
    listed in `ignore` count as "not yet"; any other exception propagates at once.
    """
    if timeout <= 0 or interval <= 0:
        raise ValueError("timeout and interval must be positive")
    deadline = time.monotonic() + timeout
    attempts = int(timeout / interval) + 1
    last: object = None
    for _ in range(attempts):
        try:
            last = check()
            if last:
                return last  # type: ignore[return-value]
        except ignore as e:  # noqa: PERF203 - a retry loop on purpose
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(min(interval, max(deadline - time.monotonic(), 0)))
    raise WaitTimeout(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def stays(
    check: Callable[[], bool],
    *,
    duration: float,
    what: str,
    interval: float = 0.25,
) -> None:
    """Assert that `check` stays true for `duration` seconds (polled, bounded)."""
    deadline = time.monotonic() + duration
    for _ in range(int(duration / interval) + 1):
        if not check():
            raise AssertionError(f"{what} stopped holding before {duration}s")
        if time.monotonic() >= deadline:
            return
        time.sleep(min(interval, max(deadline - time.monotonic(), 0)))
