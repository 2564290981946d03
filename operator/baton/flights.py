"""Keyed single flights: the mechanics baton.probing (drain probes) and baton.hooking (hook calls)
share for the calls the operator makes to pods outside its passes. At most one flight per runtime
(a flight for another Ask cancels the obsolete one), the last answer kept per runtime with the Ask
it answers, at most `concurrency` calls holding a slot at once, and `wake(key)` when an answer
lands. No I/O of its own: each flight runs the coroutine its owner gives.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Awaitable, Callable, Generic, TypeVar

Key = tuple[str, str]
AskT = TypeVar("AskT")
AnswerT = TypeVar("AnswerT")
ResultT = TypeVar("ResultT")


@dataclasses.dataclass
class _Flight(Generic[AskT]):
    ask: AskT
    task: asyncio.Task[None]


class Flights(Generic[AskT, AnswerT]):
    def __init__(self, *, concurrency: int, wake: Callable[[Key], None]) -> None:
        self.wake = wake
        self._slots = asyncio.Semaphore(concurrency)
        self._flights: dict[Key, _Flight[AskT]] = {}
        self._answers: dict[Key, tuple[AskT, AnswerT]] = {}
        self.running = 0  # calls holding a slot

    @property
    def count(self) -> int:
        """Flights under way (waiting for a slot or calling)."""
        return len(self._flights)

    def answer(self, key: Key, ask: AskT) -> AnswerT | None:
        """The last answer for `key`, if it was for `ask`."""
        got = self._answers.get(key)
        return got[1] if got is not None and got[0] == ask else None

    def in_flight(self, key: Key) -> AskT | None:
        flight = self._flights.get(key)
        return flight.ask if flight is not None else None

    def launch(self, key: Key, ask: AskT, call: Callable[[], Awaitable[AnswerT]], *, name: str) -> None:
        """Run `call()` for `ask`, unless a flight for it is under way. A flight for another Ask is
        obsolete (the runtime moved on): cancelled, so one runtime never has two."""
        flight = self._flights.get(key)
        if flight is not None:
            if flight.ask == ask:
                return
            flight.task.cancel()
        task = asyncio.get_running_loop().create_task(self._fly(key, ask, call), name=name)
        self._flights[key] = _Flight(ask, task)

    async def _fly(self, key: Key, ask: AskT, call: Callable[[], Awaitable[AnswerT]]) -> None:
        try:
            answer = await call()
        finally:
            flight = self._flights.get(key)
            if flight is not None and flight.task is asyncio.current_task():
                del self._flights[key]
        # Not reached when cancelled (forgotten, replaced, shutting down): nothing stored, no wake.
        self._answers[key] = (ask, answer)
        self.wake(key)

    async def in_slot(self, end: float, call: Callable[[], Awaitable[ResultT]]) -> ResultT | None:
        """`call()` once a slot is free, waited for until the loop time `end`; None when no slot
        freed by then (nothing called)."""
        try:
            async with asyncio.timeout_at(end):
                await self._slots.acquire()
        except TimeoutError:
            return None
        self.running += 1
        try:
            return await call()
        finally:
            self.running -= 1
            self._slots.release()

    def forget(self, key: Key) -> None:
        """The runtime is gone: its flight cancelled, its answer dropped."""
        flight = self._flights.pop(key, None)
        if flight is not None:
            flight.task.cancel()
        self._answers.pop(key, None)

    async def settle(self) -> None:
        """Wait until no flight is under way (tests and the model check; the controller never waits)."""
        while self._flights:
            await asyncio.gather(*(f.task for f in list(self._flights.values())), return_exceptions=True)

    async def close(self) -> None:
        """Cancel every flight (shutdown)."""
        tasks = [f.task for f in self._flights.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._flights.clear()
