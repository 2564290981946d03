"""The calls listener: aiohttp's server behind a bound on how long a client may take to send its
request head. Does I/O (a listening socket).

aiohttp's server has no header-read timeout: a client that opens connections and sends its
request line and headers a byte at a time (slowloris) holds each connection, and a parser
task, for as long as it likes. Each connection here must complete its first request head
(request line and headers, up to the blank line) within `header_seconds` of opening, or it is
closed. Later requests on a kept-alive connection are bounded by aiohttp's keep-alive timeout,
which also runs while a next head is incomplete.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

log = logging.getLogger("baton.gateway")

# aiohttp's keep-alive bound (its default): an idle kept-alive connection, or one whose next
# request head is still incomplete, is closed after this long.
KEEPALIVE_SECONDS = 75.0


class HeaderDeadline(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: passes everything through, and closes the
    connection if no complete request head (ended by a blank line) arrived in time."""

    def __init__(self, inner: asyncio.Protocol, *, seconds: float, on_cut: Callable[[], None]) -> None:
        self.inner = inner
        self.seconds = seconds
        self.on_cut = on_cut
        self.transport: asyncio.Transport | None = None
        self.head_done = False
        self._tail = b""  # the last bytes seen, so a blank line split across reads is found
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._timer = asyncio.get_running_loop().call_later(self.seconds, self._expire)
        self.inner.connection_made(transport)

    def _expire(self) -> None:
        self._timer = None
        if not self.head_done and self.transport is not None and not self.transport.is_closing():
            log.info("closing a connection from %s: no complete request head within %ss",
                     self.transport.get_extra_info("peername"), self.seconds)
            self.on_cut()
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.head_done:
            seen = self._tail + data
            if b"\r\n\r\n" in seen or b"\n\n" in seen:
                self.head_done = True
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def calls_server(handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]) -> web.Server:
    """aiohttp's low-level server: every request goes to `handler`. The gateway routes by Host,
    never by path, so an Application's router and middleware chain would only cost (about 3 %
    of its CPU per call)."""
    return web.Server(handler, access_log=None, keepalive_timeout=KEEPALIVE_SECONDS)


class CallsListener:
    """The calls listener: aiohttp's low-level server whose connections each pass a HeaderDeadline."""

    def __init__(self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], bind: tuple[str, int], *,
                 header_seconds: float, on_cut: Callable[[], None] = lambda: None, shutdown_timeout: float = 1.0) -> None:
        self.runner = web.ServerRunner(calls_server(handler), shutdown_timeout=shutdown_timeout)
        self.bind = bind
        self.header_seconds = header_seconds
        self.on_cut = on_cut
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        await self.runner.setup()
        aiohttp_server: Any = self.runner.server
        assert aiohttp_server is not None

        def factory() -> asyncio.Protocol:
            return HeaderDeadline(aiohttp_server(), seconds=self.header_seconds, on_cut=self.on_cut)

        self._server = await asyncio.get_running_loop().create_server(
            factory, self.bind[0], self.bind[1], reuse_address=True, backlog=1024)

    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """No new connections (the ones open go on)."""
        if self._server is not None:
            # Not wait_closed(): since Python 3.12 it also waits for every open connection.
            self._server.close()
            self._server = None

    async def cleanup(self) -> None:
        await self.stop()
        await self.runner.cleanup()
