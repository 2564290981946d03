"""Forwarding one decided call to the serving pod and streaming the answer back. Does I/O (the
two upstream clients: the pooled HTTP/1.1 client for calls whose body is in hand, aiohttp's for
streamed uploads, HEAD and WebSockets).

A call counts in flight on its pod from the first line of `forward` (no await since the
decision: a seal answered after the decision counts it) until its answer is sent in full, the
call fails, or its client leaves (aiohttp cancels the handler; the connection to the pod is then
closed, never pooled, so the pod sees the call end). Only the serving pod's IP from the API is
dialled, at the port its Service port maps to.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from typing import Any, AsyncIterator, Callable, Mapping

import aiohttp
import yarl
from aiohttp import web

from baton.gateway import budget as budget_mod
from baton.gateway import listing
from baton.gateway import gwmetrics, http1, http1conn, hygiene, refusals, route, sessions
from baton.gateway import state as state_mod
from baton.gateway import upstream as upstream_mod
from baton.gateway import websocket as ws_mod
from baton.model import names
from baton.settings import GatewaySettings

log = logging.getLogger("baton.gateway")
SESSION_HEADER = "Mcp-Session-Id"
SESSION_HEADER_LOWER = SESSION_HEADER.lower()
# Dropped from a pod's answer besides the hop-by-hop fields: Baton-Reason is the gateway's word.
POD_DROP = frozenset({names.HEADER_REASON.lower(), names.HEADER_HELD_MS.lower()})
# Bodies up to this size (by Content-Length) are read whole and sent as bytes, both ways: most
# tool calls are small, and a byte string costs far less per call than a streamed body (an async
# generator upstream, a chunk loop back). Larger or unsized bodies (SSE, uploads) stream.
SMALL_BODY_BYTES = 64 * 1024
# Set by the gateway on every call it forwards: the client's own would let it pose as another
# address to a tool that trusts the first value.
FORWARDED_FOR = frozenset({"x-forwarded-for", "forwarded"})
# A body sent as bytes: aiohttp sets its Content-Length from the bytes. Expect is the gateway's
# to answer (baton.gateway.proxy), on every path alike.
SET_BY_CLIENT = frozenset({"content-length", "expect"}) | FORWARDED_FOR
STREAMED_DROP = frozenset({"expect"}) | FORWARDED_FOR
# A call written whole sets its own Content-Length, and its body goes with its head: a pod that
# asked for 100-continue would wait for nothing.
IN_HAND_DROP = frozenset({"content-length", "expect"}) | FORWARDED_FOR
# An idle connection to a pod is kept below common servers' keep-alive (uvicorn, hypercorn and
# Node close after 5 s): a call written as the pod closes would fail after the pod saw nothing.
KEEPALIVE_SECONDS = 2.0
# The longest a call waits for a place under the upstream connection limits, then 503 Overloaded
# (the gateway is at its bound: not the pod's failure, never reported as Transitioning).
UPSTREAM_WAIT_SECONDS = 1.0
# aiohttp's connect failures: counted as such even when a streamed upload had begun (then the
# call is not decided again: its first chunk was taken).
AIOHTTP_CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class Upstreams:
    """The clients that reach pods, and the settings and state the forwarding reads."""

    def __init__(self, *, settings: GatewaySettings, state: state_mod.State) -> None:
        self.settings, self.state = settings, state
        self.session: aiohttp.ClientSession | None = None
        self.pool: http1.Pool | None = None
        self.resolver = upstream_mod.PodResolver()
        # A call whose body is in hand (or absent) is bounded by one asyncio.timeout around the
        # request and another around the answer, instead of aiohttp's read timer, which it
        # re-arms on every chunk received (about 6 % of the gateway's CPU per call). Streamed
        # uploads keep the session's read timer: their upload may take longer than one idle span.
        # `connect` bounds the wait for a place in aiohttp's pool and the connect together.
        connect = settings.connect_timeout_seconds + UPSTREAM_WAIT_SECONDS
        self.read_timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=settings.connect_timeout_seconds,
                                                  sock_read=settings.idle_timeout_seconds)
        self.unread_timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=settings.connect_timeout_seconds,
                                                    sock_read=None)
        # Calls on aiohttp's client now, per pod UID: counted here so that one at the per-pod
        # bound is refused at once (aiohttp's own wait cannot be told from a slow connect).
        self.streamed: collections.Counter[str] = collections.Counter()
        # The runtime as the views show it (the proxy sets it): whether an answer's ttlMs is
        # capped (baton.gateway.listing.ttl_capped). None: never capped.
        self.runtime_of: Callable[[str, str], Mapping[str, Any] | None] = lambda _namespace, _name: None

    async def start(self) -> None:
        s = self.settings
        self.pool = http1.Pool(limit=s.max_upstream_connections, limit_per_key=s.max_upstream_per_pod,
                               keepalive_seconds=KEEPALIVE_SECONDS)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=s.max_upstream_connections, limit_per_host=s.max_upstream_per_pod,
                                           keepalive_timeout=KEEPALIVE_SECONDS, resolver=self.resolver, use_dns_cache=False),
            timeout=self.read_timeout,
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            # Set once here, not per request: the client adds none of these of its own.
            skip_auto_headers=("Content-Type", "User-Agent", "Accept", "Accept-Encoding"))

    async def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.session is not None:
            await self.session.close()

    def upstream_failed(self, request: web.BaseRequest, target: route.Target, d: route.Forward, body: bytes | None,
                        exc: BaseException) -> web.Response:
        log.info("call to %s/%s g%s failed: %s", *target_key(target), d.generation, exc,
                 extra={"runtime": "/".join(target_key(target))})
        return refusals.refusal(route.Refuse(route.Reason.UPSTREAM_ERROR, 0,
                                             f"the pod of generation {d.generation} failed: {type(exc).__name__}",
                                             d.generation), target=target, body=body)


async def forward(up: Upstreams, request: web.BaseRequest, d: route.Forward, *, target: route.Target,
                  body: bytes | None, websocket: bool, headers: list[tuple[str, str]], outcome: str,
                  held_since: float | None, ticket: budget_mod.Ticket,
                  binding: sessions.Binding | None = None) -> web.StreamResponse | None:
    """Forward to `d`; None when the pod refused the connection before anything was sent (the
    caller decides again). `binding`: the session ids of the answer (baton.gateway.sessions)."""
    in_hand = body is not None or not request.body_exists  # else a streamed upload
    on_aiohttp = websocket or not in_hand or request.method == "HEAD"
    if on_aiohttp:
        if up.streamed[d.uid] >= up.settings.max_upstream_per_pod:
            gwmetrics.UPSTREAM_ERRORS.labels(kind="pool").inc()
            return refusals.refusal(route.Refuse(
                route.Reason.OVERLOADED, 1,
                f"{up.settings.max_upstream_per_pod} streamed calls and WebSockets are open to this pod (the gateway's bound per pod)"),
                target=target, body=body)
        up.streamed[d.uid] += 1
    up.state.begin(d.uid)
    ticket.forwarded = True
    # A held call's wait, up to now (its answer says it: Baton-Held-Ms).
    held_ms = refusals.held_ms(held_since) if held_since is not None else None
    try:
        if websocket:
            return await ws_mod.relay(up, request, d, target=target, headers=headers, outcome=outcome, held_ms=held_ms)
        try:
            if not on_aiohttp:
                answer: upstream_mod.Answer = await _send_in_hand(up, request, d, body=body, headers=headers)
            else:
                answer = await _send_streamed(up, request, d, body=body, headers=headers, in_hand=in_hand)
        except http1.PoolBusy as exc:
            # Nothing sent, the pod not tried: this replica is at its upstream bound.
            gwmetrics.UPSTREAM_ERRORS.labels(kind="pool").inc()
            return refusals.refusal(route.Refuse(route.Reason.OVERLOADED, 1, f"no connection to the pod free: {exc}"),
                                    target=target, body=body)
        except http1.ConnectFailed as exc:
            # Not connected: nothing reached the pod, the call may be decided again.
            gwmetrics.UPSTREAM_ERRORS.labels(kind="connect").inc()
            # debug: a held call tries again up to five times a second.
            log.debug("connect to %s:%s (%s/%s g%s) failed: %s", d.ip, d.port, *target_key(target), d.generation, exc,
                     extra={"runtime": "/".join(target_key(target))})
            return None
        except (http1conn.UpstreamFailed, aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            # Sent (maybe in part), no answer in time or the pod failed: never sent again, a
            # tool call need not be idempotent (http1 alone writes an idempotent call once more,
            # when a reused connection closed as it was written and no byte came back).
            gwmetrics.UPSTREAM_ERRORS.labels(kind="connect" if isinstance(exc, AIOHTTP_CONNECT_ERRORS) else "request").inc()
            return up.upstream_failed(request, target, d, body, exc)
        try:
            if held_since is not None:
                log.debug("held call forwarded to g%s after %.2fs", d.generation, time.monotonic() - held_since,
                          extra={"runtime": "/".join(target_key(target))})
            size = answer.content_length()
            # (An answer with a Content-Length has no transfer coding to look at: most do.)
            coding = "chunked" if size is not None else next(
                (v for k, v in answer.headers if k.lower() == "transfer-encoding"), "chunked")
            if coding.strip().lower() != "chunked":
                # Transfer-Encoding is per hop and dropped here: a coding besides chunked (gzip)
                # would reach the client undone and unnamed. Rare enough to refuse, never to pass on.
                gwmetrics.UPSTREAM_ERRORS.labels(kind="request").inc()
                return up.upstream_failed(request, target, d, None,
                                          http1conn.UpstreamFailed(f"the transfer coding {coding!r}"))
            # Baton-Reason is the gateway's word alone: a pod's own is not passed on.
            back = hygiene.end_to_end(answer.headers, also_drop=POD_DROP)
            if held_ms is not None:
                back.append((names.HEADER_HELD_MS, held_ms))
            sid = next((v for k, v in answer.headers if k.lower() == SESSION_HEADER_LOWER), None)
            if sid:
                client_sid = binding.answer_id(sid, namespace=target.namespace, runtime=target.runtime,
                                               uid=d.uid) if binding is not None else None
                if client_sid is not None:
                    back = [(k, client_sid if k.lower() == SESSION_HEADER_LOWER else v) for k, v in back]
                    if binding is not None and binding.initialize is not None:
                        up.state.session_seen(sessions.fingerprint(client_sid), d.uid)
                elif body is not None and is_initialize(body):
                    # Only the answer to an initialize that went through here issues a session: a pod
                    # that stamps ids on other answers cannot claim (or evict) another's sessions.
                    up.state.session_issued(target_key(target), sid, d.uid)
                    if binding is not None and binding.initialize is not None:
                        gwmetrics.SESSIONS_REBOUND.labels(outcome="not_sealed").inc()
            if size is not None and size <= SMALL_BODY_BYTES and request.method != "HEAD":
                # Counted once read whole: a small answer that failed is an UpstreamError
                # refusal only, never also "forwarded".
                return await _answer_whole(up, request, answer, back, d, target, outcome=outcome)
            gwmetrics.calls(outcome, "").inc()  # its head is on its way to the client
            return await _answer_streamed(up, request, answer, back, d, target)
        finally:
            answer.release()
    finally:
        up.state.end(d.uid)
        if on_aiohttp:
            up.streamed[d.uid] -= 1
            if up.streamed[d.uid] <= 0:
                del up.streamed[d.uid]


async def _send_in_hand(up: Upstreams, request: web.BaseRequest, d: route.Forward, *, body: bytes | None,
                        headers: list[tuple[str, str]]) -> http1conn.Connection:
    """A call whose body is in hand (or absent): written whole on a pooled connection."""
    assert up.pool is not None
    up_headers = hygiene.end_to_end(headers, also_drop=IN_HAND_DROP)
    up_headers.append(("X-Forwarded-For", request.remote or ""))
    head = http1.request_head(method=request.method, target=request.raw_path, headers=up_headers,
                              body_size=len(body) if body is not None else None)
    async with asyncio.timeout(up.settings.idle_timeout_seconds):
        return await up.pool.call(key=(d.uid, d.ip, d.port), data=head + body if body else head,
                                  connect_timeout=up.settings.connect_timeout_seconds, pool_timeout=UPSTREAM_WAIT_SECONDS)


async def _stream_body(up: Upstreams, request: web.BaseRequest, started: list[bool]) -> AsyncIterator[bytes]:
    while True:
        async with asyncio.timeout(up.settings.idle_timeout_seconds):
            chunk = await request.content.readany()
        if not chunk:
            return
        started[0] = True
        yield chunk


async def _send_streamed(up: Upstreams, request: web.BaseRequest, d: route.Forward, *, body: bytes | None,
                         headers: list[tuple[str, str]], in_hand: bool) -> upstream_mod.Answer:
    """A streamed upload (or HEAD): aiohttp's client, its read timer re-armed per chunk."""
    assert up.session is not None
    up_headers = hygiene.end_to_end(headers, also_drop=SET_BY_CLIENT if body is not None else STREAMED_DROP)
    up_headers.append(("X-Forwarded-For", request.remote or ""))
    started = [False]
    data: Any = body if body is not None else (_stream_body(up, request, started) if request.body_exists else None)
    # encoded: the target goes as the client sent it (yarl would normalise dot segments and
    # percent-encoding, and the whole-body path sends it verbatim).
    url = yarl.URL(f"http://{up.resolver.name(d.uid, d.ip)}:{d.port}{request.raw_path}", encoded=True)
    try:
        async with asyncio.timeout(up.settings.idle_timeout_seconds if in_hand else None):
            response = await up.session.request(
                request.method, url, headers=upstream_mod.multidict_of(up_headers), data=data,
                allow_redirects=False, timeout=up.unread_timeout if in_hand else up.read_timeout)
    except AIOHTTP_CONNECT_ERRORS as exc:
        if started[0]:
            raise  # an upload begun is never sent again
        raise http1.ConnectFailed(str(exc)) from exc
    return upstream_mod.AiohttpAnswer(response)


