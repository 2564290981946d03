"""Fixtures for tests against a real Kubernetes API server: ``cluster``, ``namespace``,
``kwok_nodes``, ``kind_cluster``, ``kind_namespace``; the operator fixtures come from the plugin
harness.fixtures. tests/README.md is their reference (the backends, the fixtures, how pods behave
on the local plane). Also: marks by directory (unit, integration, e2e, chaos, model), and unit
tests may not ask for a cluster fixture.
"""
from __future__ import annotations

import re
import time
import uuid
import warnings
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.cluster import BackendRefused, BackendUnavailable, Cluster, start

# The operator fixtures (crd, operators, rts, pod_watch), for tests/integration and tests/chaos.
pytest_plugins = ["harness.fixtures"]

TESTS = Path(__file__).resolve().parent
CLUSTER_FIXTURES = {"cluster", "namespace", "kwok_nodes", "kind_cluster", "kind_namespace"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(TESTS).parts if str(item.path).startswith(
            str(TESTS)) else ()
        top = rel[0] if rel else ""
        if top in ("integration", "e2e", "chaos"):
            item.add_marker(pytest.mark.integration)
        if top == "chaos":
            item.add_marker(pytest.mark.chaos)
        if top == "e2e":
            item.add_marker(pytest.mark.e2e)
        # tests/model is `model` only: `make test-unit` (tests/unit) does not run it.
        if top == "model":
            item.add_marker(pytest.mark.model)
        if top == "unit":
            item.add_marker(pytest.mark.unit)
            used = CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))
            if used:
                raise pytest.UsageError(
                    f"{item.nodeid}: unit tests must not use cluster fixtures ({', '.join(used)})")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import os

    backend = os.environ.get("BATON_TEST_BACKEND", "local") or "local"
    c = _start_or_skip(backend, tmp_path_factory)
    mp = pytest.MonkeyPatch()
    mp.setenv("KUBECONFIG", c.kubeconfig)
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        mp.delenv(var, raising=False)
    try:
        yield c
    finally:
        mp.undo()
        c.stop()


