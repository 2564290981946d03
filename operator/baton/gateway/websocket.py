"""A WebSocket call forwarded to the serving pod: the upgrade, then messages pumped both ways.
Does I/O (aiohttp client and server). Counted in flight by the caller (forward.forward).

The client's handshake is checked before the pod is dialled (a bad one gets 400 BadRequest
and reaches no pod), and the pod's WebSocket is closed on every path once opened.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

from baton.gateway import gwmetrics, hygiene, refusals, route, upstream
from baton.model import names

# Set by the client library for the upstream handshake (Host: the request's, appended).
SKIP = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol", "host"})


async def relay(up: Any, request: web.BaseRequest, d: route.Forward, *, target: route.Target,
                headers: list[tuple[str, str]], outcome: str, held_ms: str | None = None) -> web.StreamResponse | None:
    """`up`: the forward.Upstreams (its session, resolver and failure answer). Open the
    WebSocket to pod `d` (the client's subprotocols and end-to-end headers passed on) and pump
    messages both ways until either side ends; None when the pod refused the connection before
    anything was sent (the caller decides again)."""
    assert up.session is not None
    ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024)
    check = ws.can_prepare(request)
    if request.method != "GET" or not check.ok:
        return refusals.refusal(route.Refuse(route.Reason.BAD_REQUEST, 0, "not a WebSocket handshake (RFC 6455: "
                                             "GET with Connection: upgrade, Sec-WebSocket-Key and -Version 13)"),
                                target=target, body=None)
    up_headers = hygiene.end_to_end(headers, also_drop=SKIP)
    up_headers.append(("Host", request.host))
    protocols = tuple(p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip())
    url = f"http://{up.resolver.name(d.uid, d.ip)}:{d.port}{request.raw_path}"
    try:
        pod_ws = await up.session.ws_connect(url, headers=upstream.multidict_of(up_headers), protocols=protocols,
                                             autoping=True, heartbeat=None, max_msg_size=4 * 1024 * 1024)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
        gwmetrics.UPSTREAM_ERRORS.labels(kind="connect").inc()
        return None
    except (aiohttp.ClientError, TimeoutError) as exc:
        gwmetrics.UPSTREAM_ERRORS.labels(kind="request").inc()
        failed: web.Response = up.upstream_failed(request, target, d, None, exc)
        return failed
    tasks: list[asyncio.Task[None]] = []
    try:
        gwmetrics.calls(outcome, "").inc()
        ws = web.WebSocketResponse(protocols=(pod_ws.protocol,) if pod_ws.protocol else (), max_msg_size=4 * 1024 * 1024)
        ws.headers[names.HEADER_GENERATION] = str(d.generation)
        if held_ms is not None:
            ws.headers[names.HEADER_HELD_MS] = held_ms
        await ws.prepare(request)
        restart = asyncio.Event()
        # Ended at the seal once quiet (baton.gateway.streams): close 1012 Service Restart, so the
        # client reconnects to the next generation.
        opened = up.state.streams.open(d.uid, restart.set)

        async def pump(src: Any, dst: Any) -> None:
            async for msg in src:
                opened.last = up.state.streams.clock()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await dst.send_str(msg.data)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    await dst.send_bytes(msg.data)
                else:
                    break

        async def restarted() -> None:
            await restart.wait()
            await ws.close(code=aiohttp.WSCloseCode.SERVICE_RESTART, message=b"the generation retires: reconnect")
        tasks = [asyncio.create_task(pump(ws, pod_ws)), asyncio.create_task(pump(pod_ws, ws)),
                 asyncio.create_task(restarted())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.state.streams.close(opened)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pod_ws.close()
        if ws.prepared:
            await ws.close()
    return ws
