"""/metrics and /healthz over HTTP (aiohttp, inside the operator's event loop). Does I/O."""

from __future__ import annotations

from typing import Awaitable, Callable

import prometheus_client
from aiohttp import web

from baton import metrics

HealthCheck = Callable[[], tuple[bool, str]]


async def _metrics(_: web.Request) -> web.Response:
    body = prometheus_client.generate_latest(metrics.REGISTRY)
    return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})


def _health(is_healthy: HealthCheck) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(_: web.Request) -> web.Response:
        ok, text = is_healthy()
        return web.Response(status=200 if ok else 503, text=text + "\n")

    return handler


async def start(
    *, metrics_bind: tuple[str, int], health_bind: tuple[str, int], is_healthy: HealthCheck
) -> list[web.AppRunner]:
    """Serve both endpoints; one listener when both binds are the same."""
    apps: dict[tuple[str, int], web.Application] = {}
    for bind in (metrics_bind, health_bind):
        apps.setdefault(bind, web.Application())
    apps[metrics_bind].router.add_get("/metrics", _metrics)
    apps[health_bind].router.add_get("/healthz", _health(is_healthy))
    runners = []
    for (host, port), app in apps.items():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        runners.append(runner)
    return runners