# Module scope: the cluster (a node with its own control plane) is deleted, and the host
# restored, as soon as the module that asked for it is done, not after the whole suite.
@pytest.fixture(scope="module")
def kind_cluster(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import os

    if (os.environ.get("BATON_TEST_BACKEND", "local") or "local") == "kind":
        yield request.getfixturevalue("cluster")
        return
    c = _start_or_skip("kind", tmp_path_factory)
    try:
        yield c
    finally:
        c.stop()


def _start_or_skip(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """The backend's cluster; a skip saying why where it cannot run, an error where refused."""
    try:
        return start(backend, tmp_path_factory.mktemp(f"cluster-{backend}"))
    except BackendUnavailable as e:
        pytest.skip(str(e))
    except BackendRefused as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def _kind_namespace_reaper(kind_cluster: Cluster) -> Iterator[list[str]]:
    yield from _reaping(kind_cluster)


@pytest.fixture
def kind_namespace(kind_cluster: Cluster, _kind_namespace_reaper: list[str],
                   request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _fresh_namespace(kind_cluster, _kind_namespace_reaper, request)


@pytest.fixture
def kwok_nodes(cluster: Cluster) -> None:
    if not cluster.has_kwok_nodes:
        pytest.skip(f"needs the kwok nodes of the local plane (backend {cluster.backend})")


def _namespace_name(nodename: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", nodename.lower()).strip("-")
    suffix = uuid.uuid4().hex[:6]
    return f"t-{slug[:50].rstrip('-')}-{suffix}"


@pytest.fixture(scope="session")
def _namespace_reaper(cluster: Cluster) -> Iterator[list[str]]:
    """Namespaces whose deletion was requested; waits (bounded) for them at the session's end.

    The namespace controller holds every deletion for 5 s (a constant in its code); waiting
    once for all of them instead of after each test saves those seconds per test.
    """
    yield from _reaping(cluster)


def _reaping(cluster: Cluster) -> Iterator[list[str]]:
    pending: list[str] = []
    yield pending
    _await_deleted(cluster, pending)


@pytest.fixture
def namespace(cluster: Cluster, _namespace_reaper: list[str],
              request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _fresh_namespace(cluster, _namespace_reaper, request)


@pytest.fixture
def make_namespace(cluster: Cluster, _namespace_reaper: list[str],
                   request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """Factory: one more fresh namespace per call, labelled and reaped as `namespace` is (its
    pods force-deleted, its deletion requested; finalizers still left are stripped at the end)."""
    core = client.CoreV1Api(cluster.api_client)
    made: list[str] = []

    def make() -> str:
        name = _namespace_name(request.node.name)
        core.create_namespace({"metadata": {"name": name, "labels": {"baton.dev/test": "true"}}})
        made.append(name)
        wait_for(lambda: _has_default_sa(core, name), timeout=30, what=f"ServiceAccount {name}/default")
        return name

    yield make
    for name in made:
        if _request_deletion(cluster, name):
            _namespace_reaper.append(name)


def _fresh_namespace(cluster: Cluster, reaper: list[str],
                     request: pytest.FixtureRequest) -> Iterator[str]:
    core = client.CoreV1Api(cluster.api_client)
    name = _namespace_name(request.node.name)
    core.create_namespace({"metadata": {"name": name, "labels": {"baton.dev/test": "true"}}})
    wait_for(lambda: _has_default_sa(core, name), timeout=30, what=f"ServiceAccount {name}/default")
    try:
        yield name
    finally:
        if _request_deletion(cluster, name):
            reaper.append(name)


def _has_default_sa(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespaced_service_account("default", ns)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


NS_REMAINING = re.compile(r"([a-z0-9.-]+) has \d+ resource instances")


def _request_deletion(cluster: Cluster, name: str) -> bool:
    """Force-delete the namespace's pods, then delete it. False when it is gone already."""
    core = client.CoreV1Api(cluster.api_client)
    try:
        for pod in core.list_namespaced_pod(name).items:
            if pod.metadata.finalizers:
                _ignore_404(lambda: core.patch_namespaced_pod(
                    pod.metadata.name, name, {"metadata": {"finalizers": None}}))
            _ignore_404(lambda: core.delete_namespaced_pod(pod.metadata.name, name,
                                                           grace_period_seconds=0))
        core.delete_namespace(name)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        warnings.warn(f"could not delete test namespace {name}: {e.status} {e.reason}")
        return False


def _await_deleted(cluster: Cluster, names: list[str], timeout: float = 60.0) -> None:
    """Wait (bounded) until the namespaces are gone; after 10 s strip finalizers left in them."""
    core = client.CoreV1Api(cluster.api_client)
    left = list(names)
    t0 = time.monotonic()
    stripped: set[str] = set()
    for _ in range(int(timeout / 0.25) + 1):
        still = []
        for name in left:
            try:
                ns = core.read_namespace(name)
            except ApiException as e:
                if e.status == 404:
                    continue
                raise
            still.append(name)
            if name not in stripped and time.monotonic() - t0 > 10:
                stripped.add(name)
                _strip_remaining(cluster, name, ns)
        left = still
        if not left or time.monotonic() - t0 >= timeout:
            break
        time.sleep(0.25)
    if left:
        warnings.warn(f"test namespaces still exist {timeout}s after their deletion: {left}")


def _ignore_404(call: Callable[[], object]) -> None:
    try:
        call()
    except ApiException as e:
        if e.status != 404:
            raise


def _strip_remaining(cluster: Cluster, name: str, ns: client.V1Namespace) -> None:
    core = client.CoreV1Api(cluster.api_client)
    for pod in core.list_namespaced_pod(name).items:
        if pod.metadata.finalizers:
            _ignore_404(lambda p=pod: core.patch_namespaced_pod(
                p.metadata.name, name, {"metadata": {"finalizers": None}}))
    custom = client.CustomObjectsApi(cluster.api_client)
    ext = client.ApiextensionsV1Api(cluster.api_client)
    for cond in (ns.status.conditions or []) if ns.status else []:
        for resource in NS_REMAINING.findall(cond.message or ""):
            plural, _, group = resource.partition(".")
            if not group:
                continue
            try:
                crd = ext.read_custom_resource_definition(resource)
            except ApiException:
                continue
            version = next((v.name for v in crd.spec.versions if v.storage), None)
            if version is None:
                continue
            objs = custom.list_namespaced_custom_object(group, version, name, plural)
            for obj in objs.get("items", []):
                if obj.get("metadata", {}).get("finalizers"):
                    _ignore_404(lambda o=obj: custom.patch_namespaced_custom_object(
                        group, version, name, plural, o["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        _content_type="application/merge-patch+json"))
