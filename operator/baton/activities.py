"""kopf activities only: the process shell (login, startup, cleanup, signals). Does I/O (the
startup checks of the API, the ports), and starts the controller.

kopf runs standalone (peering off, scanning off) and watches nothing itself: Baton's own
informers (baton.cache) select on the server by label, which kopf's label filters do on the
client (every Pod, Lease and EndpointSlice of the cluster would reach every replica).
Replicas coordinate per runtime through the lifecycle Leases. An idle runtime costs no writes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

import baton
from baton import clock as clock_mod
from baton import faults as faults_mod
from baton import controller as controller_mod
from baton import collectors, metrics, server
from baton import settings as settings_mod
from baton.k8s import claims, client, runtimes

log = logging.getLogger("baton.handlers")

SETTINGS: settings_mod.Settings | None = None
CONTROLLER: controller_mod.Controller | None = None
# How long startup waits for the views to fill before acting (a slow list is retried anyway).
SYNC_TIMEOUT_SECONDS = 60.0


def _controller() -> controller_mod.Controller:
    assert CONTROLLER is not None, "baton.activities.install() was not called"
    return CONTROLLER


def install(settings: settings_mod.Settings, *, clock: clock_mod.Clock, faults: faults_mod.Faults) -> None:
    global SETTINGS, CONTROLLER
    SETTINGS = settings
    CONTROLLER = controller_mod.Controller(settings, clock=clock, faults=faults)


class StartupError(Exception):
    """The API server cannot run Baton (a CRD missing, access refused) or did not answer in time."""


_MISSING_RUNTIME_CRD = (
    "the ToolRuntime CRD (toolruntimes.baton.dev/v1alpha1) is not served: install it "
    "(kubectl apply -f crds/, or the Helm chart) before starting Baton")
# Refused, not tolerated: a claim pins a generation, and a view that cannot list claims never
# fills, so every retire would wait pinSeconds and then block for good, unreported. Acting as if
# no claim existed would be safe only while the CRD stays absent.
_MISSING_CLAIM_CRD = (
    "the ToolRuntimeClaim CRD (toolruntimeclaims.baton.dev/v1alpha1) is not served: install it "
    "(kubectl apply -f crds/, or the Helm chart) before starting Baton; every retire waits for "
    "the claims it cannot list")
# How long the preflight keeps retrying an API server that does not answer (or answers 5xx/429).
PREFLIGHT_SECONDS = 60.0


async def _check_served(namespaces: tuple[str, ...]) -> None:
    if not await runtimes.runtimes_served(namespaces):
        raise kopf.PermanentError(_MISSING_RUNTIME_CRD)
    if not await claims.claims_served(namespaces):
        raise kopf.PermanentError(_MISSING_CLAIM_CRD)


def _transient(exc: BaseException) -> bool:
    status = client.status_of(exc)
    return status is None or status >= 500 or status == 429


async def preflight(settings: settings_mod.Settings, *, deadline_seconds: float = PREFLIGHT_SECONDS) -> None:
    """Before kopf starts: the API server answers and serves both CRDs. An unanswered or 5xx API is
    retried for `deadline_seconds`; then, or at once for a missing CRD or a refusal, StartupError
    (one log line at the caller, not a traceback). Its connections are closed on every path."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_seconds
    await client.start(pool_size=2)
    try:
        delay = 1.0
        while True:
            try:
                await _check_served(settings.namespaces)
                return
            except kopf.PermanentError as exc:
                raise StartupError(str(exc)) from None
            except Exception as exc:
                if not _transient(exc) or loop.time() + delay > deadline:
                    raise StartupError(f"the API server did not answer the startup check: {client.short(exc)}") from None
                log.warning("startup check: %s; retrying in %.0fs", client.short(exc), delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
    finally:
        await client.stop()


@kopf.on.startup()
async def on_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    assert SETTINGS is not None
    settings.peering.standalone = True
    # No cluster-wide scanning of namespaces and CRDs: it needs RBAC the operator should not
    # have, and the resources are resolved once at startup (the CRD must be installed first).
    settings.scanning.disabled = True
    settings.posting.enabled = False  # Baton posts its own events, with reasons of its own
    # Every request kopf makes is bounded.
    settings.networking.connect_timeout = 5
    settings.networking.request_timeout = 30
    await client.start()
    controller = _controller()
    try:
        await _check_served(SETTINGS.namespaces)
        if not controller.started:
            # The ports first: a bind error fails startup before anything acts (kopf retries it).
            await server.start(
                metrics_bind=SETTINGS.metrics_bind,
                health_bind=SETTINGS.health_bind,
                is_ready=lambda: (controller.started and not controller.shutting_down,
                                  "shutting down" if controller.shutting_down else ("ok" if controller.started else "starting")),
            )
    except BaseException:
        await client.stop()  # a retry opens them again; no "Unclosed client session" noise at exit
        raise
    if not controller.started:
        await controller.prepare()  # one bounded list (sharded only), before anything is held
        metrics.REGISTRY.register(collectors.RuntimeCollector(controller.runtime_gauges, idle=controller.idle_runtimes))
        metrics.REGISTRY.register(collectors.QueueCollector(controller.running))
        controller.start()
        # The views fill in the background: kopf cancels an unfinished startup activity on
        # SIGTERM and then skips cleanup, so nothing after controller.start() may wait here
        # (a SIGTERM during a 60 s sync used to skip the shutdown: Leases taken meanwhile kept).
        _SYNC_REPORT.append(asyncio.create_task(_report_synced(controller, SETTINGS), name="baton sync report"))


# The task that logs when the views are filled (kept referenced until it ends).
_SYNC_REPORT: list["asyncio.Task[None]"] = []


async def _report_synced(controller: controller_mod.Controller, settings: settings_mod.Settings) -> None:
    if not await controller.views.wait_synced(SYNC_TIMEOUT_SECONDS):
        log.warning("views not filled within %.0fs; acting on what arrived (the rest follows)", SYNC_TIMEOUT_SECONDS)
    log.info("baton started", extra={"version": baton.version(), "identity": settings.identity,
                                     "namespaces": ",".join(settings.namespaces) or "*",
                                     "workers": settings.workers})


@kopf.on.login()
def on_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_via_client(**kwargs)


@kopf.on.cleanup()
async def on_cleanup(**_: Any) -> None:
    log.info("stopping: no new transitions; handing back Leases")
    for task in _SYNC_REPORT:
        task.cancel()
    await _controller().shutdown()
    await client.stop()
    log.info("stopped")
