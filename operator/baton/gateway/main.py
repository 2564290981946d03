"""`python -m baton gateway`: wire settings, registration, views, the call path, the admin API,
/metrics and health; stop on SIGTERM. Does I/O.

Order at start: the admin API listens (the operator may seal as soon as the Lease exists), the
Lease is written, then the views are listed; calls are forwarded only once both are done.
SIGTERM: readiness off, the call listener closed, held calls answered 503 GatewayShutdown,
calls in flight finished within BATON_SHUTDOWN_GRACE_SECONDS; the Lease stays (so the operator
keeps counting what is in flight here) until then, and is deleted last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time

from aiohttp import web

import baton
from baton import adminkey, logs, server
from baton import settings as settings_mod
from baton.gateway import admin, gwmetrics, listener, proxy, registrar, state, views
from baton.k8s import client
from baton.settings import GatewaySettings

log = logging.getLogger("baton.gateway")
SEALED_SWEEP_SECONDS = 30.0
STREAMS_SWEEP_SECONDS = 0.25


async def _serve(app: web.Application, bind: tuple[str, int], *, shutdown_timeout: float = 5.0) -> tuple[web.AppRunner, web.TCPSite]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    # An empty host is every address of both families (None to aiohttp and asyncio).
    site = web.TCPSite(runner, bind[0] or None, bind[1])
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site


async def run(settings: GatewaySettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    # The admin API is never served without its key (docs/gateway.md, "Registration and the
    # admin API"): checked first, before anything is opened.
    if not settings.admin_key_file:
        raise adminkey.AdminKeyError(
            f"{adminkey.VARIABLE} is not set: it names the file holding the gateway admin key, the same "
            "as the operator's (the Helm chart mounts its Secret there). Outside the chart, write one key, "
            "e.g. `head -c 48 /dev/urandom | base64 > admin.key`, and give both the same file")
    admin_key = adminkey.KeyFile(settings.admin_key_file)

    # What startup opened, closed again if it fails half-way (a port taken): one error line at
    # exit, not aiohttp's "Unclosed client session" noise.
    async with contextlib.AsyncExitStack() as undo:
        await client.start(pool_size=16)
        undo.push_async_callback(client.stop)
        st = state.State()
        vw = views.GatewayViews(namespaces=settings.namespaces, state=st)
        watch_api = client.open_watches(informers=vw.informer_count())
        listed_once = False

        async def relist() -> bool:
            nonlocal listed_once
            if listed_once:
                await vw.relist()
            listed_once = True
            return await vw.wait_synced(60)

        reg = registrar.Registrar(namespace=settings.system_namespace, instance=settings.identity,
                                  admin=settings.admin_address, duration_seconds=settings.lease_seconds,
                                  relist=relist, on_change=st.wake_all, static_seconds=settings.static_seconds,
                                  demand=st.wake_demand)
        st.on_demand_change = reg.demand_changed  # a call held for a wake: the Lease says so promptly
        px = proxy.Proxy(settings=settings, views=vw, state=st, forwarding=reg.mode, admin_key=admin_key.key)
        await px.start()
        undo.push_async_callback(px.close)

        def ready() -> tuple[bool, str]:
            if px.shutting_down:
                return False, "shutting down"
            return (True, "forwarding") if reg.forwarding() else (False, "not registered or views not listed")

        runners = await server.start(metrics_bind=settings.metrics_bind, health_bind=settings.health_bind, is_ready=ready)
        for r in runners:
            undo.push_async_callback(r.cleanup)
        admin_runner, _ = await _serve(admin.application(st, key=admin_key, lease=reg.lease_id, present=vw.pod_present),
                                       settings.admin_bind)
        undo.push_async_callback(admin_runner.cleanup)
        await reg.start()
        vw.start(watch_api)
        undo.push_async_callback(vw.stop)
        reg_task = asyncio.create_task(reg.run(), name="gateway registration")
        undo.callback(reg_task.cancel)

        calls = listener.CallsListener(px.handle, settings.bind, header_seconds=settings.header_timeout_seconds,
                                       on_cut=gwmetrics.HEADER_TIMEOUTS.inc, max_connections=settings.max_connections,
                                       max_connections_per_client=settings.max_connections_per_client)
        try:
            await calls.start()
        except BaseException:
            await calls.runner.cleanup()
            raise
        undo.pop_all()  # started: the shutdown below closes everything, in its own order
    log.info("gateway %s: calls on %s, admin on %s (Lease %s/%s)", settings.identity,
             settings_mod.format_address(*settings.bind), settings.admin_address, settings.system_namespace,
             reg.instance, extra={"version": baton.version()})

    async def sweep() -> None:
        while True:
            await asyncio.sleep(SEALED_SWEEP_SECONDS)
            uids = {str((p.get("metadata") or {}).get("uid")) for p in vw.pods.items()}
            st.forget_gone(uids.__contains__)

    async def end_idle_streams() -> None:
        # Quiet streams of sealed pods end within a quarter second of their idle bound.
        while True:
            await asyncio.sleep(STREAMS_SWEEP_SECONDS)
            ended = st.streams.end_idle(sealed=st.sealed, idle_seconds=settings.stream_idle_seconds)
            if ended:
                gwmetrics.STREAMS_ENDED.inc(ended)

    sweeper = asyncio.create_task(sweep(), name="gateway sealed sweep")
    stream_ender = asyncio.create_task(end_idle_streams(), name="gateway stream ender")
    await stop.wait()

    log.info("gateway %s: shutting down (%d in flight)", settings.identity, st.total_inflight())
    px.shutting_down = True
    await calls.stop()  # no new connections
    st.wake_all()  # held calls: 503 GatewayShutdown
    deadline = time.monotonic() + settings.shutdown_grace_seconds
    while st.total_inflight() > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    left = st.total_inflight()
    if left:
        log.warning("gateway %s: %d calls still in flight at the end of the grace period", settings.identity, left)
    await calls.cleanup()
    sweeper.cancel()
    stream_ender.cancel()
    reg.stopping = True
    reg_task.cancel()
    await asyncio.gather(reg_task, sweeper, stream_ender, return_exceptions=True)
    await reg.unregister()
    await admin_runner.cleanup()
    for r in runners:
        await r.cleanup()
    await px.close()
    await vw.stop()
    await client.stop()
    return 0


def main(settings: GatewaySettings) -> int:
    try:
        return asyncio.run(run(settings))
    except adminkey.AdminKeyError as exc:  # no admin key: the admin API would be open to anyone
        logs.fatal(f"gateway startup failed: {exc}", stream=sys.stdout, version=baton.version())
        return 2
    except OSError as exc:  # a port that cannot be bound, the API server unreachable at start
        logs.fatal(f"gateway startup failed: {exc}", stream=sys.stdout, version=baton.version())
        return 1
