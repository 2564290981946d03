"""One kept-alive HTTP/1.1 connection to a pod, answering one call at a time: the request written
as one buffer, the answer parsed by llhttp (httptools), its body handed to the caller in parts.
Does I/O (a socket, as an asyncio protocol). Its pool (``baton.gateway.http1``) opens it, keeps it
idle between calls and decides when it is reused; the connection tells the pool when it opened,
when it is lost and when it is released whole.

A connection is reusable only when its previous answer was read in full with keep-alive; bytes
outside an answer, an answer that is not valid HTTP/1.1, or a head over MAX_HEAD_BYTES end it.
An answer's buffered body is paused at READ_HIGH bytes until the caller takes it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Protocol

import httptools

# An answer's status line and headers, at most (aiohttp's client allows 8190 bytes per line):
# llhttp keeps no bound of its own, and httptools gathers a header whole before it hands it over.
MAX_HEAD_BYTES = 64 * 1024
READ_HIGH = 256 * 1024
READ_LOW = 64 * 1024

Key = tuple[str, str, int]  # (pod uid, pod ip, port)


class UpstreamFailed(Exception):
    """The call was written (maybe in part) and no complete answer came."""


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


class Owner(Protocol):
    """What a connection tells its pool (baton.gateway.http1.Pool)."""

    def opened(self, conn: Connection) -> None: ...

    def lost(self, conn: Connection) -> None: ...

    def put(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One connection to a pod, answering one call at a time."""

    def __init__(self, pool: Owner, key: Key) -> None:
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
