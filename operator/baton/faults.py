"""Test-only fault injection, read once from the environment into a frozen value. No I/O after that read.

BATON_FAULT_CLOCK_OFFSET_SECONDS shifts this process's wall clock (a replica whose clock runs
ahead or behind). BATON_FAULT_DELAY_STATUS_WRITE="<step>=<seconds>" delays a status write that
moves a transition to <step>, so a test can freeze the process between deciding and writing and
prove the API server fences it. BATON_FAULT_STATUS_WRITE_FRESH_RV=1 sends that delayed write
with the resourceVersion read after the delay, so only the CEL rule on fencingToken can refuse it.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Mapping

from baton import clock


@dataclasses.dataclass(frozen=True)
class Faults:
    clock_offset_seconds: float = 0.0
    delay_status_write: str = ""  # "<step>=<seconds>", or empty: no delay
    status_write_fresh_rv: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        e = os.environ if env is None else env
        return cls(
            clock_offset_seconds=float(e.get("BATON_FAULT_CLOCK_OFFSET_SECONDS") or 0),
            delay_status_write=e.get("BATON_FAULT_DELAY_STATUS_WRITE", ""),
            status_write_fresh_rv=bool(e.get("BATON_FAULT_STATUS_WRITE_FRESH_RV")),
        )

    def clock(self) -> clock.Clock:
        """The process's clock: the wall clock shifted by the offset."""
        return clock.Clock(offset=datetime.timedelta(seconds=self.clock_offset_seconds))
