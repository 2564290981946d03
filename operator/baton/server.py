"""/metrics, /livez, /readyz and /healthz over HTTP (aiohttp, inside the operator's event loop). Does I/O.

- /metrics: prometheus-client's own aiohttp handler (content negotiation, OpenMetrics when the
  scraper asks for it, gzip when it accepts it).
- /livez: 200 while the event loop answers (it serves this very request). A liveness probe must
  not depend on the API server: restarting the operator would not bring that back.
- /readyz: 200 while the operator takes work; 503 once it is shutting down.
- /healthz: kept for existing probes; the same answer as /readyz.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from aiohttp import web
from prometheus_client import aiohttp as prom_aiohttp

from baton import metrics

# () -> (ready, reason): the reason is the response body, for a person reading a failed probe.
ReadyCheck = Callable[[], tuple[bool, str]]
Handler = Callable[[web.Request], Awaitable[web.Response]]


async def _live(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _ready(is_ready: ReadyCheck) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        ok, text = is_ready()
        return web.Response(status=200 if ok else 503, text=text + "\n")

    return handler


def applications(
    *, metrics_bind: tuple[str, int], health_bind: tuple[str, int], is_ready: ReadyCheck
) -> dict[tuple[str, int], web.Application]:
    """The apps to serve, by bind; one app when both binds are the same."""
    apps: dict[tuple[str, int], web.Application] = {}
    for bind in (metrics_bind, health_bind):
        apps.setdefault(bind, web.Application())
    apps[metrics_bind].router.add_get("/metrics", prom_aiohttp.make_aiohttp_handler(metrics.REGISTRY))
    health = apps[health_bind].router
    health.add_get("/livez", _live)
    health.add_get("/readyz", _ready(is_ready))
    health.add_get("/healthz", _ready(is_ready))
    return apps


async def start(
    *, metrics_bind: tuple[str, int], health_bind: tuple[str, int], is_ready: ReadyCheck
) -> list[web.AppRunner]:
    """Serve the endpoints; the caller keeps the runners (cleanup() stops them)."""
    runners: list[web.AppRunner] = []
    try:
        for (host, port), app in applications(
            metrics_bind=metrics_bind, health_bind=health_bind, is_ready=is_ready
        ).items():
            runner = web.AppRunner(app, access_log=None)
            runners.append(runner)
            await runner.setup()
            # An empty host is every address of both families (None to aiohttp and asyncio).
            await web.TCPSite(runner, host or None, port).start()
    except BaseException:
        # A bind that failed (port taken) must not leave the other port bound for the retry.
        for r in runners:
            await r.cleanup()
        raise
    return runners
