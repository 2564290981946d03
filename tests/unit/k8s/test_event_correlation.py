"""The event correlator's cache (client-go's EventCorrelator semantics): an event repeats a posted
one when the involved object, type, reason and message are the same and the last occurrence is
less than the window old; the cache is bounded, the least recently seen evicted first."""
from __future__ import annotations

import datetime

from baton.k8s import events

T0 = datetime.datetime(2026, 12, 2, 4, 0, 0, 123456, tzinfo=datetime.timezone.utc)


def _key(**kw: str) -> events.Key:
    base = dict(namespace="agents", runtime="search", runtime_uid="u-1", type_="Warning",
                reason="ConnectTimeout", message="g3 not Ready within 30s")
    base.update(kw)
    return events.Key(**base)


def _at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_a_repeat_within_the_window_is_the_same_event_until_the_window_passes() -> None:
    c = events.Correlator(window_seconds=360)
    assert c.repeat_of(_key(), T0) is None
    c.record(_key(), events.Seen("search.abc", 1, T0, T0))
    seen = c.repeat_of(_key(), _at(359))
    assert seen is not None and (seen.name, seen.count) == ("search.abc", 1)
    c.record(_key(), events.Seen("search.abc", 2, T0, _at(359)))
    # The window runs from the last occurrence, as a series stays open while it repeats.
    assert c.repeat_of(_key(), _at(359 + 359)) is not None
    assert c.repeat_of(_key(), _at(359 + 360)) is None
    assert len(c) == 0, "an ended series leaves the cache"


def test_each_part_of_the_key_tells_events_apart() -> None:
    c = events.Correlator()
    c.record(_key(), events.Seen("search.abc", 1, T0, T0))
    for other in (dict(namespace="other"), dict(runtime="other"), dict(runtime_uid="u-2"),
                  dict(type_="Normal"), dict(reason="Draining"), dict(message="g4 not Ready within 30s")):
        assert c.repeat_of(_key(**other), _at(1)) is None, other
    assert c.repeat_of(_key(), _at(1)) is not None


def test_the_cache_is_bounded_and_evicts_the_least_recently_seen() -> None:
    c = events.Correlator(size=3)
    for i in range(3):
        c.record(_key(message=f"m{i}"), events.Seen(f"e{i}", 1, T0, T0))
    c.record(_key(message="m0"), events.Seen("e0", 2, T0, _at(1)))  # m0 seen again: now the newest
    c.record(_key(message="m3"), events.Seen("e3", 1, _at(2), _at(2)))
    assert len(c) == 3
    assert c.repeat_of(_key(message="m1"), _at(3)) is None  # the least recently seen went
    assert [c.repeat_of(_key(message=m), _at(3)) is not None for m in ("m0", "m2", "m3")] == [True] * 3
