"""The probe runner (baton.probing.Probes) and what a pass observes from it (probing.observe),
with a fake prober at our adapter boundary (baton.probing.Prober): probes run apart from the
pass, at most N at once and one per runtime, each bounded by its timeout and the rest of the
budget, and an answer counts only for the pod UID and step it was asked for."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from baton import clock as clock_mod
from baton import drainprobe, probing
from baton.cache import snapshot
from baton.model import spec as sp
from baton.model import status as st
from tests.unit import builders as b

Key = tuple[str, str]
HANGING = "hanging"


class FakeProber:
    """Answers idle at once for a pod whose IP is not HANGING; a hanging one answers nothing
    until its timeout (as a tool that accepts and never answers). Records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []  # (pod uid, timeout)
        self.now_in_flight = 0
        self.max_in_flight = 0
        self.per_uid: dict[str, int] = {}
        self.max_per_uid = 0
        self.release = asyncio.Event()  # ends every hanging probe early

    async def probe(self, *, pod: dict[str, Any], probe: sp.DrainProbe, timeout: float | None = None) -> drainprobe.Result:
        uid = pod["metadata"]["uid"]
        self.calls.append((uid, probe.timeout_seconds if timeout is None else timeout))
        self.now_in_flight += 1
        self.per_uid[uid] = self.per_uid.get(uid, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.now_in_flight)
        self.max_per_uid = max(self.max_per_uid, self.per_uid[uid])
        try:
            if pod["status"]["podIP"] == HANGING:
                try:
                    async with asyncio.timeout(timeout):
                        await self.release.wait()
                except TimeoutError:
                    return drainprobe.Result(idle=False, error="timeout")
                return drainprobe.Result(idle=False, error="answered 503")
            return drainprobe.Result(idle=True)
        finally:
            self.now_in_flight -= 1
            self.per_uid[uid] -= 1


def raw_pod(uid: str, ip: str = "127.0.0.1") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": b.RT}, "status": {"podIP": ip}}


PROBE = sp.DrainProbe(http_get=sp.HttpGet(path="/idle", port=8080), period_seconds=1, timeout_seconds=60)


class Runner:
    """A Probes runner on the fake prober, its wake-ups recorded."""

    def __init__(self, concurrency: int = 64, clock: clock_mod.Clock | None = None) -> None:
        self.prober = FakeProber()
        self.woken: list[Key] = []
        self.answered: dict[Key, asyncio.Event] = {}
        self.probes = probing.Probes(prober=self.prober, concurrency=concurrency, clock=clock or clock_mod.Clock(),
                                     wake=self._wake)

    def _wake(self, key: Key) -> None:
        self.woken.append(key)
        self.answered.setdefault(key, asyncio.Event()).set()

    async def answer_of(self, key: Key, within: float = 5.0) -> None:
        async with asyncio.timeout(within):
            await self.answered.setdefault(key, asyncio.Event()).wait()


def ask(uid: str, purpose: probing.Purpose = probing.Purpose.DRAIN, since: float = -10.0) -> probing.Ask:
    return probing.Ask(uid, purpose, b.at(since))


# --- the runner ---------------------------------------------------------------------------------


def test_twenty_hanging_runtimes_do_not_hold_up_a_healthy_ones_probe() -> None:
    async def scenario() -> None:
        r = Runner(concurrency=64)
        hanging = [("agents", f"slow-{i:02d}") for i in range(20)]
        for i, key in enumerate(hanging):
            r.probes.start(key, ask(f"slow-{i}"), pod=raw_pod(f"slow-{i}", HANGING), probe=PROBE, seconds=60)
        await asyncio.sleep(0)  # every hanging probe is dialling now
        assert r.prober.now_in_flight == 20
        healthy = ("agents", "healthy")
        r.probes.start(healthy, ask("ok"), pod=raw_pod("ok"), probe=PROBE, seconds=60)
        await asyncio.sleep(0)
        assert r.prober.calls[-1][0] == "ok", "the healthy runtime's probe was not started at once"
        await r.answer_of(healthy, within=1.0)
        got = r.probes.answer(healthy, ask("ok"))
        assert got is not None and got.result.idle
        assert r.woken == [healthy]
        assert r.probes.flights == 20 and all(r.probes.in_flight(k) is not None for k in hanging)
        assert r.prober.max_per_uid == 1
        await r.probes.close()
        assert r.probes.flights == 0 and r.prober.now_in_flight == 0
        assert r.woken == [healthy], "a cancelled probe woke its runtime"
    asyncio.run(scenario())


