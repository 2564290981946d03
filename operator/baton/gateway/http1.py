"""Calls whose body is in hand, to a pod over HTTP/1.1: kept-alive connections pooled per pod
UID, the request written as one buffer, the answer parsed by llhttp (httptools). Does I/O
(sockets).

Why not aiohttp's client here: per call it builds a request object, a header multidict, a
payload and a writer task, and its answer waits on a stream reader; py-spy put that at about a
fifth of the gateway's CPU per small call (docs/performance.md). Most tool calls are small
JSON-RPC bodies that the gateway has read whole before it decides where they go, so they need
none of it. Streamed uploads, HEAD and WebSockets stay on aiohttp's client (baton.gateway.proxy).

A call is never sent twice: a connection is reused only when its previous answer was read in
full with keep-alive, and a pooled connection that the pod closed is dropped before anything is
written to it. Anything that goes wrong after the first byte was written is `UpstreamFailed`;
before it, `ConnectFailed` (the caller may decide again).

Bounds: at most `limit` connections open (at the limit an idle one is closed for a call that
needs one, else the call waits for one within its connect timeout), at most IDLE_PER_POD idle per pod, idle ones closed after `keepalive_seconds`, an
answer's buffered body paused at READ_HIGH bytes until the caller takes it.
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
# No Content-Length is sent for a body-less call of these (aiohttp's client does the same).
NO_LENGTH_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

Key = tuple[str, str, int]  # (pod uid, pod ip, port)


class ConnectFailed(Exception):
    """Nothing of the call reached the pod."""


class UpstreamFailed(Exception):
    """The call was written (maybe in part) and no complete answer came."""


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
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.until_close = False
        self.done = False
        self.keep_alive = False
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

    def data_received(self, data: bytes) -> None:
        if not self._active or self.done:
            # Bytes nobody asked for (an idle connection, or after a complete answer): the
            # stream is out of step, never reuse it.
            self._fail(UpstreamFailed("the pod sent bytes outside an answer"))
            return
        in_head = self._head is not None and not self._head.done()
        if in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            # HttpParserUpgrade (not an HttpParserError): a 101, failed already at its end.
            self._fail(UpstreamFailed(f"the pod's answer is not valid HTTP/1.1: {exc}"))
            return
        if in_head and self._head is not None and not self._head.done() and self._head_bytes > MAX_HEAD_BYTES:
            self._fail(UpstreamFailed(f"the pod's answer has no end of its head within {MAX_HEAD_BYTES} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.lost(self)
        if self._active and not self.done:
            if self.until_close and self._head is not None and self._head.done():
                self._complete(keep_alive=False)  # a body delimited by the close
            else:
                self._fail(UpstreamFailed(f"the pod closed the connection{': ' + str(exc) if exc else ''}"))

    # --- httptools callbacks
    def on_message_begin(self) -> None:
        if self.done:
            self._fail(UpstreamFailed("the pod sent a second answer to one call"))

    def on_status(self, status: bytes) -> None:
        self.reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > MAX_HEAD_BYTES:
            self._fail(UpstreamFailed(f"the pod's answer has more than {MAX_HEAD_BYTES} bytes of headers"))
            return
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:
            return  # informational (and 101, refused at its end): the answer follows
        names = {k.lower() for k, _ in self.headers}
        chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in self.headers)
        self.until_close = "content-length" not in names and not chunked and self.status not in (204, 304)
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered >= READ_HIGH and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            if self.status == 101:
                self._fail(UpstreamFailed("the pod switched protocols on a call that asked for no upgrade"))
                return
            self.status, self.reason, self.headers = 0, "", []
            return
        self._complete(keep_alive=self._parser.should_keep_alive())

    # --- the call's side
    def _complete(self, *, keep_alive: bool) -> None:
        self.done = True
        self.keep_alive = keep_alive
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()  # retrieved: the caller may have gone
        self._wake()
        self.abort()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def send(self, data: bytes) -> asyncio.Future[None]:
        """Write the call; the future resolves once the answer's head has arrived."""
        assert self.transport is not None
        self._reset()
        self._active = True
        self._head = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._head

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
    def __init__(self, *, limit: int, keepalive_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle: dict[Key, collections.deque[Connection]] = {}
        self._slots = asyncio.Semaphore(limit)
        self._open: set[Connection] = set()
        self._waiting = 0  # calls waiting for a free connection
        self.keepalive_seconds = keepalive_seconds
        self.clock = clock
        self._swept = clock()

    async def call(self, *, key: Key, data: bytes, connect_timeout: float) -> Connection:
        """Send `data` (a whole request) to the pod `key` on an idle connection or a new one,
        and wait for the answer's head (the caller bounds the wait). The caller releases the
        connection once it has read the answer, or on any error (then it is closed)."""
        conn = self._take(key)
        if conn is None:
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
            if not conn.closed and not closing and now - conn.idle_since < self.keepalive_seconds:
                return conn
            conn.abort()
        return None

    async def _connect(self, key: Key, connect_timeout: float) -> Connection:
        _, ip, port = key
        try:
            async with asyncio.timeout(connect_timeout):
                if self._slots.locked():
                    self._close_oldest_idle()
                self._waiting += 1
                try:
                    await self._slots.acquire()
                finally:
                    self._waiting -= 1
                try:
                    _, conn = await asyncio.get_running_loop().create_connection(lambda: Connection(self, key), ip, port)
                except BaseException:
                    self._slots.release()
                    raise
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"connect to {ip}:{port}: {exc or type(exc).__name__}") from exc
        self._open.add(conn)
        return conn

    def _close_oldest_idle(self) -> None:
        """At the limit, an idle connection to some pod gives its place to a call that needs one."""
        oldest: Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest = idle[0]
        if oldest is not None:
            oldest.abort()

    def put(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.key, collections.deque())
        if len(idle) >= IDLE_PER_POD or self._waiting:
            conn.abort()
            return
        conn.idle_since = self.clock()
        idle.append(conn)

    def lost(self, conn: Connection) -> None:
        if conn in self._open:
            self._open.discard(conn)
            self._slots.release()
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
            for conn in [c for c in self._idle.get(key, ()) if now - c.idle_since >= self.keepalive_seconds]:
                conn.abort()

    def open_count(self) -> int:
        return len(self._open)

    def close(self) -> None:
        for conn in list(self._open):
            conn.abort()
