"""The call path: route one HTTP call by its Host, hold it, refuse it, or forward it to the
serving pod and stream both ways. Does I/O (aiohttp server and client).

Bounds: a held call's body is buffered up to `max_held_body_bytes` (413 beyond), at most
`max_held_per_runtime` calls are held per runtime (503 Overloaded beyond), every upstream
connection has a connect timeout, and every read or write, either way, an idle timeout. Only
the serving pod's IP from the API is dialled, at the port its Service port maps to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Callable

import aiohttp
from aiohttp import web

from baton.gateway import gwmetrics, http1, route
from baton.gateway import upstream as upstream_mod
from baton.gateway import websocket as ws_mod
from baton.gateway import state as state_mod
from baton.gateway import views as views_mod
from baton.model import names
from baton.settings import GatewaySettings

log = logging.getLogger("baton.gateway")
SESSION_HEADER = "Mcp-Session-Id"
CHUNK = 64 * 1024
# Connect refused by a pod the API calls Ready (its server not listening yet): tried again
# within the call's admission budget, never once any byte of the body was sent.
CONNECT_RETRY_SECONDS = 0.2
# Bodies up to this size (by Content-Length) are read whole and sent as bytes, both ways: most
# tool calls are small, and a byte string costs far less per call than a streamed body (an async
# generator upstream, a chunk loop back). Larger or unsized bodies (SSE, uploads) stream.
SMALL_BODY_BYTES = 64 * 1024
# A body sent as bytes: aiohttp sets its Content-Length from the bytes.
SET_BY_CLIENT = frozenset({"content-length"})
# A call written whole sets its own Content-Length, and its body goes with its head: a pod that
# asked for 100-continue would wait for nothing.
IN_HAND_DROP = frozenset({"content-length", "expect"})
SESSION_HEADER_LOWER = SESSION_HEADER.lower()
# Connections to pods for calls written whole (baton.gateway.http1); aiohttp's pool has its own.
POOL_LIMIT = 4096
KEEPALIVE_SECONDS = 30.0
# aiohttp's connect failures: counted as such even when a streamed upload had begun (then the
# call is not decided again: its first chunk was taken).
AIOHTTP_CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class Proxy:
    def __init__(self, *, settings: GatewaySettings, views: views_mod.GatewayViews, state: state_mod.State,
                 forwarding: Callable[[], bool]) -> None:
        self.settings, self.views, self.state = settings, views, state
        self._forwarding = forwarding
        self.shutting_down = False
        self.session: aiohttp.ClientSession | None = None
        self.pool: http1.Pool | None = None
        self.resolver = upstream_mod.PodResolver()
        # A call whose body is in hand (or absent) is bounded by one asyncio.timeout around the
        # request and another around the answer, instead of aiohttp's read timer, which it
        # re-arms on every chunk received (about 6 % of the gateway's CPU per call). Streamed
        # uploads keep the session's read timer: their upload may take longer than one idle span.
        self._read_timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout_seconds,
                                                   sock_read=settings.idle_timeout_seconds)
        self._unread_timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout_seconds,
                                                     sock_read=None)

    async def start(self) -> None:
        self.pool = http1.Pool(limit=POOL_LIMIT, keepalive_seconds=KEEPALIVE_SECONDS)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=4096, keepalive_timeout=30, resolver=self.resolver, use_dns_cache=False),
            timeout=self._read_timeout,
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            # Set once here, not per request: the client adds none of these of its own.
            skip_auto_headers=("Content-Type", "User-Agent", "Accept", "Accept-Encoding"))

    async def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.session is not None:
            await self.session.close()

    # --- the decision, from the views -------------------------------------------------------
    def decide(self, target: route.Target, excluded: set[str]) -> route.Decision:
        if not self._forwarding() or self.shutting_down:
            return route.Hold("this replica is not registered or its views are not listed")
        runtime = self.views.runtime(target.namespace, target.runtime)
        pods = self.views.pods_of(target.namespace, target.runtime)
        return route.decide(runtime, pods, port=target.port, sealed=self.state.sealed, excluded=excluded,
                            allowed=self.settings.allowed)

    # --- refusals ----------------------------------------------------------------------------
    async def _peek_body(self, request: web.BaseRequest) -> bytes | None:
        """Up to the held-body cap of the request, to answer JSON-RPC with its id; None if larger."""
        if not request.body_exists:
            return None
        try:
            data = await asyncio.wait_for(request.content.read(self.settings.max_held_body_bytes + 1), 5.0)
        except (asyncio.TimeoutError, aiohttp.ClientError, ConnectionError):
            return None
        return data if len(data) <= self.settings.max_held_body_bytes else None

    def refusal(self, request: web.BaseRequest, d: route.Refuse, *, target: route.Target | None,
                body: bytes | None, outcome: str = "refused") -> web.Response:
        gwmetrics.calls(outcome, d.reason.value).inc()
        headers = {names.HEADER_REASON: d.reason.value}
        if route.status_of(d.reason) == 503 or d.retry_after:
            headers["Retry-After"] = str(max(1, d.retry_after))
        resp = web.Response(
            status=route.status_of(d.reason), content_type="application/json", headers=headers,
            body=route.refusal_body(reason=d.reason, message=d.message, namespace=target.namespace if target else None,
                                    runtime=target.runtime if target else None, generation=d.generation, body=body))
        if d.reason == route.Reason.GATEWAY_SHUTDOWN:
            resp.force_close()
        return resp

    async def _refuse(self, request: web.BaseRequest, d: route.Refuse, *, target: route.Target | None,
                      body: bytes | None) -> web.Response:
        if body is None:
            body = await self._peek_body(request)
        return self.refusal(request, d, target=target, body=body)

    # --- the call ----------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        why = route.smuggling(headers)
        if not why and not request.raw_path.startswith("/"):
            # Absolute-form ("GET http://host/ ...") names an authority the pod might read
            # instead of the Host the call was routed by; "*" means nothing to a tool.
            why = "the request target must be a path (origin-form)"
        if why:
            return self.refusal(request, route.Refuse(route.Reason.BAD_REQUEST, 0, why), target=None, body=None)
        expect = request.headers.get("Expect")
        if expect is not None and expect.lower() == "100-continue" and request.version >= aiohttp.HttpVersion11:
            # The client sends the body only after this; every path below may read it (a small
            # body at once, a held one, a refusal's JSON-RPC id). aiohttp's low-level server
            # does not answer Expect itself (its Application's router does).
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        hosts = [v for k, v in headers if k.lower() == "host"]
        target = route.parse_host(hosts[0], cluster_domain=self.settings.cluster_domain) if len(hosts) == 1 else None
        if target is None:
            return await self._refuse(request, route.Refuse(
                route.Reason.UNKNOWN_RUNTIME, 0, "the Host header names no runtime (<runtime>.<namespace>[.svc[.<domain>]][:port])"),
                target=None, body=None)
        if self.shutting_down:
            return await self._refuse(request, route.Refuse(route.Reason.GATEWAY_SHUTDOWN, 1, "this gateway replica is shutting down"),
                                      target=target, body=None)
        key = (target.namespace, target.runtime)
        arrival = time.monotonic()
        session_id = request.headers.get(SESSION_HEADER)
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        body: bytes | None = None  # read at once when small, else buffered once the call is held
        if not websocket and request.body_exists and request.content_length is not None \
                and request.content_length <= SMALL_BODY_BYTES:
            try:
                # All there: no wait to bound, and no timer armed (one less per call).
                async with asyncio.timeout(None if request.content.is_eof() else self.settings.idle_timeout_seconds):
                    body = await request.read()
            except (asyncio.TimeoutError, aiohttp.ClientError, ConnectionError):
                return self.refusal(request, route.Refuse(route.Reason.BAD_REQUEST, 0, "the request's body did not arrive"),
                                    target=target, body=None)
        held_since: float | None = None
        excluded: set[str] = set()
        try:
            while True:
                wake = self.state.event(key)
                d = self.decide(target, excluded)
                if isinstance(d, route.Refuse):
                    return await self._refuse(request, d, target=target, body=body)
                gone = self._session_gone(session_id, target, d)
                if gone is not None:
                    return await self._refuse(request, gone, target=target, body=body)
                if isinstance(d, route.Forward):
                    outcome = "held_then_forwarded" if held_since is not None else "forwarded"
                    result = await self._forward(request, d, target=target, body=body, websocket=websocket,
                                                 headers=headers, outcome=outcome, held_since=held_since)
                    if result is not None:
                        return result
                    # Connect refused before any byte went: wait a moment, decide again.
                    d = route.Hold("the serving pod refused the connection")
                if held_since is None:
                    held_since = time.monotonic()
                    if self.state.held[key] >= self.settings.max_held_per_runtime:
                        return await self._refuse(request, route.Refuse(
                            route.Reason.OVERLOADED, 1, f"more than {self.settings.max_held_per_runtime} calls held for this runtime"),
                            target=target, body=body)
                    self.state.held[key] += 1
                    gwmetrics.HELD.inc()
                    runtime = self.views.runtime(*key)
                    excluded = route.retiring_uids(runtime or {}, self.views.pods_of(*key), self.state.sealed)
                    # A small body was read whole already; a larger one is buffered now, up to the cap.
                    too_large = body is not None and len(body) > self.settings.max_held_body_bytes
                    if body is None and request.body_exists and not websocket:
                        body = await self._buffer(request)
                        too_large = body is None
                    if too_large:
                        return self.refusal(request, route.Refuse(
                            route.Reason.TOO_LARGE, 0, f"a held call's body is capped at {self.settings.max_held_body_bytes} bytes"),
                            target=target, body=None)
                runtime = self.views.runtime(*key)
                remaining = arrival + route.admission_seconds(runtime) - time.monotonic()
                if self.shutting_down:
                    return self.refusal(request, route.Refuse(route.Reason.GATEWAY_SHUTDOWN, 1, "this gateway replica is shutting down"),
                                        target=target, body=body)
                if remaining <= 0:
                    return self.refusal(request, route.Refuse(
                        route.Reason.TRANSITIONING, 1,
                        f"no generation served within budgets.admissionSeconds={route.admission_seconds(runtime)} ({d.why})",
                        _generation(runtime)), target=target, body=body)
                pause = min(remaining, CONNECT_RETRY_SECONDS) if result_is_retry(d) else remaining
                try:
                    await asyncio.wait_for(wake.wait(), pause)
                except asyncio.TimeoutError:
                    pass
        finally:
            if held_since is not None:
                self.state.held[key] -= 1
                if self.state.held[key] <= 0:
                    del self.state.held[key]
                gwmetrics.HELD.dec()
                gwmetrics.HOLD_SECONDS.observe(time.monotonic() - held_since)

    def _session_gone(self, session_id: str | None, target: route.Target, d: route.Decision) -> route.Refuse | None:
        """An Mcp-Session-Id that a pod of this runtime issued, which cannot answer it any more
        (another pod serves, or it retires): the MCP answer for an unknown session, 404, at once."""
        if not session_id:
            return None
        issuer = self.state.session_uid(session_id)
        if issuer is None:
            return None  # not seen here: the pod decides
        if isinstance(d, route.Forward):
            gone = d.uid != issuer
        else:
            runtime = self.views.runtime(target.namespace, target.runtime) or {}
            pods = self.views.pods_of(target.namespace, target.runtime)
            present = any((p.get("metadata") or {}).get("uid") == issuer for p in pods)
            gone = not present or issuer in route.retiring_uids(runtime, pods, self.state.sealed)
        if not gone:
            return None
        return route.Refuse(route.Reason.UNKNOWN_SESSION, 0,
                            "session not found: the generation that issued it is gone; start a new session")

    async def _buffer(self, request: web.BaseRequest) -> bytes | None:
        cap = self.settings.max_held_body_bytes
        chunks: list[bytes] = []
        size = 0
        while True:
            async with asyncio.timeout(self.settings.idle_timeout_seconds):
                chunk = await request.content.readany()
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > cap:
                return None
            chunks.append(chunk)

    async def _stream_body(self, request: web.BaseRequest, started: list[bool]) -> AsyncIterator[bytes]:
        while True:
            async with asyncio.timeout(self.settings.idle_timeout_seconds):
                chunk = await request.content.readany()
            if not chunk:
                return
            started[0] = True
            yield chunk

    async def _forward(self, request: web.BaseRequest, d: route.Forward, *, target: route.Target, body: bytes | None,
                       websocket: bool, headers: list[tuple[str, str]], outcome: str,
                       held_since: float | None) -> web.StreamResponse | None:
        """Forward to `d`; None when the pod refused the connection before anything was sent
        (the caller decides again). Counted in flight from here (no await since the decision:
        a seal answered after this call was decided counts it) until the answer is sent in full."""
        self.state.begin(d.uid)
        try:
            if websocket:
                return await ws_mod.relay(self, request, d, target=target, headers=headers, outcome=outcome)
            in_hand = body is not None or not request.body_exists  # else a streamed upload
            try:
                if in_hand and request.method != "HEAD":
                    answer: upstream_mod.Answer = await self._send_in_hand(request, d, body=body, headers=headers)
                else:
                    answer = await self._send_streamed(request, d, body=body, headers=headers, in_hand=in_hand)
            except http1.ConnectFailed as exc:
                # Not connected: nothing reached the pod, the call may be decided again.
                gwmetrics.UPSTREAM_ERRORS.labels(kind="connect").inc()
                log.info("connect to %s:%s (%s/%s g%s) failed: %s", d.ip, d.port, *target_key(target), d.generation, exc,
                         extra={"runtime": "/".join(target_key(target))})
                return None
            except (http1.UpstreamFailed, aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
                # Sent (maybe in part), no answer in time or the pod failed: never sent again, a
                # tool call need not be idempotent.
                gwmetrics.UPSTREAM_ERRORS.labels(kind="connect" if isinstance(exc, AIOHTTP_CONNECT_ERRORS) else "request").inc()
                return self._upstream_failed(request, target, d, body, exc)
            try:
                gwmetrics.calls(outcome, "").inc()
                if held_since is not None:
                    log.debug("held call forwarded to g%s after %.2fs", d.generation, time.monotonic() - held_since,
                              extra={"runtime": "/".join(target_key(target))})
                back = route.end_to_end(answer.headers)
                sid = next((v for k, v in answer.headers if k.lower() == SESSION_HEADER_LOWER), None)
                if sid:
                    self.state.session_issued(sid, d.uid)
                size = answer.content_length()
                if size is not None and size <= SMALL_BODY_BYTES and request.method != "HEAD":
                    return await self._answer_whole(request, answer, back, d, target)
                return await self._answer_streamed(request, answer, back, d, target)
            finally:
                answer.release()
        finally:
            self.state.end(d.uid)

    async def _send_in_hand(self, request: web.BaseRequest, d: route.Forward, *, body: bytes | None,
                            headers: list[tuple[str, str]]) -> http1.Connection:
        """A call whose body is in hand (or absent): written whole on a pooled connection."""
        assert self.pool is not None
        up_headers = route.end_to_end(headers, also_drop=IN_HAND_DROP)
        up_headers.append(("X-Forwarded-For", request.remote or ""))
        head = http1.request_head(method=request.method, target=request.raw_path, headers=up_headers,
                                  body_size=len(body) if body is not None else None)
        async with asyncio.timeout(self.settings.idle_timeout_seconds):
            return await self.pool.call(key=(d.uid, d.ip, d.port), data=head + body if body else head,
                                        connect_timeout=self.settings.connect_timeout_seconds)

    async def _send_streamed(self, request: web.BaseRequest, d: route.Forward, *, body: bytes | None,
                             headers: list[tuple[str, str]], in_hand: bool) -> upstream_mod.Answer:
        """A streamed upload (or HEAD): aiohttp's client, its read timer re-armed per chunk."""
        assert self.session is not None
        up_headers = route.end_to_end(headers, also_drop=SET_BY_CLIENT if body is not None else frozenset())
        up_headers.append(("X-Forwarded-For", request.remote or ""))
        started = [False]
        data: Any = body if body is not None else (self._stream_body(request, started) if request.body_exists else None)
        url = f"http://{self.resolver.name(d.uid, d.ip)}:{d.port}{request.raw_path}"
        try:
            async with asyncio.timeout(self.settings.idle_timeout_seconds if in_hand else None):
                response = await self.session.request(
                    request.method, url, headers=upstream_mod.multidict_of(up_headers), data=data,
                    allow_redirects=False, timeout=self._unread_timeout if in_hand else self._read_timeout)
        except AIOHTTP_CONNECT_ERRORS as exc:
            if started[0]:
                raise  # an upload begun is never sent again
            raise http1.ConnectFailed(str(exc)) from exc
        return upstream_mod.AiohttpAnswer(response)

    async def _answer_streamed(self, request: web.BaseRequest, answer: upstream_mod.Answer, back: list[tuple[str, str]],
                               d: route.Forward, target: route.Target) -> web.StreamResponse:
        resp = web.StreamResponse(status=answer.status, reason=answer.reason or None)
        for k, v in back:
            resp.headers.add(k, v)
        resp.headers[names.HEADER_GENERATION] = str(d.generation)
        await resp.prepare(request)
        while True:
            try:
                async with asyncio.timeout(self.settings.idle_timeout_seconds):
                    chunk = await answer.read_chunk()
            except (http1.UpstreamFailed, aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                # Headers are sent: all that is left is to cut the stream (the client sees it end early).
                _ended_early("stream", target, d, exc)
                if request.transport is not None:
                    request.transport.close()
                return resp
            try:
                if not chunk:
                    await resp.write_eof()
                    return resp
                async with asyncio.timeout(self.settings.idle_timeout_seconds):
                    await resp.write(chunk)
            except (ConnectionError, asyncio.TimeoutError, aiohttp.ClientError):
                # The client went away (or stopped reading): nothing left to send it.
                if request.transport is not None:
                    request.transport.close()
                return resp

    async def _answer_whole(self, request: web.BaseRequest, answer: upstream_mod.Answer, back: list[tuple[str, str]],
                            d: route.Forward, target: route.Target) -> web.StreamResponse:
        """A small answer of known length: read whole (bounded by the idle timeout), sent as one."""
        try:
            async with asyncio.timeout(None if answer.arrived() else self.settings.idle_timeout_seconds):
                data = await answer.read_whole()
        except (http1.UpstreamFailed, aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
            _ended_early("answer", target, d, exc)
            return self.refusal(request, route.Refuse(route.Reason.UPSTREAM_ERROR, 0,
                                                      f"the pod of generation {d.generation} failed: {type(exc).__name__}",
                                                      d.generation), target=target, body=None)
        resp = web.Response(status=answer.status, reason=answer.reason or None, body=data)
        for k, v in back:
            if k.lower() != "content-length":
                resp.headers.add(k, v)
        resp.headers[names.HEADER_GENERATION] = str(d.generation)
        try:
            # Sent before the call stops counting in flight, as the streamed answers are.
            await resp.prepare(request)
            async with asyncio.timeout(self.settings.idle_timeout_seconds):
                await resp.write_eof()
        except (ConnectionError, asyncio.TimeoutError, aiohttp.ClientError):
            if request.transport is not None:
                request.transport.close()
        return resp

    def _upstream_failed(self, request: web.BaseRequest, target: route.Target, d: route.Forward, body: bytes | None,
                         exc: BaseException) -> web.Response:
        log.info("call to %s/%s g%s failed: %s", *target_key(target), d.generation, exc,
                 extra={"runtime": "/".join(target_key(target))})
        return self.refusal(request, route.Refuse(route.Reason.UPSTREAM_ERROR, 0, f"the pod of generation {d.generation} failed: {type(exc).__name__}",
                                                  d.generation), target=target, body=body)


def _ended_early(what: str, target: route.Target, d: route.Forward, exc: BaseException) -> None:
    gwmetrics.UPSTREAM_ERRORS.labels(kind="stream").inc()
    log.info("%s from %s/%s g%s ended early: %s", what, *target_key(target), d.generation, exc,
             extra={"runtime": "/".join(target_key(target))})


def result_is_retry(d: route.Decision) -> bool:
    return isinstance(d, route.Hold) and d.why == "the serving pod refused the connection"


def target_key(target: route.Target) -> tuple[str, str]:
    return (target.namespace, target.runtime)


def _generation(runtime: dict[str, Any] | None) -> int | None:
    g = (((runtime or {}).get("status") or {}).get("current") or {}).get("generation")
    return g if isinstance(g, int) else None
