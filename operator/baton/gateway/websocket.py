"""A WebSocket call forwarded to the serving pod: the upgrade, then messages pumped both ways.
Does I/O (aiohttp client and server). Counted in flight by the caller (proxy.Proxy._forward).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

from baton.gateway import gwmetrics, route, upstream
from baton.model import names

# Set by the client library for the upstream handshake (Host: the request's, appended).
SKIP = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol", "host"})


async def relay(proxy: Any, request: web.BaseRequest, d: route.Forward, *, target: route.Target,
                headers: list[tuple[str, str]], outcome: str) -> web.StreamResponse | None:
    """`proxy`: the proxy.Proxy (its session, resolver and refusal). Open the WebSocket to pod `d` (the client's subprotocols and end-to-end headers passed on)
    and pump messages both ways until either side ends; None when the pod refused the connection
    before anything was sent (the caller decides again)."""
    assert proxy.session is not None
    up_headers = route.end_to_end(headers, also_drop=SKIP)
    up_headers.append(("Host", request.host))
    protocols = tuple(p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip())
    url = f"http://{proxy.resolver.name(d.uid, d.ip)}:{d.port}{request.raw_path}"
    try:
        up = await proxy.session.ws_connect(url, headers=upstream.multidict_of(up_headers), protocols=protocols,
                                           autoping=True, heartbeat=None, max_msg_size=4 * 1024 * 1024)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
        gwmetrics.UPSTREAM_ERRORS.labels(kind="connect").inc()
        return None
    except (aiohttp.ClientError, TimeoutError) as exc:
        gwmetrics.UPSTREAM_ERRORS.labels(kind="request").inc()
        failed: web.Response = proxy._upstream_failed(request, target, d, None, exc)
        return failed
    gwmetrics.calls(outcome, "").inc()
    ws = web.WebSocketResponse(protocols=(up.protocol,) if up.protocol else (), max_msg_size=4 * 1024 * 1024)
    ws.headers[names.HEADER_GENERATION] = str(d.generation)
    await ws.prepare(request)

    async def pump(src: Any, dst: Any) -> None:
        async for msg in src:
            if msg.type == aiohttp.WSMsgType.TEXT:
                await dst.send_str(msg.data)
            elif msg.type == aiohttp.WSMsgType.BINARY:
                await dst.send_bytes(msg.data)
            else:
                break
    tasks = [asyncio.create_task(pump(ws, up)), asyncio.create_task(pump(up, ws))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await up.close()
        await ws.close()
    return ws