async def _answer_streamed(up: Upstreams, request: web.BaseRequest, answer: upstream_mod.Answer,
                           back: list[tuple[str, str]], d: route.Forward, target: route.Target) -> web.StreamResponse:
    idle = up.settings.idle_timeout_seconds
    resp = web.StreamResponse(status=answer.status, reason=answer.reason or None)
    for k, v in back:
        resp.headers.add(k, v)
    resp.headers[names.HEADER_GENERATION] = str(d.generation)
    await resp.prepare(request)
    media = listing.media_type(answer.headers)
    # A subscriptions/listen answer (MCP 2026-07-28) is the client's event stream, no call: ended
    # at the seal the specification's way, between two events (baton.gateway.listing).
    listen = listing.listen_id(await _body_read(request)) if media == "text/event-stream" else None
    cursor = listing.SseCursor()

    def end_listen() -> None:
        if cursor.at_boundary:
            answer.cut()  # else the loop ends it once the event under way has passed

    # A GET's stream carries no call (MCP's server-to-client stream): ended at the seal once
    # quiet (baton.gateway.streams), by closing the pod's side; the client's then ends cleanly.
    opened = up.state.streams.open(d.uid, answer.cut) if request.method == "GET" else (
        up.state.streams.open(d.uid, end_listen, at_seal=True) if listen is not None else None)
    capper = listing.ttl_cap_for(media, cap_ms=listing.TRANSITION_TTL_MS) if listen is None and _ttl_capped(up, d, target) else None
    clock = up.state.streams.clock
    try:
        while True:
            try:
                async with asyncio.timeout(idle):
                    chunk = await answer.read_chunk()
            except (http1conn.UpstreamFailed, aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                if opened is not None and opened.ended:
                    chunk = b""  # ended at the seal: a clean end of stream
                else:
                    # Headers are sent: all that is left is to cut the stream (the client sees it end early).
                    _ended_early("stream", target, d, exc)
                    if request.transport is not None:
                        request.transport.close()
                    return resp
            if opened is not None:
                opened.last = clock()
            try:
                if listen is not None and opened is not None and opened.ended:
                    upto = cursor.until_boundary(chunk)
                    if upto is not None:
                        # The event under way has passed: the listen's result, then the end.
                        async with asyncio.timeout(idle):
                            await resp.write(chunk[:upto] + listing.listen_end_frame(listen))
                        await resp.write_eof()
                        answer.cut()
                        return resp
                elif listen is not None:
                    cursor.feed(chunk)
                if capper is not None and chunk:
                    chunk = capper.feed(chunk)
                    if not chunk:
                        continue  # held until its line (SSE) or the whole answer (JSON) is in
                elif capper is not None:
                    tail, capper = capper.flush(), None  # the answer's end: what was held
                    if tail:
                        async with asyncio.timeout(idle):
                            await resp.write(tail)
                if not chunk:
                    await resp.write_eof()
                    return resp
                async with asyncio.timeout(idle):
                    await resp.write(chunk)
            except (ConnectionError, asyncio.TimeoutError, aiohttp.ClientError):
                # The client went away (or stopped reading): nothing left to send it.
                if request.transport is not None:
                    request.transport.close()
                return resp
    finally:
        if opened is not None:
            up.state.streams.close(opened)


async def _body_read(request: web.BaseRequest) -> bytes:
    """The call's body if it was read whole (aiohttp keeps it: read() again costs nothing), else
    b"" (a streamed upload: never read here)."""
    if request.method != "POST" or not request.content.is_eof():
        return b""
    return await request.read()


def _ttl_capped(up: Upstreams, d: route.Forward, target: route.Target) -> bool:
    return listing.ttl_capped(up.runtime_of(target.namespace, target.runtime), pod_sealed=d.uid in up.state.sealed)


async def _answer_whole(up: Upstreams, request: web.BaseRequest, answer: upstream_mod.Answer,
                        back: list[tuple[str, str]], d: route.Forward, target: route.Target, *,
                        outcome: str) -> web.StreamResponse:
    """A small answer of known length: read whole (bounded by the idle timeout), sent as one."""
    idle = up.settings.idle_timeout_seconds
    try:
        async with asyncio.timeout(None if answer.arrived() else idle):
            data = await answer.read_whole()
    except (http1conn.UpstreamFailed, aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
        _ended_early("answer", target, d, exc)
        return refusals.refusal(route.Refuse(route.Reason.UPSTREAM_ERROR, 0,
                                             f"the pod of generation {d.generation} failed: {type(exc).__name__}",
                                             d.generation), target=target, body=None)
    gwmetrics.calls(outcome, "").inc()
    if b'"ttlMs"' in data and _ttl_capped(up, d, target):
        # A list cached from N outlives the handoff no longer than TRANSITION_TTL_MS.
        data = listing.cap_ttl_whole(data, media=listing.media_type(answer.headers), cap_ms=listing.TRANSITION_TTL_MS)
    resp = web.Response(status=answer.status, reason=answer.reason or None, body=data)
    for k, v in back:
        if k.lower() != "content-length":
            resp.headers.add(k, v)
    resp.headers[names.HEADER_GENERATION] = str(d.generation)
    try:
        # Sent before the call stops counting in flight, as the streamed answers are.
        await resp.prepare(request)
        async with asyncio.timeout(idle):
            await resp.write_eof()
    except (ConnectionError, asyncio.TimeoutError, aiohttp.ClientError):
        if request.transport is not None:
            request.transport.close()
    return resp


def _ended_early(what: str, target: route.Target, d: route.Forward, exc: BaseException) -> None:
    gwmetrics.UPSTREAM_ERRORS.labels(kind="stream").inc()
    log.info("%s from %s/%s g%s ended early: %s", what, *target_key(target), d.generation, exc,
             extra={"runtime": "/".join(target_key(target))})


def target_key(target: route.Target) -> tuple[str, str]:
    return (target.namespace, target.runtime)


def is_initialize(body: bytes) -> bool:
    """The body is a JSON-RPC `initialize` request (cheap test first: most calls are not)."""
    if b'"initialize"' not in body:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("method") == "initialize"
