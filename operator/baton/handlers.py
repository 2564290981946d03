"""kopf wiring only: watch events wake the runtime's worker; startup and cleanup hooks.

kopf runs with peering off (standalone): replicas coordinate per runtime through the
lifecycle Leases. Only event handlers are used, so kopf itself writes nothing to the objects
(no finalizers, no progress annotations): an idle runtime costs no API writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, Mapping

import kopf

from baton import metrics, runner as runner_mod, server, settings as settings_mod
from baton.k8s import runtimes
from baton.lifecycle import manifests as mf

log = logging.getLogger("baton.handlers")

SETTINGS: settings_mod.Settings | None = None
RUNNER: runner_mod.Runner | None = None


def _runner() -> runner_mod.Runner:
    assert RUNNER is not None, "baton.handlers.install() was not called"
    return RUNNER


def install(settings: settings_mod.Settings) -> None:
    global SETTINGS, RUNNER
    SETTINGS = settings
    RUNNER = runner_mod.Runner(settings)
    # Config-ref rolls watch ConfigMaps/Secrets only where the chart grants reading them; a watch
    # that RBAC denies would be retried forever.
    if settings.watch_configmaps:
        kopf.on.event("", "v1", "configmaps")(on_configmap)
    if settings.watch_secrets:
        kopf.on.event("", "v1", "secrets")(on_secret)


@kopf.on.startup()
async def on_startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    assert SETTINGS is not None
    settings.peering.standalone = True
    # No cluster-wide scanning of namespaces and CRDs: it needs RBAC the operator should not
    # have, and the resources are resolved once at startup (the CRD must be installed first).
    settings.scanning.disabled = True
    served = await asyncio.to_thread(runtimes.runtimes_served, SETTINGS.namespaces)
    if not served:
        raise kopf.PermanentError(
            "the ToolRuntime CRD (toolruntimes.baton.dev/v1alpha1) is not served: install it "
            "(kubectl apply -f crds/, or the Helm chart) before starting Baton"
        )
    settings.posting.enabled = False  # Baton posts its own events, with reasons of its own
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=32))
    metrics.REGISTRY.register(metrics.RuntimeCollector(_runner().runtime_gauges))
    await server.start(
        metrics_bind=SETTINGS.metrics_bind,
        health_bind=SETTINGS.health_bind,
        is_ready=lambda: (not _runner().shutting_down, "shutting down" if _runner().shutting_down else "ok"),
    )
    log.info("baton started", extra={"identity": SETTINGS.identity, "namespaces": ",".join(SETTINGS.namespaces) or "*"})


@kopf.on.login()
def on_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_via_client(**kwargs)


@kopf.on.cleanup()
async def on_cleanup(**_: Any) -> None:
    log.info("stopping: no new transitions; handing back Leases")
    await _runner().shutdown()
    log.info("stopped")


# Event handlers take kopf's keyword arguments (its WatchingFn protocol). Every kind watched here
# is namespaced, so namespace is never None in practice; the guards only satisfy the type.


@kopf.on.event("baton.dev", "v1alpha1", "toolruntimes")
async def on_runtime(*, name: str, namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    _runner().wake(namespace, name)


@kopf.on.event("", "v1", "pods", labels={mf.LABEL_RUNTIME: kopf.PRESENT})
async def on_pod(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    _runner().wake(namespace, labels[mf.LABEL_RUNTIME], create=False)


@kopf.on.event("discovery.k8s.io", "v1", "endpointslices", labels={"kubernetes.io/service-name": kopf.PRESENT})
async def on_endpointslice(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    _runner().wake(namespace, labels["kubernetes.io/service-name"], create=False)


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={mf.LABEL_RUNTIME: kopf.PRESENT})
async def on_lease(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    _runner().wake(namespace, labels[mf.LABEL_RUNTIME], create=False)


async def on_configmap(*, name: str, namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    _runner().wake_config_users(namespace, "ConfigMap", name)


async def on_secret(*, name: str, namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    # Only the name is used here; Secret data is read (and hashed) by the runtime's worker.
    _runner().wake_config_users(namespace, "Secret", name)
