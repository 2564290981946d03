"""A work queue of runtime keys, in the shape of controller-runtime's: no I/O (asyncio only).

- A key is queued at most once; a key added while a worker processes it is queued again when
  that worker is done (never processed by two workers at once).
- `add_after(key, seconds)`: a deadline as a wake-up (the earliest one wins).
- `Backoff`: per-key exponential back-off with jitter for failures; `forget` resets it.
- `PassBudget`: per-key token bucket, so no input can make one key spin.
- `observer`: told of adds, waits and turns, in the shape of client-go's workqueue metrics
  (depth, adds, time in queue, work duration, retries); `running()` gives the turns under way
  (unfinished work, the longest running).
- `first`: keys it says yes to (work in progress: a runtime whose Lease this replica holds) are
  served before the others, one other key at least every URGENT_RUN of them, so what is started
  finishes (and hands its Lease back) before more is started, and nothing starves.

A key waiting here holds nothing: the Lease is taken only by the worker that acts on it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import heapq
import itertools
import random
import time
from typing import Callable, Generic, Hashable, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down: workers stop."""


URGENT_RUN = 8


class Observer(Protocol):
    """What the queue reports (client-go's workqueue MetricsProvider, in one object)."""

    def depth(self, n: int) -> None: ...
    def added(self) -> None: ...
    def started(self, *, waited: float) -> None: ...
    def finished(self, *, worked: float) -> None: ...
    def retried(self) -> None: ...


class WorkQueue(Generic[K]):
    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 first: Callable[[K], bool] | None = None, observer: Observer | None = None) -> None:
        self._clock = clock
        self._first = first
        self._observer = observer
        # When each key waiting for a worker became due (time in queue is measured from there:
        # a timed wake-up's delay is asked for, not waited), and when each turn began.
        self._since: dict[K, float] = {}
        self._started: dict[K, float] = {}
        self._ready: collections.deque[K] = collections.deque()
        self._urgent: collections.deque[K] = collections.deque()
        self._urgent_run = 0
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._shut = False

    def __len__(self) -> int:
        return len(self._ready) + len(self._urgent)

    def _enqueue(self, key: K) -> None:
        (self._urgent if self._first is not None and self._first(key) else self._ready).append(key)
        self._wakeup.set()
        if self._observer is not None:
            self._observer.depth(len(self))

    def _pop(self) -> K:
        if self._urgent and (self._urgent_run < URGENT_RUN or not self._ready):
            self._urgent_run += 1
            return self._urgent.popleft()
        self._urgent_run = 0
        return self._ready.popleft()

    @property
    def waiting(self) -> int:
        """Keys with a pending wake-up (not yet due)."""
        return len(self._due)

    def add(self, key: K) -> None:
        if self._shut or key in self._dirty:
            return
        self._dirty.add(key)
        self._since[key] = self._clock()
        if self._observer is not None:
            self._observer.added()
        self._due.pop(key, None)  # due now: an earlier wake-up than any pending one
        if key not in self._processing:
            self._enqueue(key)

    def add_rate_limited(self, key: K, seconds: float) -> None:
        """add_after for a retry (a failure's back-off, a throttled pass): counted as one."""
        if self._observer is not None and not self._shut:
            self._observer.retried()
        self.add_after(key, seconds)

    def add_after(self, key: K, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        if self._shut or key in self._dirty:
            return
        when = self._clock() + seconds
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._delayed, (when, next(self._seq), key))
        self._wakeup.set()

    def _promote_due(self) -> float | None:
        """Move due wake-ups to the ready queue; seconds until the next one, or None."""
        now = self._clock()
        while self._delayed:
            when, _, key = self._delayed[0]
            if self._due.get(key) != when:  # superseded by an earlier one, or added meanwhile
                heapq.heappop(self._delayed)
                continue
            if when > now:
                return when - now
            heapq.heappop(self._delayed)
            del self._due[key]
            self.add(key)
        return None

    async def get(self) -> K:
        while True:
            if self._shut:
                raise ShutDown()
            next_due = self._promote_due()
            if self._ready or self._urgent:
                key = self._pop()
                self._dirty.discard(key)
                self._processing.add(key)
                now = self._clock()
                self._started[key] = now
                since = self._since.pop(key, now)
                if self._observer is not None:
                    self._observer.depth(len(self))
                    self._observer.started(waited=max(0.0, now - since))
                return key
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=next_due)
            except asyncio.TimeoutError:
                pass

    def done(self, key: K) -> None:
        self._processing.discard(key)
        started = self._started.pop(key, None)
        if started is not None and self._observer is not None:
            self._observer.finished(worked=max(0.0, self._clock() - started))
        if key in self._dirty and not self._shut:
            self._enqueue(key)

    def running(self) -> list[float]:
        """Seconds each turn under way has run so far (a worker's key not yet done)."""
        now = self._clock()
        return [max(0.0, now - started) for started in self._started.values()]

    def shut_down(self) -> None:
        self._shut = True
        self._wakeup.set()


@dataclasses.dataclass
class Backoff(Generic[K]):
    """Per-key exponential back-off with ±20 % jitter: base · 2^(failures-1), capped."""

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    failures: dict[K, int] = dataclasses.field(default_factory=dict)

    def when(self, key: K) -> float:
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        return float(min(self.cap, self.base * 2 ** min(n - 1, 16)) * self.rng.uniform(0.8, 1.2))

    def forget(self, key: K) -> None:
        self.failures.pop(key, None)


@dataclasses.dataclass
class PassBudget(Generic[K]):
    """Per-key token bucket: `burst` passes at once, then `rate` a second.

    A pass that must wait reserves its token: coming back after the wait it is admitted, so a
    throttled key always makes progress (never throttled again for the same pass)."""

    burst: float = 30.0
    rate: float = 2.0
    clock: Callable[[], float] = time.monotonic
    _state: dict[K, tuple[float, float]] = dataclasses.field(default_factory=dict)
    _reserved: dict[K, float] = dataclasses.field(default_factory=dict)

    def take(self, key: K) -> float:
        """Seconds to wait before this key's next pass (0: go now)."""
        now = self.clock()
        due = self._reserved.get(key)
        if due is not None:
            if now >= due:
                del self._reserved[key]
                return 0.0  # its token was taken when it was told to wait
            return due - now
        tokens, at = self._state.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate) - 1.0
        self._state[key] = (tokens, now)
        if tokens >= 0.0:
            return 0.0
        wait = -tokens / self.rate
        self._reserved[key] = now + wait
        return wait

    def refund(self, key: K) -> None:
        """Give back the token of the pass just admitted (it turned out not to act)."""
        state = self._state.get(key)
        if state is not None:
            self._state[key] = (min(self.burst, state[0] + 1.0), state[1])

    def forget(self, key: K) -> None:
        self._state.pop(key, None)
        self._reserved.pop(key, None)
