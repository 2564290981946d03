"""What one gateway replica remembers between calls: sealed pod UIDs, in-flight counts per pod
UID, which generation's pod issued which Mcp-Session-Id, and one wake-up per runtime. No I/O.

All bounded: sealed UIDs (SEALED_CAP, oldest first; an entry goes once its pod has been out of
the view for SEALED_FORGET_SECONDS), sessions (SESSIONS_CAP, least recently used first).
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable

from baton.gateway import gwmetrics

Key = tuple[str, str]  # (namespace, runtime)
SEALED_CAP = 65536
SEALED_FORGET_SECONDS = 600.0
SESSIONS_CAP = 65536


class State:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.sealed: collections.OrderedDict[str, Key] = collections.OrderedDict()
        self._gone_since: dict[str, float] = {}
        self.inflight: collections.Counter[str] = collections.Counter()
        self.sessions: collections.OrderedDict[str, str] = collections.OrderedDict()  # session id -> pod uid
        self._wake: dict[Key, asyncio.Event] = {}
        self.held: collections.Counter[Key] = collections.Counter()

    # --- wake-ups: one Event per runtime, replaced when set, so a waiter sees every change after it looked
    def event(self, key: Key) -> asyncio.Event:
        ev = self._wake.get(key)
        if ev is None:
            ev = self._wake[key] = asyncio.Event()
        return ev

    def wake(self, key: Key) -> None:
        ev = self._wake.pop(key, None)
        if ev is not None:
            ev.set()

    def wake_all(self) -> None:
        for key in list(self._wake):
            self.wake(key)

    # --- seal
    def seal(self, uid: str, key: Key) -> None:
        self.sealed[uid] = key
        self.sealed.move_to_end(uid)
        while len(self.sealed) > SEALED_CAP:
            old, _ = self.sealed.popitem(last=False)
            self._gone_since.pop(old, None)
        self.wake(key)

    def forget_gone(self, present: Callable[[str], bool]) -> None:
        """Drop sealed UIDs whose pod has been out of the view for SEALED_FORGET_SECONDS."""
        now = self.clock()
        for uid in list(self.sealed):
            if present(uid):
                self._gone_since.pop(uid, None)
            elif now - self._gone_since.setdefault(uid, now) >= SEALED_FORGET_SECONDS:
                del self.sealed[uid]
                del self._gone_since[uid]

    # --- in flight
    def begin(self, uid: str) -> None:
        self.inflight[uid] += 1
        gwmetrics.INFLIGHT.inc()

    def end(self, uid: str) -> None:
        self.inflight[uid] -= 1
        if self.inflight[uid] <= 0:
            del self.inflight[uid]
        gwmetrics.INFLIGHT.dec()

    def total_inflight(self) -> int:
        return sum(self.inflight.values())

    # --- MCP sessions
    def session_issued(self, session: str, uid: str) -> None:
        self.sessions[session] = uid
        self.sessions.move_to_end(session)
        while len(self.sessions) > SESSIONS_CAP:
            self.sessions.popitem(last=False)

    def session_uid(self, session: str) -> str | None:
        return self.sessions.get(session)
