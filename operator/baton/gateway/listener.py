"""The calls listener: aiohttp's server behind bounds on connections and on how long a client
may take to send its request head. Does I/O (a listening socket).

- Connections: at most `max_connections` open in all and `max_connections_per_client` from one
  client address; past either, the connection is answered at once with 503 Overloaded
  (Baton-Reason, Retry-After, Connection: close) and closed: nothing is parsed, nothing waits.
- The first head: aiohttp's server has no header-read timeout, so a client that sends its
  request line and headers a byte at a time (slowloris) would hold a connection and a parser
  task as long as it liked. Each connection must complete its first request head (request line
  and headers, up to the blank line) within `header_seconds` of opening, or it is closed. Blank
  lines before the request line (which llhttp skips) do not count as a head. Later requests on a
  kept-alive connection are bounded by aiohttp's keep-alive timeout, which also runs while a
  next head is incomplete.
- A client that leaves: its handler is cancelled (`handler_cancellation`), so a held call is
  never forwarded and a forwarded one is cut upstream (baton.gateway.proxy).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from baton.gateway import gwmetrics

log = logging.getLogger("baton.gateway")

# aiohttp's keep-alive bound (its default): an idle kept-alive connection, or one whose next
# request head is still incomplete, is closed after this long.
KEEPALIVE_SECONDS = 75.0
# A request body is read ahead of the handler up to twice this per connection, then reading
# pauses (aiohttp's default, 256 KiB, let 400 connections sending 1 MiB bodies to a held runtime
# take some 200 MiB outside the ledger: docs/performance.md, "The flood").
READ_BUFSIZE = 16 * 1024


class Connections:
    """Open client connections, in all and per client address."""

    def __init__(self, *, max_total: int, max_per_client: int) -> None:
        self.max_total, self.max_per_client = max_total, max_per_client
        self.total = 0
        self.by_client: collections.Counter[str] = collections.Counter()

    def admit(self, client: str) -> str | None:
        """Count one more connection from `client`; the bound reached ('total', 'per_client') if none."""
        if self.total >= self.max_total:
            return "total"
        if self.by_client[client] >= self.max_per_client:
            return "per_client"
        self.total += 1
        self.by_client[client] += 1
        gwmetrics.CONNECTIONS.inc()
        return None

    def leave(self, client: str) -> None:
        self.total -= 1
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]
        gwmetrics.CONNECTIONS.dec()


def _overloaded_answer(bound: str, limit: int) -> bytes:
    what = "open connections at this gateway replica" if bound == "total" else "open connections from this client address"
    body = json.dumps({"error": f"more than {limit} {what}", "reason": "Overloaded"}).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nBaton-Reason: Overloaded\r\nRetry-After: 1\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n\r\n" + body)


class HeaderDeadline(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: counts it (or answers 503 and closes it past
    a bound), passes everything through, and closes the connection if no complete request head
    (ended by a blank line) arrived in time."""

    def __init__(self, inner: asyncio.Protocol, *, seconds: float, on_cut: Callable[[], None],
                 connections: Connections | None = None) -> None:
        self.inner = inner
        self.seconds = seconds
        self.on_cut = on_cut
        self.connections = connections
        self.client: str | None = None  # counted in `connections` under this address
        self.refused = False
        self.transport: asyncio.Transport | None = None
        self.head_started = False  # a byte other than CR or LF arrived
        self.head_done = False
        self._tail = b""  # the last bytes seen, so a blank line split across reads is found
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.connections is not None:
            peer = transport.get_extra_info("peername")
            client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            bound = self.connections.admit(client)
            if bound is not None:
                self.refused = True
                gwmetrics.CONNECTIONS_REFUSED.labels(bound=bound).inc()
                limit = self.connections.max_total if bound == "total" else self.connections.max_per_client
                transport.write(_overloaded_answer(bound, limit))  # type: ignore[attr-defined]
                transport.close()
                return
            self.client = client
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
        if self.refused:
            return
        if not self.head_done:
            seen = data
            if not self.head_started:
                # llhttp skips blank lines before a request line: they start no head.
                seen = data.lstrip(b"\r\n")
                self.head_started = bool(seen)
            seen = self._tail + seen
            if b"\r\n\r\n" in seen or b"\n\n" in seen:
                self.head_done = True
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            elif self.head_started:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.refused:
            return None
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.refused:
            return
        if self.connections is not None and self.client is not None:
            self.connections.leave(self.client)
            self.client = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()


def calls_server(handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]) -> web.Server:
    """aiohttp's low-level server: every request goes to `handler`. The gateway routes by Host,
    never by path, so an Application's router and middleware chain would only cost (about 3 %
    of its CPU per call)."""
    # handler_cancellation: a client that leaves cancels its call (never forwarded if held; cut
    # upstream if forwarded), instead of the call running on for nobody.
    return web.Server(handler, access_log=None, keepalive_timeout=KEEPALIVE_SECONDS, handler_cancellation=True,
                      read_bufsize=READ_BUFSIZE)


class CallsListener:
    """The calls listener: aiohttp's low-level server whose connections each pass a HeaderDeadline."""

    def __init__(self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], bind: tuple[str, int], *,
                 header_seconds: float, on_cut: Callable[[], None] = lambda: None, shutdown_timeout: float = 1.0,
                 max_connections: int = 4096, max_connections_per_client: int = 1024) -> None:
        self.runner = web.ServerRunner(calls_server(handler), shutdown_timeout=shutdown_timeout)
        self.connections = Connections(max_total=max_connections, max_per_client=max_connections_per_client)
        self.bind = bind
        self.header_seconds = header_seconds
        self.on_cut = on_cut
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        await self.runner.setup()
        aiohttp_server: Any = self.runner.server
        assert aiohttp_server is not None

        def factory() -> asyncio.Protocol:
            return HeaderDeadline(aiohttp_server(), seconds=self.header_seconds, on_cut=self.on_cut,
                                  connections=self.connections)

        self._server = await asyncio.get_running_loop().create_server(
            factory, self.bind[0], self.bind[1], reuse_address=True, backlog=1024)

    def open_connections(self) -> int:
        return self.connections.total

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
