"""What one gateway replica remembers between calls: sealed pod UIDs, in-flight counts per pod
UID, which generation's pod issued which Mcp-Session-Id, and one wake-up per runtime. No I/O.

All bounded: sealed UIDs (SEALED_PER_RUNTIME per runtime and SEALED_CAP in all; at a bound only
the seal of a pod already out of the view is evicted, never that of a pod still in it: with none
to evict the new seal is refused, SealRefused, and the operator asks again; an entry also goes
once its pod has been out of the view for SEALED_FORGET_SECONDS), sessions (SESSIONS_CAP, least
recently used first), the re-bindings of sealed session ids (baton.gateway.sessions.Rebinds),
the sessions seen per pod (SESSIONS_SEEN_CAP, least recently used first), the last activity per
runtime (ACTIVITY_CAP, least recently active first: an evicted runtime's time raises the floor
every runtime not listed is read at, so an eviction never makes a runtime look idler than it is),
and the wake demand (one entry per runtime with a call held for its wake: bounded by the held
calls; at most names.WAKE_DEMAND_MAX reported).
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable

from baton.gateway import gwmetrics
from baton.gateway import sessions as sessions_mod
from baton.gateway import streams as streams_mod
from baton.model import names

Key = tuple[str, str]  # (namespace, runtime)
# A runtime has one serving pod and, through a handoff, one or two retiring ones: 16 sealed pods
# of one runtime still in the view is far past any real handoff. Only the operator can seal (the
# admin API is authenticated), so the total bound is a backstop: one per runtime of a large
# installation, each a few dozen bytes.
SEALED_PER_RUNTIME = 16
SEALED_CAP = 16384
SEALED_FORGET_SECONDS = 600.0
SESSIONS_CAP = 65536
# Sessions (by fingerprint) this replica forwarded, with the pod each last went to: the operator
# counts them per retiring pod (GET /v1/inflight); at most SESSIONS_SEEN_REPORTED in one answer.
SESSIONS_SEEN_CAP = 65536
SESSIONS_SEEN_REPORTED = 4096
# Runtimes whose last activity is kept (baton.gateway.idle; GET /v1/activity).
ACTIVITY_CAP = 65536


class SealRefused(Exception):
    """A seal past a bound with no seal of a gone pod to evict: refused, nothing changed."""


class State:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.sealed: collections.OrderedDict[str, Key] = collections.OrderedDict()
        self._gone_since: dict[str, float] = {}
        self.inflight: collections.Counter[str] = collections.Counter()
        # (namespace, runtime, session id) -> the pod uid that answered its initialize
        self.sessions: collections.OrderedDict[tuple[str, str, str], str] = collections.OrderedDict()
        self.rebinds = sessions_mod.Rebinds()
        # session fingerprint -> the pod uid it was last forwarded to (baton.gateway.sessions)
        self.session_pods: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._wake: dict[Key, asyncio.Event] = {}
        self.held: collections.Counter[Key] = collections.Counter()
        # The ledger's totals (baton.gateway.budget): calls held in all, request-body bytes in memory.
        self.held_total = 0
        self.buffered_bytes = 0
        self.held_bytes: collections.Counter[Key] = collections.Counter()
        self.held_bytes_total = 0
        # Open GET event streams and WebSockets per pod UID, ended once their pod is sealed and
        # they are quiet (baton.gateway.streams).
        self.streams = streams_mod.Streams(clock=clock)
        # Idle and wake (baton.gateway.idle): when each runtime last had a call that counts as
        # activity (least recently active first), the floor an unlisted runtime is read at (this
        # replica's start, or the latest time evicted), the calls forwarded now per runtime (no
        # GET streams), and the runtimes with calls held for their wake: [calls, since].
        self.started = clock()
        self.activity: collections.OrderedDict[Key, float] = collections.OrderedDict()
        self._activity_floor = self.started
        self.calls: collections.Counter[Key] = collections.Counter()
        self.demand: dict[Key, list[float]] = {}
        self.on_demand_change: Callable[[], None] = lambda: None  # the registrar's prompt write

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
    def seal(self, uid: str, key: Key, *, present: Callable[[str], bool] = lambda _uid: True) -> None:
        """Seal pod `uid` of runtime `key` (idempotent). At a bound, the oldest seal of a pod out
        of the view (`present` False) makes room; if every one is of a pod still in the view,
        SealRefused and nothing changes. (Without `present`, every pod counts as in the view.)"""
        if uid in self.sealed:
            self.wake(key)
            return
        mine = [u for u, k in self.sealed.items() if k == key]
        if len(mine) >= SEALED_PER_RUNTIME and not self._evict_gone(mine, present):
            raise SealRefused(f"{key[0]}/{key[1]} has {len(mine)} sealed pods still in the view "
                              f"(at most {SEALED_PER_RUNTIME})")
        if len(self.sealed) >= SEALED_CAP and not self._evict_gone(list(self.sealed), present):
            raise SealRefused(f"{len(self.sealed)} sealed pods still in the view (at most {SEALED_CAP})")
        self.sealed[uid] = key
        self.wake(key)

    def _evict_gone(self, uids: list[str], present: Callable[[str], bool]) -> bool:
        """Drop the oldest of `uids` (oldest first) whose pod is out of the view; False if none."""
        for old in uids:
            if not present(old):
                del self.sealed[old]
                self._gone_since.pop(old, None)
                return True
        return False

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
    # Keyed by runtime and id: two runtimes whose servers issue the same id never see each
    # other's (review item 9).
    def session_issued(self, key: Key, session: str, uid: str) -> None:
        k = (key[0], key[1], session)
        self.sessions[k] = uid
        self.sessions.move_to_end(k)
        while len(self.sessions) > SESSIONS_CAP:
            self.sessions.popitem(last=False)

    def session_uid(self, key: Key, session: str) -> str | None:
        return self.sessions.get((key[0], key[1], session))

    def session_seen(self, fingerprint: str, uid: str) -> None:
        if self.session_pods.get(fingerprint) != uid:
            self.session_pods[fingerprint] = uid
        self.session_pods.move_to_end(fingerprint)
        while len(self.session_pods) > SESSIONS_SEEN_CAP:
            self.session_pods.popitem(last=False)

    def sessions_seen(self, uid: str) -> list[str]:
        """Fingerprints of the sessions last forwarded to pod `uid` (most recent first, at most
        SESSIONS_SEEN_REPORTED)."""
        seen: list[str] = []
        for fp, pod in reversed(self.session_pods.items()):
            if pod == uid:
                seen.append(fp)
                if len(seen) >= SESSIONS_SEEN_REPORTED:
                    break
        return seen

    # --- activity and wake demand (baton.gateway.idle; docs/gateway.md, "Idle runtimes and wake")
    def active(self, key: Key) -> None:
        """A call that counts as activity for runtime `key` was forwarded (or ended) now."""
        self.activity[key] = self.clock()
        self.activity.move_to_end(key)
        while len(self.activity) > ACTIVITY_CAP:
            _, evicted = self.activity.popitem(last=False)
            self._activity_floor = max(self._activity_floor, evicted)

    def idle_seconds(self, key: Key) -> float:
        """Seconds since runtime `key`'s last activity here (since this replica started if none)."""
        return max(0.0, self.clock() - self.activity.get(key, self._activity_floor))

    def call_begin(self, key: Key) -> None:
        self.calls[key] += 1

    def call_end(self, key: Key) -> None:
        self.calls[key] -= 1
        if self.calls[key] <= 0:
            del self.calls[key]

    def demand_add(self, key: Key) -> None:
        """One more call held for runtime `key`'s wake; the first makes it demand."""
        entry = self.demand.get(key)
        if entry is not None:
            entry[0] += 1
            return
        self.demand[key] = [1, self.clock()]
        self.on_demand_change()

    def demand_remove(self, key: Key) -> None:
        entry = self.demand.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            del self.demand[key]
            self.on_demand_change()

    def wake_demand(self) -> list[str]:
        """What the registration Lease's names.ANN_WAKE_DEMAND says: "namespace/name" of the
        runtimes with calls held for their wake, sorted; past names.WAKE_DEMAND_MAX, those held
        longest (the others get their turn as those wake)."""
        keys = list(self.demand)
        if len(keys) > names.WAKE_DEMAND_MAX:
            keys = sorted(keys, key=lambda k: self.demand[k][1])[:names.WAKE_DEMAND_MAX]
        return sorted(f"{ns}/{name}" for ns, name in keys)
