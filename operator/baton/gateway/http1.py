"""Calls whose body is in hand, to a pod over HTTP/1.1: kept-alive connections pooled per pod
UID, the request written as one buffer, the answer parsed by llhttp (httptools). Does I/O
(sockets). One connection, its answer parsed and handed over in parts: ``baton.gateway.http1conn``.

Why not aiohttp's client here: per call it builds a request object, a header multidict, a
payload and a writer task, and its answer waits on a stream reader; py-spy put that at about a
fifth of the gateway's CPU per small call (docs/performance.md). Most tool calls are small
JSON-RPC bodies that the gateway has read whole before it decides where they go, so they need
none of it. Streamed uploads, HEAD and WebSockets stay on aiohttp's client (baton.gateway.proxy).

Reuse: a connection is reused only when its previous answer was read in full with keep-alive,
and only for `keepalive_seconds` (2 s by default, below the 5 s after which uvicorn, Hypercorn and
Node close an idle connection) or less when the answer said `Keep-Alive: timeout=N` (N less
KEEPALIVE_HINT_MARGIN_SECONDS). A pooled connection that the pod closed is dropped before anything
is written to it, when its close has been read; a close that crosses the write cannot be seen
before it, and the expiry below the pod's is what keeps that rare.

A call is sent twice only when that is safe: when a REUSED connection fails before any byte of
the answer came (the pod closed it as we wrote) and the call is idempotent (GET, HEAD, OPTIONS,
PUT, DELETE, TRACE, RFC 9110 9.2.2) or carries an Idempotency-Key, it is written once more on a
new connection (the rule of Go's net/http and aiohttp's client). A POST, such as a JSON-RPC tool
call, is never sent twice.

Failures: `PoolBusy` when no place for a connection freed within the pool timeout (nothing sent,
the pod not tried); `ConnectFailed` when the pod refused or did not answer the connect (nothing
sent); `http1conn.UpstreamFailed` for anything after the first byte was written.

Bounds: at most `limit` connections open, and at most `limit_per_key` to one pod, so that one
pod's streams or slow calls cannot take every place. At the global limit an idle connection to
another pod is closed for a call that needs one; else the call waits, within its pool timeout.
At most IDLE_PER_POD idle per pod; an answer's buffered body is paused at http1conn.READ_HIGH
bytes until the caller takes it.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable

from baton.gateway import http1conn

IDLE_PER_POD = 64
SWEEP_SECONDS = 10.0
KEEPALIVE_SECONDS = 2.0
# Taken off a pod's `Keep-Alive: timeout=N` for the time its close takes to reach us and for
# clock skew between its timer and ours (Node's undici client subtracts a margin the same way).
KEEPALIVE_HINT_MARGIN_SECONDS = 1.0
# No Content-Length is sent for a body-less call of these (aiohttp's client does the same).
NO_LENGTH_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Written again after a reused connection closed at the write (RFC 9110 9.2.2; aiohttp's list).
IDEMPOTENT_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"TRACE"})
IDEMPOTENCY_HEADERS = (b"\r\nidempotency-key:", b"\r\nx-idempotency-key:")  # Go's net/http honours both

Key = http1conn.Key  # (pod uid, pod ip, port)


class ConnectFailed(Exception):
    """Nothing of the call reached the pod: it refused the connection or did not answer the
    connect in time."""


class PoolBusy(Exception):
    """Nothing was sent and the pod was not tried: no place for a connection (to any pod, or to
    this one) freed within the pool timeout. The gateway is overloaded, not the pod."""


def replayable(data: bytes) -> bool:
    """Whether the request `data` (as `request_head` wrote it, then its body) may be written
    twice: an idempotent method, or an Idempotency-Key field. Read only when a retry is due."""
    end = data.find(b"\r\n\r\n")
    head = data[:end + 2].lower() if end >= 0 else b""
    return data[:data.find(b" ")] in IDEMPOTENT_METHODS or any(name in head for name in IDEMPOTENCY_HEADERS)


def request_head(*, method: str, target: str, headers: list[tuple[str, str]], body_size: int | None) -> bytes:
    """The request line and header block. `headers` are end-to-end fields as the client sent
    them (aiohttp's parser rejects CR and LF in them); Content-Length is the body's own."""
    lines = [f"{method} {target} HTTP/1.1\r\n"]
    lines.extend(f"{k}: {v}\r\n" for k, v in headers)
    if body_size is not None:
        lines.append(f"Content-Length: {body_size}\r\n")
    elif method not in NO_LENGTH_METHODS:
        lines.append("Content-Length: 0\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class Pool:
    """Connections to pods, pooled per key (pod UID, IP, port), within `limit` open in all and
    `limit_per_key` to one pod (default: `limit`). Idle ones are reused for `keepalive_seconds`
    at most (less when the pod's answer said so)."""

    def __init__(self, *, limit: int, limit_per_key: int | None = None, keepalive_seconds: float = KEEPALIVE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        per_key = limit if limit_per_key is None else limit_per_key
        if not 1 <= per_key <= limit:
            raise ValueError(f"limit_per_key must be between 1 and limit ({limit}), got {limit_per_key}")
        if not keepalive_seconds >= 0:
            raise ValueError(f"keepalive_seconds must be at least 0, got {keepalive_seconds}")
        self.limit_per_key = per_key
        self.keepalive_seconds = keepalive_seconds
        self.clock = clock
        self._idle: dict[Key, collections.deque[http1conn.Connection]] = {}
        self._slots = asyncio.Semaphore(limit)
        self._open: set[http1conn.Connection] = set()
        self._per_key: dict[Key, int] = {}  # connections open or being opened, per pod
        self._key_waiters: dict[Key, collections.deque[asyncio.Future[None]]] = {}
        self._waiting = 0  # calls waiting for a place under the global limit
        self._swept = clock()

    async def call(self, *, key: Key, data: bytes, connect_timeout: float,
                   pool_timeout: float | None = None) -> http1conn.Connection:
        """Send `data` (a whole request, as `request_head` wrote it, then its body) to the pod
        `key` on an idle connection or a new one, and wait for the answer's head (the caller
        bounds the wait). The wait for a place under the limits is bounded by `pool_timeout`
        (None: `connect_timeout`), then PoolBusy; the connect by `connect_timeout`, then
        ConnectFailed. The caller releases the connection once it has read the answer, or on any
        error (then it is closed)."""
        wait = connect_timeout if pool_timeout is None else pool_timeout
        conn = self._take(key)
        reused = conn is not None
        if conn is None:
            conn = await self._place(key, wait, take_idle=True)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, connect_timeout)
        try:
            await conn.send(data)
        except http1conn.UpstreamFailed:
            conn.abort()
            if not (reused and conn.answered_nothing() and replayable(data)):
                raise
        except BaseException:
            conn.abort()
            raise
        else:
            return conn
        # The pod closed the reused connection as we wrote, and the call is idempotent: once
        # more, on a new connection (never a second idle one, which may be as old).
        await self._place(key, wait, take_idle=False)
        conn = await self._connect(key, connect_timeout)
        try:
            await conn.send(data)
        except BaseException:
            conn.abort()
            raise
        return conn

    def _take(self, key: Key) -> http1conn.Connection | None:
        now = self.clock()
        if now - self._swept >= SWEEP_SECONDS:
            self._sweep(now)
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be timed out by the pod
            # A pod's FIN may be read and the close not yet told (connection_lost comes a turn later).
            closing = conn.transport is None or conn.transport.is_closing()
            if not conn.closed and not closing and now < conn.expires:
                return conn
            conn.abort()
        return None

    async def _place(self, key: Key, pool_timeout: float, *, take_idle: bool) -> http1conn.Connection | None:
        """Reserve a place for a new connection to `key` under both limits (None); or, with
        `take_idle`, an idle connection to `key` that another call released meanwhile."""
        if self._per_key.get(key, 0) < self.limit_per_key and not self._slots.locked():
            self._reserve(key)  # free places: no wait, no timer
            await self._slots.acquire()  # returns at once: not locked
            return None
        try:
            async with asyncio.timeout(pool_timeout):
                while self._per_key.get(key, 0) >= self.limit_per_key:
                    if take_idle:
                        conn = self._take(key)
                        if conn is not None:
                            return conn
                    else:
                        idle = self._idle.get(key)
                        if idle:
                            idle[0].abort()  # a call that wants a new connection: an idle one makes way
                            continue
                    await self._wait_for_key(key)
                self._reserve(key)
                try:
                    if self._slots.locked():
                        self._close_oldest_idle()
                    self._waiting += 1
                    try:
                        await self._slots.acquire()
                    finally:
                        self._waiting -= 1
                except BaseException:
                    self._unreserve(key)
                    raise
        except TimeoutError as exc:
            _, ip, port = key
            raise PoolBusy(f"no connection to {ip}:{port} free within {pool_timeout} s "
                           f"({self.open_count()} open, {self._per_key.get(key, 0)} to this pod)") from exc
        return None

    async def _wait_for_key(self, key: Key) -> None:
        """Until a connection to `key` is released to the pool or closed."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._key_waiters.setdefault(key, collections.deque())
        waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self._wake_key(key)  # woken as it left: the place goes to the next one
            raise
        finally:
            if not fut.done():
                waiters.remove(fut)
            if not waiters and self._key_waiters.get(key) is waiters:
                del self._key_waiters[key]

    def _wake_key(self, key: Key) -> None:
        waiters = self._key_waiters.get(key)
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _reserve(self, key: Key) -> None:
        self._per_key[key] = self._per_key.get(key, 0) + 1

    def _unreserve(self, key: Key) -> None:
        left = self._per_key.get(key, 0) - 1
        if left > 0:
            self._per_key[key] = left
        else:
            self._per_key.pop(key, None)
        if key in self._key_waiters:
            self._wake_key(key)

    async def _connect(self, key: Key, connect_timeout: float) -> http1conn.Connection:
        """A new connection to `key`, in the place `_place` reserved."""
        _, ip, port = key
        made: list[http1conn.Connection] = []

        def connection() -> http1conn.Connection:
            made.append(http1conn.Connection(self, key))
            return made[0]
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(connection, ip, port)
        except BaseException as exc:
            if not (made and made[0].transport is not None):  # else its connection_lost frees the place
                self._slots.release()
                self._unreserve(key)
            if isinstance(exc, (OSError, TimeoutError)):
                raise ConnectFailed(f"connect to {ip}:{port}: {exc or type(exc).__name__}") from exc
            raise
        if conn.closed:
            raise ConnectFailed(f"connect to {ip}:{port}: closed by the pod at once")
        return conn

    def _close_oldest_idle(self) -> None:
        """At the limit, an idle connection to some pod gives its place to a call that needs one."""
        oldest: http1conn.Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest = idle[0]
        if oldest is not None:
            oldest.abort()

    def opened(self, conn: http1conn.Connection) -> None:
        """`conn` connected: it holds the place reserved for it until it is lost."""
        conn.counted = True
        self._open.add(conn)

    def put(self, conn: http1conn.Connection) -> None:
        key = conn.key
        keep = self.keepalive_seconds
        if conn.keepalive_hint is not None:
            keep = min(keep, conn.keepalive_hint - KEEPALIVE_HINT_MARGIN_SECONDS)
        idle = self._idle.get(key)
        waited_for = key in self._key_waiters  # a call waits for a connection to this very pod
        if keep <= 0 or (idle is not None and len(idle) >= IDLE_PER_POD) or (self._waiting and not waited_for):
            conn.abort()  # not to be kept, or its place goes to a call waiting under the global limit
            return
        now = self.clock()
        conn.idle_since, conn.expires = now, now + keep
        if idle is None:
            idle = self._idle[key] = collections.deque()
        idle.append(conn)
        if waited_for:
            self._wake_key(key)

    def lost(self, conn: http1conn.Connection) -> None:
        """`conn` is closed (by either side): its place is free. Called again, nothing more."""
        if conn.counted:
            conn.counted = False
            self._open.discard(conn)
            self._slots.release()
            self._unreserve(conn.key)
        idle = self._idle.get(conn.key)
        if idle is not None:
            try:
                idle.remove(conn)
            except ValueError:
                pass
            if not idle:
                del self._idle[conn.key]

    def _sweep(self, now: float) -> None:
        self._swept = now
        for key in list(self._idle):
            for conn in [c for c in self._idle.get(key, ()) if now >= c.expires]:
                conn.abort()

    def open_count(self) -> int:
        return len(self._open)

    def close(self) -> None:
        for conn in list(self._open):
            conn.abort()
