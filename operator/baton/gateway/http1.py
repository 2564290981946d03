"""Calls whose body is in hand, to a pod over HTTP/1.1: kept-alive connections pooled per pod
UID, the request written as one buffer, the answer parsed by llhttp (httptools). Does I/O
(sockets).

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
sent); `UpstreamFailed` for anything after the first byte was written.

Bounds: at most `limit` connections open, and at most `limit_per_key` to one pod, so that one
pod's streams or slow calls cannot take every place. At the global limit an idle connection to
another pod is closed for a call that needs one; else the call waits, within its pool timeout.
At most IDLE_PER_POD idle per pod; an answer's buffered body is paused at READ_HIGH bytes until
the caller takes it.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable

import httptools

IDLE_PER_POD = 64
# An answer's status line and headers, at most (aiohttp's client allows 8190 bytes per line):
# llhttp keeps no bound of its own, and httptools gathers a header whole before it hands it over.
MAX_HEAD_BYTES = 64 * 1024
READ_HIGH = 256 * 1024
READ_LOW = 64 * 1024
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

Key = tuple[str, str, int]  # (pod uid, pod ip, port)


class ConnectFailed(Exception):
    """Nothing of the call reached the pod: it refused the connection or did not answer the
    connect in time."""


class PoolBusy(Exception):
    """Nothing was sent and the pod was not tried: no place for a connection (to any pod, or to
    this one) freed within the pool timeout. The gateway is overloaded, not the pod."""


class UpstreamFailed(Exception):
    """The call was written (maybe in part) and no complete answer came."""


def replayable(data: bytes) -> bool:
    """Whether the request `data` (as `request_head` wrote it, then its body) may be written
    twice: an idempotent method, or an Idempotency-Key field. Read only when a retry is due."""
    end = data.find(b"\r\n\r\n")
    head = data[:end + 2].lower() if end >= 0 else b""
    return data[:data.find(b" ")] in IDEMPOTENT_METHODS or any(name in head for name in IDEMPOTENCY_HEADERS)


def keepalive_hint(value: str) -> float | None:
    """The `timeout=N` of a Keep-Alive field (`timeout=5, max=100`), in seconds; None when absent
    or not a number."""
    for part in value.split(","):
        name, _, number = part.partition("=")
        if name.strip().lower() == "timeout":
            try:
                seconds = float(number.strip())
            except ValueError:
                return None
            return seconds if seconds >= 0 else None  # NaN is not >= 0
    return None


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


class Connection(asyncio.Protocol):
    """One connection to a pod, answering one call at a time."""

    def __init__(self, pool: Pool, key: Key) -> None:
        self.pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.counted = False  # holds a place in the pool's bounds (from connection_made until lost)
        self.idle_since = 0.0
        self.expires = 0.0  # while idle: not reused from then on
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.until_close = False
        self.done = False
        self.keep_alive = False
        self.keepalive_hint: float | None = None  # the answer's Keep-Alive: timeout=N
        self.error: BaseException | None = None
        self._head: asyncio.Future[None] | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._active = False
        self._head_bytes = 0  # bytes received before the answer's head was whole
        self._header_bytes = 0

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.pool.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.done:
            # Bytes after a whole answer: the answer stands (the pod did the work), but the
            # stream is out of step, so the connection is never reused.
            self._stray()
            return
        if not self._active:
            # Bytes nobody asked for, on an idle connection.
            self._fail(UpstreamFailed("the pod sent bytes outside an answer"))
            return
        in_head = self._head is not None and not self._head.done()
        if in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.done:
                self._stray()  # the answer was whole before the bytes that broke the parse
                return
            # HttpParserUpgrade (not an HttpParserError): a 101, failed already at its end.
            self._fail(UpstreamFailed(f"the pod's answer is not valid HTTP/1.1: {exc}"))
            return
        if in_head and self._head is not None and not self._head.done() and self._head_bytes > MAX_HEAD_BYTES:
            self._fail(UpstreamFailed(f"the pod's answer has no end of its head within {MAX_HEAD_BYTES} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        by_us = self.closed  # abort() was called: a close-delimited body is not whole then
        self.closed = True
        self.pool.lost(self)
        if self._active and not self.done:
            if self.until_close and self._head is not None and self._head.done() and exc is None and not by_us:
                self._complete(keep_alive=False)  # a body delimited by the pod's close
            else:
                # A reset (exc) is no end of a body: the answer is cut short.
                self._fail(UpstreamFailed(f"the pod closed the connection{': ' + str(exc) if exc else ''}"))

    # --- httptools callbacks
    # After a whole answer, what follows in the same bytes (a second answer) is dropped, and the
    # connection closed: the callbacks below ignore it.
    def on_message_begin(self) -> None:
        if self.done:
            self._stray()

    def on_status(self, status: bytes) -> None:
        if not self.done:
            self.reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.done:
            return
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > MAX_HEAD_BYTES:
            self._fail(UpstreamFailed(f"the pod's answer has more than {MAX_HEAD_BYTES} bytes of headers"))
            return
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))
        if len(name) == 10 and name.lower() == b"keep-alive":
            self.keepalive_hint = keepalive_hint(value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        if self.done:
            return
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:
            return  # informational (and 101, refused at its end): the answer follows
        names = {k.lower() for k, _ in self.headers}
        chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in self.headers)
        self.until_close = "content-length" not in names and not chunked and self.status not in (204, 304)
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.done:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered >= READ_HIGH and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.done:
            return
        if 100 <= self.status < 200:
            if self.status == 101:
                self._fail(UpstreamFailed("the pod switched protocols on a call that asked for no upgrade"))
                return
            self.status, self.reason, self.headers, self.keepalive_hint = 0, "", [], None
            return
        self._complete(keep_alive=self._parser.should_keep_alive())

    # --- the call's side
    def _complete(self, *, keep_alive: bool) -> None:
        self.done = True
        self.keep_alive = keep_alive
        self._wake()

    def _stray(self) -> None:
        self.keep_alive = False
        self.abort()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()  # retrieved: the caller may have gone
        self._wake()
        self.abort()

    def cut(self) -> None:
        """End the answer from our side (a stream ended at the seal): a read waiting on it
        raises UpstreamFailed, and the connection is closed."""
        self._fail(UpstreamFailed("ended by the gateway"))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def abort(self) -> None:
        """Closed at once, its place in the pool's bounds freed now (not a loop turn later)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self.pool.lost(self)

    def send(self, data: bytes) -> asyncio.Future[None]:
        """Write the call; the future resolves once the answer's head has arrived."""
        assert self.transport is not None
        self._reset()
        self._active = True
        self._head = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._head

    def answered_nothing(self) -> bool:
        """No byte of an answer came to the call written last."""
        return self._head_bytes == 0 and self.status == 0

    def arrived(self) -> bool:
        return self.done or self.error is not None

    async def read_chunk(self) -> bytes:
        """The next part of the answer's body; b"" at its end."""
        while not self._chunks:
            if self.error is not None:
                raise self.error
            if self.done:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= READ_LOW and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    async def read_whole(self) -> bytes:
        parts: list[bytes] = []
        while True:
            chunk = await self.read_chunk()
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    def content_length(self) -> int | None:
        for k, v in self.headers:
            if k.lower() == "content-length":
                return int(v) if v.strip().isdigit() else None
        return None

    def release(self) -> None:
        """Back to the pool if the answer was read in full with keep-alive, else closed."""
        if not self._active:
            return  # released already
        reusable = self.done and self.keep_alive and self.error is None and not self._chunks and not self.closed
        self._active = False
        if reusable:
            self.pool.put(self)
        else:
            self.abort()


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
        self._idle: dict[Key, collections.deque[Connection]] = {}
        self._slots = asyncio.Semaphore(limit)
        self._open: set[Connection] = set()
        self._per_key: dict[Key, int] = {}  # connections open or being opened, per pod
        self._key_waiters: dict[Key, collections.deque[asyncio.Future[None]]] = {}
        self._waiting = 0  # calls waiting for a place under the global limit
        self._swept = clock()

    async def call(self, *, key: Key, data: bytes, connect_timeout: float, pool_timeout: float | None = None) -> Connection:
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
        except UpstreamFailed:
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

    def _take(self, key: Key) -> Connection | None:
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

    async def _place(self, key: Key, pool_timeout: float, *, take_idle: bool) -> Connection | None:
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

    async def _connect(self, key: Key, connect_timeout: float) -> Connection:
        """A new connection to `key`, in the place `_place` reserved."""
        _, ip, port = key
        made: list[Connection] = []

        def connection() -> Connection:
            made.append(Connection(self, key))
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
        oldest: Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest = idle[0]
        if oldest is not None:
            oldest.abort()

    def opened(self, conn: Connection) -> None:
        """`conn` connected: it holds the place reserved for it until it is lost."""
        conn.counted = True
        self._open.add(conn)

    def put(self, conn: Connection) -> None:
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

    def lost(self, conn: Connection) -> None:
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
