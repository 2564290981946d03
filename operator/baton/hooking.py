"""Hooks (spec.hooks), outside the passes: the runner that carries hook calls out (`Hooks`, owned
by the controller) and the last answer as the pass's Observed. Does I/O only through the caller
it is given (baton.hookcall's POST), on tasks of its own: the shape of baton.probing.

Only the Lease holder calls, and only for a run status.transition.hook names that was persisted
under the token status carries now (the holder's current one): a run left by another holder is
first written again under ours by decide() (baton.lifecycle.hooks), then called. A pass never
waits for a call: it starts one and decides with the answer it has (none yet); the call's end
wakes the runtime. At most `concurrency` calls at once, at most one per runtime, each bounded by
the hook's timeoutSeconds. Each answer is kept with its Ask (the pod, the hook, the generation,
the attempt, the token), so an answer to another run never counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from typing import Any, Callable, Protocol

from baton import clock as clock_mod
from baton import hookcall
from baton.cache import snapshot
from baton.lifecycle import hooks as hook_rules
from baton.model import observed as observed_mod
from baton.model import spec as spec_model
from baton.model import status as status_mod

log = logging.getLogger("baton.hooks")

Key = tuple[str, str]


class Caller(Protocol):
    async def call(self, *, pod: dict[str, Any], post: spec_model.HttpPost, fence: hookcall.Fence,
                   timeout: float, timeout_seconds: int) -> hookcall.Result: ...


@dataclasses.dataclass(frozen=True)
class Ask:
    """One run's call: an answer counts only for the same Ask."""

    uid: str
    hook: str
    generation: int
    attempts: int
    started_at: datetime.datetime
    fencing_token: int


@dataclasses.dataclass(frozen=True)
class Answer:
    ask: Ask
    result: hookcall.Result


@dataclasses.dataclass
class _Flight:
    ask: Ask
    task: asyncio.Task[None]


class Hooks:
    """Runs hook calls apart from the workers: at most `concurrency` at once, one per runtime,
    each answer kept per runtime with its Ask, `wake(key)` called when one comes."""

    def __init__(self, *, caller: Caller, concurrency: int, clock: clock_mod.Clock,
                 wake: Callable[[Key], None]) -> None:
        self.caller = caller
        self.clock = clock
        self.wake = wake
        self._slots = asyncio.Semaphore(concurrency)
        self._flights: dict[Key, _Flight] = {}
        self._answers: dict[Key, Answer] = {}

    @property
    def flights(self) -> int:
        return len(self._flights)

    def answer(self, key: Key, ask: Ask) -> Answer | None:
        got = self._answers.get(key)
        return got if got is not None and got.ask == ask else None

    def in_flight(self, key: Key) -> Ask | None:
        flight = self._flights.get(key)
        return flight.ask if flight is not None else None

    def start(self, key: Key, ask: Ask, *, pod: dict[str, Any], post: spec_model.HttpPost, fence: hookcall.Fence,
              seconds: float, timeout_seconds: int) -> None:
        """Call for `ask` within `seconds` (slot wait included), unless already in flight. A call
        in flight for another Ask is obsolete (the runtime moved on): cancelled."""
        flight = self._flights.get(key)
        if flight is not None:
            if flight.ask == ask:
                return
            flight.task.cancel()
        task = asyncio.get_running_loop().create_task(self._run(key, ask, pod, post, fence, seconds, timeout_seconds),
                                                      name=f"baton hook {key[0]}/{key[1]}")
        self._flights[key] = _Flight(ask, task)

    async def _run(self, key: Key, ask: Ask, pod: dict[str, Any], post: spec_model.HttpPost, fence: hookcall.Fence,
                   seconds: float, timeout_seconds: int) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        result: hookcall.Result
        try:
            try:
                async with asyncio.timeout_at(end):
                    await self._slots.acquire()
            except TimeoutError:
                result = hookcall.Result(False, f"no hook slot free within {seconds:.1f}s "
                                                "(BATON_PROBE_CONCURRENCY calls in flight)")
            else:
                try:
                    log.info("calling %s hook of generation %s (fencing token %s, attempt %s)", ask.hook,
                             ask.generation, ask.fencing_token, ask.attempts, extra={"runtime": "/".join(key)})
                    result = await self.caller.call(pod=pod, post=post, fence=fence,
                                                    timeout=max(0.001, end - loop.time()), timeout_seconds=timeout_seconds)
                except Exception as exc:  # noqa: BLE001 - a caller that raises is a failed call, never a crash
                    result = hookcall.Result(False, f"{type(exc).__name__}: {exc}"[:200])
                finally:
                    self._slots.release()
        finally:
            flight = self._flights.get(key)
            if flight is not None and flight.task is asyncio.current_task():
                del self._flights[key]
        # Not reached when cancelled: nothing stored, no wake.
        self._answers[key] = Answer(ask, result)
        self.wake(key)

    def forget(self, key: Key) -> None:
        flight = self._flights.pop(key, None)
        if flight is not None:
            flight.task.cancel()
        self._answers.pop(key, None)

    async def settle(self) -> None:
        """Wait until no call is in flight (tests; the controller never waits for calls)."""
        while self._flights:
            await asyncio.gather(*(f.task for f in list(self._flights.values())), return_exceptions=True)

    async def close(self) -> None:
        tasks = [f.task for f in self._flights.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._flights.clear()


def observe(snap: snapshot.Snapshot, *, key: Key, hooks: Hooks, holds: bool,
            clock: clock_mod.Clock) -> observed_mod.Observed:
    """The snapshot's Observed with the answer to the call of the hook run status names, starting
    that call when it is due. Never waits for a call."""
    o = snap.observed
    t = o.status.transition
    if t is None or t.hook is None or t.hook.outcome is not None or t.hook.called_at is not None or not holds:
        return o
    run = t.hook
    name = run.hook if isinstance(run.hook, status_mod.HookName) else None
    hook = hook_rules.spec_of(o, name) if name is not None else None
    if name is None or hook is None or hook.http_post is None:
        return o
    if name == status_mod.HookName.PRE_RETIRE:
        if t.step != status_mod.Step.PRE_RETIRE_HOOK:
            return o
        uid = t.from_uid
    else:
        if t.step != status_mod.Step.CONNECTING:
            return o
        uid = t.to_uid
    # The holder's current token, persisted with the run: never a call under a token status
    # does not carry yet (decide() writes it first), so the receiver can trust the order.
    token = o.status.fencing_token
    if not uid or run.fencing_token != token or o.lease.token != token:
        return o
    raw = next((pd for pd in snap.pods if pd["metadata"]["uid"] == uid), None)
    if raw is None:
        return o  # decide() says the pod is gone
    ask = Ask(uid, name.value, run.generation, run.attempts, run.started_at, token)
    got = hooks.answer(key, ask)
    if got is not None:
        return o.model_copy(update={"hook_answer": observed_mod.HookAnswer(ok=got.result.ok, message=got.result.message)})
    if hooks.in_flight(key) != ask:
        left = (run.started_at - clock.wall()).total_seconds() + hook.timeout_seconds
        if left > 0:  # past it decide() ends the run as a timeout
            fence = hookcall.Fence(namespace=o.namespace, runtime=o.name, generation=run.generation,
                                   fencing_token=token, hook=name.value, pod=str(raw["metadata"].get("name") or ""))
            hooks.start(key, ask, pod=raw, post=hook.http_post, fence=fence, seconds=min(left, float(hook.timeout_seconds)),
                        timeout_seconds=hook.timeout_seconds)
    return o
