"""Open streams that carry no call: a GET event stream (MCP's standalone server-to-client
stream) and a WebSocket, per pod UID, with the time each last carried a byte. No I/O: ending one
is the callback its forwarder registered.

Why: such a stream never ends by itself, and it counts in flight on its pod, so a retire would
drain for the whole drainSeconds and every call held meanwhile would wait as long. Once the pod
is sealed, a stream that carried nothing for `idle_seconds` is ended (an event stream cleanly, a
WebSocket with close code 1012 Service Restart), so its client reconnects, to the next generation.
A stream busy at the seal is ended once it has been quiet that long; calls (POSTs, whose answers
may stream too) are never ended: the drain waits for them.

One POST is no call once answered: `subscriptions/listen` (MCP 2026-07-28), whose answer is the
client's event stream. It is opened `at_seal`: ended at the seal however recently it carried a
byte, its forwarder ending it the specification's way, between two events
(baton.gateway.listing), and its client listens again, on the next generation.
"""

from __future__ import annotations

import time
from typing import Callable, Container


class OpenStream:
    __slots__ = ("uid", "last", "end", "ended", "at_seal")

    def __init__(self, uid: str, end: Callable[[], None], now: float, *, at_seal: bool = False) -> None:
        self.uid = uid
        self.last = now  # when it last carried a byte, either way
        self.end = end
        self.ended = False
        self.at_seal = at_seal  # ended once its pod is sealed, quiet or not (a listen stream)


class Streams:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.by_uid: dict[str, set[OpenStream]] = {}

    def open(self, uid: str, end: Callable[[], None], *, at_seal: bool = False) -> OpenStream:
        s = OpenStream(uid, end, self.clock(), at_seal=at_seal)
        self.by_uid.setdefault(uid, set()).add(s)
        return s

    def close(self, s: OpenStream) -> None:
        mine = self.by_uid.get(s.uid)
        if mine is not None:
            mine.discard(s)
            if not mine:
                del self.by_uid[s.uid]

    def end_idle(self, *, sealed: Container[str], idle_seconds: float) -> int:
        """End every open stream of a sealed pod that carried nothing for `idle_seconds`, and
        every one opened `at_seal`; how many."""
        now = self.clock()
        ended = 0
        for uid, mine in list(self.by_uid.items()):
            if uid not in sealed:
                continue
            for s in list(mine):
                if not s.ended and (s.at_seal or now - s.last >= idle_seconds):
                    s.ended = True
                    s.end()
                    ended += 1
        return ended
