"""A pass that raises is counted (baton_pass_errors_total), not only logged, and the runtime is
retried after its back-off; a pass that returns is not counted."""
from __future__ import annotations

import asyncio
import datetime
from typing import Any

from baton import clock as clock_mod
from baton import controller as controller_mod
from baton import faults as faults_mod
from baton import metrics, reconcile
from baton import settings as settings_mod


class ScriptedReconciler:
    """Stands in for baton.reconcile.Reconciler: raises for the keys it is told to, else done."""

    def __init__(self, crashing: set[tuple[str, str]]) -> None:
        self.crashing = crashing
        self.passes: list[tuple[str, str]] = []

    async def reconcile(self, key: tuple[str, str], **_: Any) -> reconcile.Result:
        self.passes.append(key)
        if key in self.crashing:
            raise KeyError("status.transition")  # a bug: the worker must survive and count it
        return reconcile.Result()


def test_a_crashed_pass_is_counted_and_retried_and_a_good_pass_is_not_counted() -> None:
    settings = settings_mod.Settings.from_env({"BATON_INSTANCE_ID": "unit", "BATON_WORKERS": "1"})

    async def run() -> tuple[float, list[tuple[str, str]], int]:
        start = datetime.datetime(2026, 3, 1, tzinfo=datetime.timezone.utc)
        ctl = controller_mod.Controller(settings, clock=clock_mod.Manual(start), faults=faults_mod.Faults())
        fake = ScriptedReconciler({("ns", "bad")})
        ctl.reconciler = fake  # type: ignore[assignment]
        before = metrics.PASS_ERRORS._value.get()
        ctl.queue.add(("ns", "good"))
        ctl.queue.add(("ns", "bad"))
        worker = asyncio.create_task(ctl._work())
        for _ in range(400):
            await asyncio.sleep(0.005)
            if len(fake.passes) >= 2:
                break
        after = metrics.PASS_ERRORS._value.get()
        retry = ctl.queue.waiting  # the crashed runtime's wake-up after its back-off (the good one has none)
        ctl.queue.shut_down()
        await asyncio.wait_for(worker, timeout=10)
        return after - before, fake.passes, retry

    crashed, passes, retry = asyncio.run(run())
    assert passes[:2] == [("ns", "good"), ("ns", "bad")]
    assert crashed == 1.0
    assert retry == 1
