"""Drain probes, outside the passes: which probe a pass needs, the runner that carries probes out
(`Probes`, owned by the controller), and the last answer as the pass's Observed. Does I/O only
through the prober it is given (baton.drainprobe's HTTP GET), on tasks of its own.

Three probes: the retiring pod's while a transition is Draining, the serving pod's when a
change waits for idle (handoff policy WhenIdle) and a check is due, and the new pod's once as it
becomes current (a path the tool does not have, 404/405/501, is a misconfiguration said at once). Only the Lease holder
starts one: other replicas never dial the pod.

A pass never waits for a probe (a tool that hangs until timeoutSeconds would hold a worker,
and with enough of them every runtime of the replica would wait): it starts one, decides with
the last answer it has (or "not idle, no answer yet"), and the probe's completion wakes the
runtime again. At most `concurrency` probes run at once, at most one per runtime, each bounded by
its timeoutSeconds and by what is left of the drain or pending budget. Each answer is kept with
what it was asked for (`Ask`: the pod's UID, the purpose, the step or check it belongs to), so
an answer for another pod, another Draining step or an earlier check never counts as idle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import logging
from typing import Any, Callable, Protocol

from baton import clock as clock_mod
from baton import drainprobe, flights, lifecycle
from baton.cache import snapshot
from baton.model import observed as observed_mod
from baton.model import spec as spec_model
from baton.model import status as status_mod

log = logging.getLogger("baton.drainprobe")

Key = tuple[str, str]
NO_ANSWER_YET = "no answer yet (the probe is in flight)"


class Prober(Protocol):
    async def probe(self, *, pod: dict[str, Any], probe: spec_model.DrainProbe,
                    timeout: float | None = None) -> drainprobe.Result: ...


class Purpose(str, enum.Enum):
    DRAIN = "drain"  # the retiring pod, while Draining
    IDLE_CHECK = "idle-check"  # the serving pod, while a change waits for idle (WhenIdle)
    READY_CHECK = "ready-check"  # the new pod once, as it becomes current: is the probe's path there?


@dataclasses.dataclass(frozen=True)
class Ask:
    """What a probe is for: the pod it dials (by UID), why, and since when (the Draining step's
    start, or when the idle check began). An answer counts only for the same Ask."""

    uid: str
    purpose: Purpose
    since: datetime.datetime


@dataclasses.dataclass(frozen=True)
class Answer:
    ask: Ask
    result: drainprobe.Result
    at: float  # the clock's monotonic time when it came
    wall: datetime.datetime  # the clock's wall time when it came


class Probes:
    """Runs drain probes apart from the workers (baton.flights: at most `concurrency` at once, a
    slot waited for within the probe's own deadline, at most one per runtime, each answer kept
    per runtime with its Ask, and `wake(key)` called when one comes)."""

    def __init__(self, *, prober: Prober, concurrency: int, clock: clock_mod.Clock,
                 wake: Callable[[Key], None]) -> None:
        self.prober = prober
        self.clock = clock
        self._calls: flights.Flights[Ask, Answer] = flights.Flights(concurrency=concurrency, wake=wake)

    @property
    def running(self) -> int:
        """Probes holding a slot (dialling)."""
        return self._calls.running

    @property
    def flights(self) -> int:
        """Probes in flight (waiting for a slot or dialling)."""
        return self._calls.count

    def answer(self, key: Key, ask: Ask) -> Answer | None:
        """The last answer for `key`, if it was for `ask`."""
        return self._calls.answer(key, ask)

    def in_flight(self, key: Key) -> Ask | None:
        return self._calls.in_flight(key)

    def start(self, key: Key, ask: Ask, *, pod: dict[str, Any], probe: spec_model.DrainProbe, seconds: float) -> None:
        """Probe for `ask`, over within `seconds` (slot wait included), unless a probe for it is
        already in flight. A probe in flight for another Ask is obsolete (the runtime moved on):
        cancelled, so one runtime never has two."""
        self._calls.launch(key, ask, lambda: self._run(key, ask, pod, probe, seconds),
                           name=f"baton probe {key[0]}/{key[1]}")

    async def _run(self, key: Key, ask: Ask, pod: dict[str, Any], probe: spec_model.DrainProbe, seconds: float) -> Answer:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds

        async def dial() -> drainprobe.Result:
            try:
                return await self.prober.probe(pod=pod, probe=probe, timeout=max(0.001, end - loop.time()))
            except Exception as exc:  # noqa: BLE001 - a prober that raises is a "not idle", never a crash
                log.warning("drain probe raised: %s: %s", type(exc).__name__, exc, extra={"runtime": "/".join(key)})
                return drainprobe.Result(idle=False, error=f"{type(exc).__name__}: {exc}"[:200])

        result = await self._calls.in_slot(end, dial)
        if result is None:
            result = drainprobe.Result(idle=False, error=f"no probe slot free within {seconds:.1f}s "
                                                         "(BATON_PROBE_CONCURRENCY probes in flight)")
        return Answer(ask, result, self.clock.monotonic(), self.clock.wall())

    def forget(self, key: Key) -> None:
        """The runtime is gone: its probe cancelled, its answer dropped."""
        self._calls.forget(key)

    async def settle(self) -> None:
        """Wait until no probe is in flight (tests and the model check; the controller never
        waits for probes)."""
        await self._calls.settle()

    async def close(self) -> None:
        """Cancel every probe in flight (shutdown)."""
        await self._calls.close()


def observe(snap: snapshot.Snapshot, *, key: Key, probes: Probes, holds: bool,
            clock: clock_mod.Clock) -> observed_mod.Observed:
    """The snapshot's Observed with the last answer to the probe this pass needs (the same one
    if none), starting that probe when one is due. Never waits for a probe."""
    o = snap.observed
    t = o.status.transition
    probe = o.spec.drain.probe
    if probe is None:
        return o
    now = clock.wall()
    if t is not None and t.step == status_mod.Step.DRAINING and t.from_uid and holds:
        retiring = next((pd for pd in snap.pods if pd["metadata"]["uid"] == t.from_uid), None)
        if retiring is None:
            return o  # decide() records it gone
        ask = Ask(t.from_uid, Purpose.DRAIN, t.step_started_at)
        got = probes.answer(key, ask)
        # Again once the last "not idle" is periodSeconds old (an idle answer ends the step).
        due = got is None or (not got.result.idle and clock.monotonic() - got.at >= probe.period_seconds)
        if due and probes.in_flight(key) != ask:
            left = float(probe.timeout_seconds)
            if t.deadline is not None:
                left = min(left, (t.deadline - now).total_seconds())
            if left > 0:  # past the drain deadline decide() terminates anyway
                probes.start(key, ask, pod=retiring, probe=probe, seconds=left)
        if got is None:
            return o.model_copy(update={"drain_idle": False, "drain_probe_error": NO_ANSWER_YET})
        return o.model_copy(update={"drain_idle": got.result.idle, "drain_probe_error": got.result.error,
                                    "drain_probe_misconfigured": got.result.misconfigured})
    if t is not None and t.step == status_mod.Step.CONNECTING and t.to_uid and holds:
        # Checked once per generation, before the pass that makes it current (Ready and labelled
        # serving): a probe on a path the tool does not have is said now, not at the next drain.
        pod = o.pod_by_uid(t.to_uid)
        raw = next((pd for pd in snap.pods if pd["metadata"]["uid"] == t.to_uid), None)
        if pod is None or not (pod.ready and pod.serving) or raw is None:
            return o
        ask = Ask(t.to_uid, Purpose.READY_CHECK, t.step_started_at)
        got = probes.answer(key, ask)
        if got is not None:
            return o.model_copy(update={"drain_probe_misconfigured": got.result.misconfigured,
                                        "drain_probe_error": got.result.error})
        if probes.in_flight(key) != ask:
            probes.start(key, ask, pod=raw, probe=probe, seconds=float(probe.timeout_seconds))
        return o.model_copy(update={"drain_probe_checking": True})
    current, pending = o.status.current, o.status.pending
    if (t is None and pending is not None and current is not None
            and o.spec.handoff.policy == spec_model.HandoffPolicy.WHEN_IDLE):
        check = Ask(current.uid, Purpose.IDLE_CHECK, o.idle_checked_at) if o.idle_checked_at is not None else None
        got = probes.answer(key, check) if check is not None else None
        # An idle answer stands for one check interval after it came (decide() may first have to
        # take the Lease back): no new check replaces it meanwhile.
        idle_now = (got is not None and got.result.idle
                    and not lifecycle.idle_check_due(o.model_copy(update={"idle_checked_at": got.wall}), now))
        checking = check is not None and probes.in_flight(key) == check
        if not idle_now and not checking and holds and lifecycle.idle_check_due(o, now):
            # decide() takes the Lease only when a check is due, so this probe starts at most once
            # per check interval.
            serving = next((pd for pd in snap.pods if pd["metadata"]["uid"] == current.uid), None)
            if serving is None:
                return o.model_copy(update={"drain_idle": False, "drain_probe_error": "the serving pod is not in view",
                                            "idle_checked_at": now})
            left = min(float(probe.timeout_seconds),
                       (pending.since - now).total_seconds() + o.spec.budgets.pending_seconds)
            if left > 0:  # past pendingSeconds decide() hands off anyway
                probes.start(key, Ask(current.uid, Purpose.IDLE_CHECK, now), pod=serving, probe=probe, seconds=left)
            return o.model_copy(update={"drain_idle": False, "drain_probe_error": NO_ANSWER_YET,
                                        "idle_checked_at": now})
        if got is not None:
            return o.model_copy(update={"drain_idle": idle_now, "drain_probe_error": got.result.error})
    return o