def test_at_most_n_probes_run_at_once_and_a_slot_is_waited_for_within_the_deadline() -> None:
    async def scenario() -> None:
        r = Runner(concurrency=4)
        keys = [("agents", f"rt-{i:02d}") for i in range(21)]
        for i, key in enumerate(keys[:20]):
            r.probes.start(key, ask(f"u{i}"), pod=raw_pod(f"u{i}", HANGING), probe=PROBE, seconds=60)
        # The 21st may wait for a slot only until its own deadline: then "not idle", said why.
        r.probes.start(keys[20], ask("late"), pod=raw_pod("late"), probe=PROBE, seconds=0.2)
        await asyncio.sleep(0.05)
        assert r.prober.now_in_flight == 4 and r.probes.running == 4 and r.probes.flights == 21
        await r.answer_of(keys[20], within=2.0)
        late = r.probes.answer(keys[20], ask("late"))
        assert late is not None and not late.result.idle and "no probe slot free" in (late.result.error or "")
        assert "late" not in [uid for uid, _ in r.prober.calls], "it dialled past its deadline"
        r.prober.release.set()
        await r.probes.settle()
        assert r.prober.max_in_flight == 4 and len(r.prober.calls) == 20
        assert all(r.probes.answer(k, ask(f"u{i}")) is not None for i, k in enumerate(keys[:20]))
    asyncio.run(scenario())


def test_one_probe_in_flight_per_runtime_and_an_obsolete_one_is_replaced() -> None:
    async def scenario() -> None:
        r = Runner()
        key = ("agents", "rt")
        for _ in range(3):
            r.probes.start(key, ask("u7"), pod=raw_pod("u7", HANGING), probe=PROBE, seconds=60)
            await asyncio.sleep(0)
        assert len(r.prober.calls) == 1 and r.probes.flights == 1
        # The runtime moved on (another step, another pod): the old probe is cancelled, never
        # answered, and the new one runs alone.
        r.probes.start(key, ask("u8"), pod=raw_pod("u8"), probe=PROBE, seconds=60)
        await r.answer_of(key)
        assert r.probes.answer(key, ask("u7")) is None
        got = r.probes.answer(key, ask("u8"))
        assert got is not None and got.result.idle
        assert r.prober.max_per_uid == 1 and r.prober.max_in_flight == 1 and r.woken == [key]
    asyncio.run(scenario())


def test_a_prober_that_raises_is_an_answer_not_a_crash() -> None:
    class Broken:
        async def probe(self, *, pod: dict[str, Any], probe: sp.DrainProbe,
                        timeout: float | None = None) -> drainprobe.Result:
            raise OSError("boom")
    async def scenario() -> None:
        woken: list[Key] = []
        probes = probing.Probes(prober=Broken(), concurrency=1, clock=clock_mod.Clock(), wake=woken.append)
        key = ("agents", "rt")
        probes.start(key, ask("u7"), pod=raw_pod("u7"), probe=PROBE, seconds=1)
        await probes.settle()
        got = probes.answer(key, ask("u7"))
        assert got is not None and got.result == drainprobe.Result(idle=False, error="OSError: boom")
        assert woken == [key] and probes.running == 0
    asyncio.run(scenario())


# --- what a pass observes ----------------------------------------------------------------------


KEY = (b.NS, b.RT)


def draining_snapshot(*, from_uid: str = "uid-7", step_started: float = -10.0, deadline: float | None = 20.0,
                      ip: str = "127.0.0.1", probe: sp.DrainProbe = PROBE) -> snapshot.Snapshot:
    t = b.transition(st.Step.DRAINING, from_uid=from_uid, step_started=step_started, deadline=deadline)
    spec = b.spec(probe=True).model_copy(update={"drain": sp.Drain(probe=probe)})
    o = b.observed(status_=b.in_flight(t), spec_=spec, pods=(b.pod(7, uid_=from_uid, serving=False),))
    return snapshot.Snapshot(observed=o, runtime={}, pods=[raw_pod(from_uid, ip)])


def when_idle_snapshot(*, checked: datetime.datetime | None, pending_since: float = -30.0,
                       pending_seconds: int = 600, ip: str = "127.0.0.1") -> snapshot.Snapshot:
    spec = b.spec(probe=True, pending_seconds=pending_seconds).model_copy(update={
        "drain": sp.Drain(probe=PROBE), "handoff": sp.Handoff(policy=sp.HandoffPolicy.WHEN_IDLE)})
    pending = st.PendingChange(template_hash=b.HASH2, since=b.at(pending_since), changed=("template",))
    o = b.observed(status_=b.status(pending=pending), spec_=spec, desired_hash=b.HASH2, idle_checked_at=checked)
    return snapshot.Snapshot(observed=o, runtime={}, pods=[raw_pod("uid-7", ip)])


