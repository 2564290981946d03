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


async def relay(proxy: Any, request: web.Request, d: route.Forward, *, target: route.Target,
                headers: list[tuple[str, str]], outcome: str) -> web.StreamResponse | None:
    """`proxy`: the proxy.Proxy (its session, resolver and refusal). Open the WebSocket to pod `d` (the client's subprotocols and end-to-end headers passed on)
    and pump messages both ways until either side ends; None when the pod refused the connection
    before anything was sent (the caller decides again)."""
    assert proxy.session is not None
    skip = {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol", "host"}
    up_headers = [(k, v) for k, v in route.end_to_end(headers) if k.lower() not in skip]
    up_headers.append(("Host", request.host))
    protocols = tuple(p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip())
    url = f"http://{proxy.resolver.name(d.uid, d.ip)}:{d.port}{request.raw_path}"
    try:
        up = await proxy.session.ws_connect(url, headers=upstream.multidict_of(up_headers), protocols=protocols,
                                           autoping=True, heartbeat=None, max_msg_size=4 * 1024 * 1024)
    except (aiohttp.ClientConnectorError, asyncio.TimeoutError):
        gwmetrics.UPSTREAM_ERRORS.labels(kind="connect").inc()
        return None
    except aiohttp.ClientError as exc:
        gwmetrics.UPSTREAM_ERRORS.labels(kind="request").inc()
        failed: web.Response = proxy._upstream_failed(request, target, d, None, exc)
        return failed
    gwmetrics.CALLS.labels(outcome=outcome, reason="").inc()
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
