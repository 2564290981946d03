"""Fixtures for running Baton operator processes against the session's cluster.

Shared by tests/integration and tests/chaos: tests/conftest.py loads this module as a plugin
(`pytest_plugins`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.gateway import GatewayProcess
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, install_crd
from harness.watchlog import PodWatch


@pytest.fixture(scope="session")
def crd(cluster: Any) -> None:
    install_crd(cluster)


class OperatorSet:
    """Operator replicas of one namespace, stopped together: what the `operators` fixture hands
    out, usable outside a fixture too (tests/chaos runs orderings side by side)."""

    def __init__(self, cluster: Any, namespace: str, log_dir: Path) -> None:
        self.cluster, self.namespace, self.log_dir = cluster, namespace, log_dir
        self.started: list[OperatorProcess] = []

    def start(self, identity: str = "op-a", *, namespaces: list[str] | None = None,
              env: dict[str, str] | None = None, kubeconfig: str | None = None,
              wait: bool = True) -> OperatorProcess:
        """Start one replica (watching [namespace] unless told otherwise)."""
        proc = OperatorProcess(self.cluster, self.log_dir, identity=identity,
                                     namespaces=namespaces or [self.namespace], env=env,
                                     kubeconfig=kubeconfig)
        self.started.append(proc)
        return proc.start() if wait else proc

    def close(self, *, print_logs: bool = False) -> None:
        for proc in self.started:
            proc.kill()
            if print_logs:
                print(f"--- log of operator {proc.identity} ---\n{proc.log_tail(80)}")
        # No operator runs any more: release what it would have retired, so the namespace can go.
        custom = client.CustomObjectsApi(self.cluster.api_client)
        for rt in custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                       PLURAL).get("items", []):
            if rt["metadata"].get("finalizers"):
                try:
                    custom.patch_namespaced_custom_object(
                        GROUP, VERSION, self.namespace, PLURAL, rt["metadata"]["name"],
                        {"metadata": {"finalizers": None}})
                except ApiException as e:
                    if e.status != 404:
                        raise


@pytest.fixture
def operators(cluster: Any, crd: None, namespace: str, tmp_path: Path,
              request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Factory: operators(identity, namespaces=[namespace], env={...}) starts one replica."""
    ops = OperatorSet(cluster, namespace, tmp_path)
    yield ops.start
    failed = getattr(request.node, "rep_call", None)
    ops.close(print_logs=failed is not None and failed.failed)


@pytest.fixture
def gateways(cluster: Any, crd: None, namespace: str, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Callable[..., GatewayProcess]]:
    """Factory: gateways(identity, env={...}) starts one gateway replica watching `namespace`,
    its Lease in `namespace` too; killed by pid after the test."""
    started: list[GatewayProcess] = []

    def start(identity: str = "gw-a", *, env: dict[str, str] | None = None) -> GatewayProcess:
        gw = GatewayProcess(cluster, tmp_path, identity=identity, namespaces=[namespace],
                            system_namespace=namespace, env=env)
        started.append(gw)
        return gw.start()

    yield start
    failed = getattr(request.node, "rep_call", None)
    for gw in started:
        gw.kill()
        if failed is not None and failed.failed:
            print(f"--- log of gateway {gw.identity} ---\n{gw.log_tail(80)}")


@pytest.fixture
def rts(cluster: Any, crd: None, namespace: str) -> Runtimes:
    return Runtimes(cluster.api_client, namespace)


@pytest.fixture
def pod_watch(cluster: Any, namespace: str) -> Iterator[PodWatch]:
    w = PodWatch(cluster.api_client, namespace)
    yield w
    w.stop()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + rep.when, rep)
