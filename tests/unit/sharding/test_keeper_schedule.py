"""When the range keeper looks again (baton.sharding.keeper.next_look_in): at the next renewal
round, or sooner, just after the earliest moment another's range could be judged expired, so a
dead replica's ranges are taken one Lease duration after its last renewal was seen, not up to a
period later; never in a busy loop."""
from __future__ import annotations

import pytest

from baton.sharding import keeper

SLACK = keeper.EXPIRY_LOOK_SLACK_SECONDS


@pytest.mark.parametrize(("now", "renewed_at", "expiries", "expected"), [
    (100.0, 100.0, [], 5.0),  # nothing foreign about to expire: a full period
    (102.0, 100.0, [], 3.0),  # the rest of the period
    (100.0, 100.0, [101.5], 1.5 + SLACK),  # another's range expires before the next round: just after it
    (100.0, 100.0, [104.0, 101.0, 108.0], 1.0 + SLACK),  # the earliest of several
    (100.0, 100.0, [107.0], 5.0),  # after the next round: that round looks anyway
    (100.0, 100.0, [99.0], 0.1),  # already due (the tick's list will judge it): soon, not at once
    (106.0, 100.0, [], 0.1),  # a round overdue (a slow tick): soon, never negative
])
def test_the_next_look(now: float, renewed_at: float, expiries: list[float], expected: float) -> None:
    assert keeper.next_look_in(now=now, renewed_at=renewed_at, period=5.0, expiries=expiries) == pytest.approx(expected)
