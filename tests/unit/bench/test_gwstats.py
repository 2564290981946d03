"""The pure statistics of the gateway benchmark (bench/gwstats.py): percentiles, failure causes,
failure accounting across handoffs, added latency."""
from __future__ import annotations

import errno
import socket

import pytest

from bench import gwstats


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert gwstats.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert gwstats.percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert gwstats.percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    values = [float(i) for i in range(1, 101)]  # 1..100
    assert gwstats.percentile(values, 99) == pytest.approx(99.01)
    assert gwstats.percentile([7.0], 99) == 7.0


def test_percentile_refuses_no_values_and_a_bad_q() -> None:
    with pytest.raises(ValueError, match="no values"):
        gwstats.percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        gwstats.percentile([1.0], 101)


def test_causes_name_what_failed() -> None:
    assert gwstats.cause_of_exception(gwstats.NoEndpoint()) == "no ready endpoint"
    assert gwstats.cause_of_exception(ConnectionRefusedError(errno.ECONNREFUSED, "refused")) == "connection refused"
    assert gwstats.cause_of_exception(ConnectionResetError(errno.ECONNRESET, "reset")) == "connection reset"
    assert gwstats.cause_of_exception(socket.timeout("timed out")) == "timeout"
    assert gwstats.cause_of_exception(OSError(errno.EHOSTUNREACH, "x")) == "OSError EHOSTUNREACH"
    assert gwstats.cause_of_exception(ValueError("x")) == "ValueError"
    assert gwstats.cause_of_status(200, None) == ""
    assert gwstats.cause_of_status(503, "Transitioning") == "HTTP 503 Transitioning"
    assert gwstats.cause_of_status(502, None) == "HTTP 502"


def test_tally_counts_failures_by_cause_outages_and_handoffs_hit() -> None:
    C = gwstats.Call
    calls = [C(0.0, 0.01), C(0.05, 0.01),
             C(0.10, 0.01, "connection refused"), C(0.15, 0.02, "connection refused"), C(0.20, 0.5, "timeout"),
             C(0.25, 0.01),
             C(5.00, 0.01, "HTTP 502"),
             C(9.00, 0.01)]
    t = gwstats.tally(list(reversed(calls)), handoffs=[(0.0, 1.0), (3.0, 4.5), (7.0, 8.0)])
    assert (t.calls, t.failed) == (8, 4)
    assert t.causes == {"connection refused": 2, "timeout": 1, "HTTP 502": 1}
    # First outage: from 0.10 until the timeout that started at 0.20 ended at 0.70.
    assert t.longest_outage == pytest.approx(0.60)
    # The 502 at 5.0 lies within a second after the second handoff; the third saw none.
    assert t.handoffs_hit == 2
    assert gwstats.causes_text(t.causes) == "2 connection refused, 1 timeout, 1 HTTP 502"


def test_tally_of_calls_that_all_succeeded() -> None:
    t = gwstats.tally([gwstats.Call(float(i), 0.01) for i in range(10)], handoffs=[(0.0, 9.0)])
    assert (t.calls, t.failed, t.handoffs_hit, t.longest_outage) == (10, 0, 0, 0.0)
    assert gwstats.causes_text(t.causes) == "-"


def test_added_latency_is_the_difference_of_percentiles() -> None:
    direct = [1.0, 2.0, 3.0, 4.0, 5.0]
    via = [1.5, 2.5, 3.5, 4.5, 9.0]
    assert gwstats.added(via, direct, 50) == pytest.approx(0.5)
    assert gwstats.added(via, direct, 100) == pytest.approx(4.0)
