"""The work queue: dedup, never two workers on one key, deadlines as wake-ups, back-off, budget."""

from __future__ import annotations

import asyncio
import random

import pytest

from baton import queue as q


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_queued_once_and_requeued_if_added_while_processing() -> None:
    async def scenario() -> list[str]:
        wq: q.WorkQueue[str] = q.WorkQueue()
        wq.add("a"), wq.add("a"), wq.add("b")
        assert len(wq) == 2
        first = await wq.get()
        wq.add(first)  # changed while being processed: not handed to a second worker
        second = await wq.get()
        assert second != first and len(wq) == 0
        wq.done(first)  # now it comes back, once
        third = await wq.get()
        wq.done(second), wq.done(third)
        return [first, second, third]
    assert asyncio.run(scenario()) == ["a", "b", "a"]


def test_add_after_wakes_at_the_earliest_deadline() -> None:
    async def scenario() -> tuple[str, float]:
        wq: q.WorkQueue[str] = q.WorkQueue()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        wq.add_after("late", 0.3)
        wq.add_after("soon", 0.05)
        wq.add_after("soon", 5.0)  # a later deadline does not postpone an earlier one
        key = await asyncio.wait_for(wq.get(), 2)
        return key, loop.time() - t0
    key, took = asyncio.run(scenario())
    assert key == "soon" and 0.04 <= took < 0.3


def test_add_now_supersedes_a_pending_wakeup_and_nothing_is_lost() -> None:
    async def scenario() -> list[str]:
        wq: q.WorkQueue[str] = q.WorkQueue()
        wq.add_after("a", 10)
        wq.add("a")
        got = [await asyncio.wait_for(wq.get(), 1)]
        wq.done("a")
        assert wq.waiting == 0  # the superseded wake-up does not fire again
        wq.add_after("b", 0.01)
        got.append(await asyncio.wait_for(wq.get(), 1))
        return got
    assert asyncio.run(scenario()) == ["a", "b"]


def test_bounded_workers_never_share_a_key() -> None:
    async def scenario() -> tuple[int, int]:
        wq: q.WorkQueue[int] = q.WorkQueue()
        active: set[int] = set()
        peak = 0
        overlaps = 0
        processed = 0

        async def worker() -> None:
            nonlocal peak, overlaps, processed
            while True:
                try:
                    key = await wq.get()
                except q.ShutDown:
                    return
                if key in active:
                    overlaps += 1
                active.add(key)
                peak = max(peak, len(active))
                await asyncio.sleep(0.001)
                if random.random() < 0.3:
                    wq.add(key)  # events arriving meanwhile
                active.discard(key)
                processed += 1
                wq.done(key)
        workers = [asyncio.create_task(worker()) for _ in range(4)]
        for i in range(200):
            wq.add(i % 50)
            if i % 10 == 0:
                await asyncio.sleep(0)
        while len(wq) or wq.waiting:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        wq.shut_down()
        await asyncio.gather(*workers)
        return overlaps, peak
    overlaps, peak = asyncio.run(scenario())
    assert overlaps == 0 and peak <= 4


def test_backoff_grows_with_jitter_caps_and_forgets() -> None:
    b: q.Backoff[str] = q.Backoff(base=0.5, cap=30.0, rng=random.Random(1))
    seen = [b.when("k") for _ in range(10)]
    for n, s in enumerate(seen, start=1):
        base = min(30.0, 0.5 * 2 ** (n - 1))
        assert 0.8 * base <= s <= 1.2 * base
    b.forget("k")
    assert b.when("k") <= 0.6


def test_pass_budget_allows_a_burst_then_a_steady_rate() -> None:
    clock = FakeClock()
    budget: q.PassBudget[str] = q.PassBudget(burst=5, rate=2.0, clock=clock)
    assert [budget.take("k") for _ in range(5)] == [0.0] * 5
    wait = budget.take("k")
    assert wait == pytest.approx(0.5)
    assert budget.take("k") == pytest.approx(0.5)  # asking early: still the same wait
    clock.now += wait
    assert budget.take("k") == 0.0  # the throttled pass, back after its wait, is admitted
    assert budget.take("k") == pytest.approx(0.5)  # the next one waits its turn
    # Over a long hot loop, passes a second approach the rate, and every pass gets through.
    passes, t = 0, 0.0
    while t < 100:
        w = budget.take("k")
        if w > 0:
            clock.now += w
            t += w
            assert budget.take("k") == 0.0
        passes += 1
    assert passes / t == pytest.approx(2.0, rel=0.05)
    assert budget.take("other") == 0.0  # per key


def test_pass_budget_refund_gives_back_a_pass_that_did_not_act() -> None:
    clock = FakeClock()
    budget: q.PassBudget[str] = q.PassBudget(burst=3, rate=1.0, clock=clock)
    for _ in range(100):  # a storm of events whose passes found nothing to do
        assert budget.take("k") == 0.0
        budget.refund("k")
    assert [budget.take("k") for _ in range(3)] == [0.0] * 3  # the burst is still whole
    assert budget.take("k") == pytest.approx(1.0)
    budget.refund("other")  # a key never seen: nothing to give back, nothing created
    assert budget.take("other") == 0.0
    # Refunds never lift a key above its burst.
    assert budget.take("j") == 0.0
    for _ in range(10):
        budget.refund("j")
    assert [budget.take("j") for _ in range(3)] == [0.0] * 3 and budget.take("j") > 0


async def _drain(queue: q.WorkQueue[str], n: int) -> list[str]:
    out = []
    for _ in range(n):
        key = await queue.get()
        queue.done(key)
        out.append(key)
    return out


def test_keys_in_progress_are_served_first_and_the_others_never_starve() -> None:
    held = {f"h{i}" for i in range(20)}
    queue: q.WorkQueue[str] = q.WorkQueue(first=lambda key: key in held)
    for key in ["n0", "h0", "n1", "h1", "h2"]:
        queue.add(key)
    assert asyncio.run(_drain(queue, 5)) == ["h0", "h1", "h2", "n0", "n1"]
    # A stream of in-progress keys lets one other key through every URGENT_RUN of them.
    queue.add("n2")
    for i in range(20):
        queue.add(f"h{i}")
    order = asyncio.run(_drain(queue, 21))
    assert order.index("n2") == q.URGENT_RUN
    assert sorted(order) == sorted([*(f"h{i}" for i in range(20)), "n2"])
