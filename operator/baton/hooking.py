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
from baton import flights, hookcall
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


class Hooks:
    """Runs hook calls apart from the workers (baton.flights: at most `concurrency` at once, one
    per runtime, each answer kept per runtime with its Ask, `wake(key)` called when one comes)."""

    def __init__(self, *, caller: Caller, concurrency: int, clock: clock_mod.Clock,
                 wake: Callable[[Key], None]) -> None:
        self.caller = caller
        self.clock = clock
        self._calls: flights.Flights[Ask, Answer] = flights.Flights(concurrency=concurrency, wake=wake)

    @property
    def flights(self) -> int:
        return self._calls.count

    def answer(self, key: Key, ask: Ask) -> Answer | None:
        return self._calls.answer(key, ask)

    def in_flight(self, key: Key) -> Ask | None:
        return self._calls.in_flight(key)

    def start(self, key: Key, ask: Ask, *, pod: dict[str, Any], post: spec_model.HttpPost, fence: hookcall.Fence,
              seconds: float, timeout_seconds: int) -> None:
        """Call for `ask` within `seconds` (slot wait included), unless already in flight. A call
        in flight for another Ask is obsolete (the runtime moved on): cancelled."""
        self._calls.launch(key, ask, lambda: self._run(key, ask, pod, post, fence, seconds, timeout_seconds),
                           name=f"baton hook {key[0]}/{key[1]}")

    async def _run(self, key: Key, ask: Ask, pod: dict[str, Any], post: spec_model.HttpPost, fence: hookcall.Fence,
                   seconds: float, timeout_seconds: int) -> Answer:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds

        async def call() -> hookcall.Result:
            try:
                log.info("calling %s hook of generation %s (fencing token %s, attempt %s)", ask.hook,
                         ask.generation, ask.fencing_token, ask.attempts, extra={"runtime": "/".join(key)})
                return await self.caller.call(pod=pod, post=post, fence=fence,
                                              timeout=max(0.001, end - loop.time()), timeout_seconds=timeout_seconds)
            except Exception as exc:  # noqa: BLE001 - a caller that raises is a failed call, never a crash
                return hookcall.Result(False, f"{type(exc).__name__}: {exc}"[:200])

        result = await self._calls.in_slot(end, call)
        if result is None:
            result = hookcall.Result(False, f"no hook slot free within {seconds:.1f}s "
                                            "(BATON_PROBE_CONCURRENCY calls in flight)")
        return Answer(ask, result)

    def forget(self, key: Key) -> None:
        self._calls.forget(key)

    async def settle(self) -> None:
        """Wait until no call is in flight (tests; the controller never waits for calls)."""
        await self._calls.settle()

    async def close(self) -> None:
        await self._calls.close()


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
