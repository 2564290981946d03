"""The controller's side of the pass and queue metrics: baton_passes_total{result} for each
kind of Result (controller-runtime's success, requeue_after, requeue, error; a crash is an
error too), baton_pass_duration_seconds per pass, the queue's families through metrics.QueueObserver,
and baton_queue_unfinished_work_seconds / baton_queue_longest_running_processor_seconds while a
worker is held."""
from __future__ import annotations

import asyncio
import datetime
from typing import Any

from baton import clock as clock_mod
from baton import controller as controller_mod
from baton import faults as faults_mod
from baton import collectors, metrics, reconcile
from baton import settings as settings_mod

RESULTS: dict[str, reconcile.Result] = {
    "done": reconcile.Result(),
    "gone": reconcile.Result(gone=True),
    "later": reconcile.Result(wait=30.0),
    "failed": reconcile.Result(failed=True),
}


class ScriptedReconciler:
    """Stands in for baton.reconcile.Reconciler: the Result its key names; "again" asks to act
    at once twice, then waits; "crash" raises; "hold" waits for `release`."""

    def __init__(self) -> None:
        self.passes: list[str] = []
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def reconcile(self, key: tuple[str, str], **_: Any) -> reconcile.Result:
        name = key[1]
        self.passes.append(name)
        if name == "crash":
            raise KeyError("status.transition")
        if name == "hold":
            self.holding.set()
            await self.release.wait()
            return reconcile.Result()
        if name == "again":
            return reconcile.Result(again_now=True) if self.passes.count("again") < 3 else reconcile.Result(wait=5.0)
        return RESULTS[name]


def _value(name: str, labels: dict[str, str] | None = None) -> float:
    got = metrics.REGISTRY.get_sample_value(name, labels or {})
    return 0.0 if got is None else got


def _controller() -> controller_mod.Controller:
    settings = settings_mod.Settings.from_env({"BATON_INSTANCE_ID": "unit", "BATON_WORKERS": "1"})
    start = datetime.datetime(2026, 3, 1, tzinfo=datetime.timezone.utc)
    return controller_mod.Controller(settings, clock=clock_mod.Manual(start), faults=faults_mod.Faults())


async def _until(check: Any, *, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.005)):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not reached in time")


def test_each_result_is_counted_with_its_label_and_every_pass_is_timed() -> None:
    families = ["baton_pass_duration_seconds_count", "baton_queue_duration_seconds_count",
                "baton_queue_work_duration_seconds_count", "baton_queue_adds_total", "baton_queue_retries_total"]
    results = [r.value for r in metrics.PassResult]

    async def run() -> tuple[dict[str, float], dict[str, float], list[str], float]:
        ctl = _controller()
        fake = ScriptedReconciler()
        ctl.reconciler = fake  # type: ignore[assignment]
        before = {r: _value("baton_passes_total", {"result": r}) for r in results}
        before |= {f: _value(f) for f in families}
        for name in ("done", "gone", "later", "failed", "again", "crash"):
            ctl.queue.add(("ns", name))
        worker = asyncio.create_task(ctl._work())
        await _until(lambda: len(fake.passes) >= 8 and ctl.busy == 0)
        ctl.queue.shut_down()
        await asyncio.wait_for(worker, timeout=10)
        after = {r: _value("baton_passes_total", {"result": r}) for r in results}
        after |= {f: _value(f) for f in families}
        return before, after, fake.passes, _value("baton_workers_max")

    before, after, passes, workers_max = asyncio.run(run())
    delta = {k: after[k] - before[k] for k in after}
    assert passes == ["done", "gone", "later", "failed", "again", "again", "again", "crash"]
    # done and gone: success; later and the third "again": requeue_after; two "again": requeue;
    # failed and crash: error.
    assert {r: delta[r] for r in results} == {"success": 2, "requeue_after": 2, "requeue": 2, "error": 2}
    assert delta["baton_pass_duration_seconds_count"] == 8  # the crashed pass too
    assert delta["baton_queue_adds_total"] == 6
    assert delta["baton_queue_duration_seconds_count"] == 6  # one wait per turn: "again" keeps its worker
    assert delta["baton_queue_work_duration_seconds_count"] == 6
    assert delta["baton_queue_retries_total"] == 2  # failed's back-off and crash's
    assert workers_max == 1


def test_a_held_worker_shows_as_unfinished_work_until_its_turn_ends() -> None:
    async def run() -> tuple[float, float, float, float, float]:
        ctl = _controller()
        fake = ScriptedReconciler()
        ctl.reconciler = fake  # type: ignore[assignment]
        collector = collectors.QueueCollector(ctl.running)
        ctl.queue.add(("ns", "hold"))
        worker = asyncio.create_task(ctl._work())
        await asyncio.wait_for(fake.holding.wait(), timeout=10)
        await asyncio.sleep(0.2)
        unfinished, longest = (f.samples[0].value for f in collector.collect())
        depth_busy = _value("baton_queue_depth")
        fake.release.set()
        await _until(lambda: ctl.busy == 0)
        after = [f.samples[0].value for f in collector.collect()]
        ctl.queue.shut_down()
        await asyncio.wait_for(worker, timeout=10)
        return unfinished, longest, depth_busy, after[0], after[1]

    unfinished, longest, depth, unfinished_after, longest_after = asyncio.run(run())
    assert unfinished >= 0.2 and longest == unfinished
    assert depth == 0  # taken by the worker: no longer waiting
    assert unfinished_after == 0 and longest_after == 0
