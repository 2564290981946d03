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

from baton import clock as clock_mod
from baton import faults as faults_mod
from baton import controller as controller_mod
from baton import metrics, server
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
    if not await runtimes.runtimes_served(SETTINGS.namespaces):
        raise kopf.PermanentError(
            "the ToolRuntime CRD (toolruntimes.baton.dev/v1alpha1) is not served: install it "
            "(kubectl apply -f crds/, or the Helm chart) before starting Baton"
        )
    if not await claims.claims_served(SETTINGS.namespaces):
        # Refused, not tolerated: a claim pins a generation, and a view that cannot list claims
        # never fills, so every retire would wait pinSeconds and then block for good, unreported.
        # Acting as if no claim existed would be safe only while the CRD stays absent.
        raise kopf.PermanentError(
            "the ToolRuntimeClaim CRD (toolruntimeclaims.baton.dev/v1alpha1) is not served: install it "
            "(kubectl apply -f crds/, or the Helm chart) before starting Baton; every retire waits for "
            "the claims it cannot list"
        )
    controller = _controller()
    if not controller.started:
        # The ports first: a bind error fails startup before anything acts (kopf retries it).
        metrics.REGISTRY.register(metrics.RuntimeCollector(controller.runtime_gauges))
        metrics.REGISTRY.register(metrics.QueueCollector(controller.running))
        await server.start(
            metrics_bind=SETTINGS.metrics_bind,
            health_bind=SETTINGS.health_bind,
            is_ready=lambda: (controller.started and not controller.shutting_down,
                                "shutting down" if controller.shutting_down else ("ok" if controller.started else "starting")),
        )
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
    log.info("baton started", extra={"identity": settings.identity, "namespaces": ",".join(settings.namespaces) or "*",
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