def manual() -> clock_mod.Manual:
    return clock_mod.Manual(b.NOW)


def test_a_draining_pass_starts_the_probe_and_decides_without_waiting_for_it() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        o = probing.observe(draining_snapshot(ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert (o.drain_idle, o.drain_probe_error) == (False, probing.NO_ANSWER_YET)
        assert r.probes.in_flight(KEY) == ask("uid-7")
        # Passes meanwhile start nothing more: one probe in flight for the runtime.
        for _ in range(3):
            probing.observe(draining_snapshot(ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        await asyncio.sleep(0)
        assert len(r.prober.calls) == 1
        await r.probes.close()
    asyncio.run(scenario())


def test_the_drain_probe_is_bounded_by_what_is_left_of_the_drain_budget() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        probing.observe(draining_snapshot(deadline=3.0, ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        await asyncio.sleep(0)
        assert len(r.prober.calls) == 1 and r.prober.calls[0][1] <= 3.0, r.prober.calls  # not timeoutSeconds=60
        await r.probes.close()
        # Past the deadline no probe starts (decide() terminates anyway).
        probing.observe(draining_snapshot(deadline=-1.0, step_started=-5.0), key=KEY, probes=r.probes, holds=True,
                        clock=clock)
        await asyncio.sleep(0)
        assert len(r.prober.calls) == 1 and r.probes.flights == 0
    asyncio.run(scenario())


def test_an_answer_counts_only_for_its_pod_uid_and_its_draining_step() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        probing.observe(draining_snapshot(), key=KEY, probes=r.probes, holds=True, clock=clock)
        await r.probes.settle()
        o = probing.observe(draining_snapshot(), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert (o.drain_idle, o.drain_probe_error) == (True, None)
        # The same runtime draining another pod, or the same pod in another Draining step: the
        # idle answer is not theirs.
        for snap in (draining_snapshot(from_uid="uid-9", ip=HANGING), draining_snapshot(step_started=-2.0, ip=HANGING)):
            o = probing.observe(snap, key=KEY, probes=r.probes, holds=True, clock=clock)
            assert (o.drain_idle, o.drain_probe_error) == (False, probing.NO_ANSWER_YET)
        await r.probes.close()
    asyncio.run(scenario())


def test_a_busy_answer_is_used_until_the_next_probe_one_period_later() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        r.prober.release.set()  # a hanging tool answers 503 at once
        probing.observe(draining_snapshot(ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        await r.probes.settle()
        o = probing.observe(draining_snapshot(ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert (o.drain_idle, o.drain_probe_error) == (False, "answered 503")
        assert r.probes.flights == 0 and len(r.prober.calls) == 1  # periodSeconds not yet over
        clock.t += 1.0
        o = probing.observe(draining_snapshot(ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert (o.drain_idle, o.drain_probe_error) == (False, "answered 503")  # the last answer meanwhile
        await r.probes.settle()
        assert len(r.prober.calls) == 2
    asyncio.run(scenario())


def test_only_the_lease_holder_starts_a_probe() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        o = probing.observe(draining_snapshot(), key=KEY, probes=r.probes, holds=False, clock=clock)
        assert o.drain_idle is None and r.probes.flights == 0
        o = probing.observe(when_idle_snapshot(checked=None), key=KEY, probes=r.probes, holds=False, clock=clock)
        assert o.idle_checked_at is None and r.probes.flights == 0
    asyncio.run(scenario())


def test_a_when_idle_check_starts_as_holder_and_its_idle_answer_counts_after_the_lease_went_back() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        o = probing.observe(when_idle_snapshot(checked=None), key=KEY, probes=r.probes, holds=True, clock=clock)
        # The check began now (decide() holds until the next interval and hands the Lease back).
        assert (o.idle_checked_at, o.drain_idle, o.drain_probe_error) == (b.NOW, False, probing.NO_ANSWER_YET)
        assert r.probes.in_flight(KEY) == probing.Ask("uid-7", probing.Purpose.IDLE_CHECK, b.NOW)
        await r.probes.settle()
        assert r.woken == [KEY]
        # The answer's pass, without the Lease: idle (decide() takes the Lease and begins).
        o = probing.observe(when_idle_snapshot(checked=b.NOW), key=KEY, probes=r.probes, holds=False, clock=clock)
        assert o.drain_idle is True
        # Holding again later in the interval: the idle answer stands, no new check replaces it.
        clock.t += 3.0
        o = probing.observe(when_idle_snapshot(checked=b.NOW), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert o.drain_idle is True and len(r.prober.calls) == 1
        # An idle answer of the idle check never counts for Draining the same pod.
        o = probing.observe(draining_snapshot(ip=HANGING), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert o.drain_idle is False
        await r.probes.close()
        # A check interval after it came, it no longer counts.
        clock.t += 5.0
        o = probing.observe(when_idle_snapshot(checked=b.NOW), key=KEY, probes=r.probes, holds=False, clock=clock)
        assert not o.drain_idle
    asyncio.run(scenario())


def test_a_when_idle_check_is_bounded_by_what_is_left_of_pending_seconds() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        probing.observe(when_idle_snapshot(checked=None, pending_since=-598.0, ip=HANGING), key=KEY, probes=r.probes,
                        holds=True, clock=clock)
        await asyncio.sleep(0)
        assert len(r.prober.calls) == 1 and r.prober.calls[0][1] <= 2.0, r.prober.calls
        # An answer for an earlier check (another idle_checked_at) is not this check's.
        assert r.probes.answer(KEY, probing.Ask("uid-7", probing.Purpose.IDLE_CHECK, b.at(-10))) is None
        await r.probes.close()
    asyncio.run(scenario())


def test_an_observed_without_a_probe_is_left_alone() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        t = b.transition(st.Step.DRAINING)
        o = b.observed(status_=b.in_flight(t), pods=(b.pod(7, serving=False),))
        got = probing.observe(snapshot.Snapshot(observed=o, runtime={}, pods=[raw_pod("uid-7")]), key=KEY,
                              probes=r.probes, holds=True, clock=clock)
        assert got is o and r.probes.flights == 0
    asyncio.run(scenario())




# --- the new pod's one check, as it becomes current ---------------------------------------------


class Misconfigured(FakeProber):
    """A tool without the probe's path: 404, as drainprobe.Prober reports it."""

    async def probe(self, *, pod: dict[str, Any], probe: sp.DrainProbe, timeout: float | None = None) -> drainprobe.Result:
        self.calls.append((pod["metadata"]["uid"], probe.timeout_seconds if timeout is None else timeout))
        return drainprobe.Result(idle=False, error="answered 404: the tool has no such endpoint", misconfigured=True)


def connecting_snapshot(*, to_uid: str = "uid-8", ready: bool = True, serving: bool = True) -> snapshot.Snapshot:
    t = b.transition(st.Step.CONNECTING, to_uid=to_uid)
    spec = b.spec(probe=True).model_copy(update={"drain": sp.Drain(probe=PROBE)})
    o = b.observed(status_=b.in_flight(t), spec_=spec, pods=(b.pod(8, uid_=to_uid, ready=ready, serving=serving),))
    return snapshot.Snapshot(observed=o, runtime={}, pods=[raw_pod(to_uid)])


def test_the_new_pods_check_runs_on_the_runner_and_its_answer_is_kept_for_that_pod_and_step() -> None:
    async def scenario() -> None:
        clock = manual()
        r = Runner(clock=clock)
        r.prober = Misconfigured()
        r.probes.prober = r.prober
        # Not Ready (or not serving) yet: nothing to check.
        for snap in (connecting_snapshot(ready=False), connecting_snapshot(serving=False)):
            o = probing.observe(snap, key=KEY, probes=r.probes, holds=True, clock=clock)
            assert not o.drain_probe_checking and r.probes.flights == 0
        # Ready and serving: the check starts, the pass is told it is in flight, never waits.
        o = probing.observe(connecting_snapshot(), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert o.drain_probe_checking and not o.drain_probe_misconfigured
        flight = r.probes.in_flight(KEY)
        assert flight is not None and (flight.uid, flight.purpose) == ("uid-8", probing.Purpose.READY_CHECK)
        await r.probes.settle()
        assert r.woken == [KEY]
        o = probing.observe(connecting_snapshot(), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert (o.drain_probe_checking, o.drain_probe_misconfigured) == (False, True)
        # Another pod's Connecting step does not take that answer; a replica without the Lease checks nothing.
        o = probing.observe(connecting_snapshot(to_uid="uid-9"), key=KEY, probes=r.probes, holds=True, clock=clock)
        assert o.drain_probe_checking and not o.drain_probe_misconfigured
        await r.probes.close()
        o = probing.observe(connecting_snapshot(to_uid="uid-10"), key=KEY, probes=r.probes, holds=False, clock=clock)
        assert not o.drain_probe_checking and r.probes.flights == 0
    asyncio.run(scenario())
