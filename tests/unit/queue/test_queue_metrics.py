"""What the work queue reports to its observer, in client-go's workqueue shape: depth, adds,
time in queue (from when a key became due), work duration (one turn), retries, and the turns
under way (unfinished work, the longest running)."""

from __future__ import annotations

import asyncio

from baton import queue as q


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.depths: list[int] = []
        self.adds = 0
        self.waits: list[float] = []
        self.works: list[float] = []
        self.retries = 0

    def depth(self, n: int) -> None:
        self.depths.append(n)

    def added(self) -> None:
        self.adds += 1

    def started(self, *, waited: float) -> None:
        self.waits.append(waited)

    def finished(self, *, worked: float) -> None:
        self.works.append(worked)

    def retried(self) -> None:
        self.retries += 1


def test_time_in_queue_and_work_duration_are_measured_by_the_queues_clock() -> None:
    async def scenario() -> Recorder:
        clock, rec = FakeClock(), Recorder()
        wq: q.WorkQueue[str] = q.WorkQueue(clock=clock, observer=rec)
        wq.add("a"), wq.add("a"), wq.add("b")  # "a" once: a key already waiting is not added again
        assert rec.adds == 2 and rec.depths[-1] == 2
        clock.now += 3.0
        a = await wq.get()
        assert a == "a" and rec.waits == [3.0] and rec.depths[-1] == 1
        clock.now += 0.5
        assert wq.running() == [0.5]
        b = await wq.get()
        assert rec.waits == [3.0, 3.5]
        clock.now += 2.0
        assert sorted(wq.running()) == [2.0, 2.5]  # both turns under way
        wq.add(a)  # changed while its worker acts: waits from now, not from its first add
        clock.now += 1.0
        wq.done(a)
        wq.done(b)
        assert rec.works == [3.5, 3.0] and wq.running() == []
        clock.now += 0.25
        assert await wq.get() == "a"
        assert rec.waits[-1] == 1.25
        return rec

    rec = asyncio.run(scenario())
    assert rec.adds == 3


def test_a_timed_wake_up_counts_its_time_in_queue_from_when_it_fell_due() -> None:
    async def scenario() -> Recorder:
        clock, rec = FakeClock(), Recorder()
        wq: q.WorkQueue[str] = q.WorkQueue(clock=clock, observer=rec)
        wq.add_after("a", 10.0)  # a wake-up asked for is not time waited in the queue
        assert rec.adds == 0
        clock.now += 12.0
        assert await wq.get() == "a"
        return rec

    rec = asyncio.run(scenario())
    assert rec.adds == 1 and rec.waits == [0.0]


def test_retries_are_counted_and_a_shut_queue_counts_nothing() -> None:
    clock, rec = FakeClock(), Recorder()
    wq: q.WorkQueue[str] = q.WorkQueue(clock=clock, observer=rec)
    wq.add_rate_limited("a", 1.0)
    wq.add_rate_limited("b", 0.0)  # due at once: added now, still a retry
    assert rec.retries == 2 and rec.adds == 1 and wq.waiting == 1
    wq.shut_down()
    wq.add_rate_limited("c", 1.0)
    assert rec.retries == 2
