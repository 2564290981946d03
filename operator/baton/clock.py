"""The process's clocks, as one value passed down from startup. Reads the system clocks; no other I/O.

The wall clock (timestamps written to the API, decide()'s `now`) carries the fault injection's
offset (baton.faults); the monotonic clock, which judges Leases, is never shifted.
"""

from __future__ import annotations

import datetime
import time


class Clock:
    def __init__(self, offset: datetime.timedelta = datetime.timedelta(0)) -> None:
        self.offset = offset

    def wall(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc) + self.offset

    def monotonic(self) -> float:
        return time.monotonic()


class Manual(Clock):
    """Both clocks stand still until `t` (seconds since `start`) is moved: simulated time, for
    the model check and unit tests."""

    def __init__(self, start: datetime.datetime) -> None:
        super().__init__()
        self.start = start
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=self.t)
