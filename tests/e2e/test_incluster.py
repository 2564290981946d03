"""The operator image running in a cluster, installed by the chart (kind backend).

    BATON_TEST_BACKEND=kind .venv/bin/python -m pytest tests/e2e -q     # needs Docker + pytest-kind

Builds the image from the Dockerfile, loads it into the kind cluster, installs the chart with
it (2 replicas, watching the test's namespace), and runs the chart tests' scenarios against
the operator in the cluster. The tool server of each runtime is the Baton image itself running
`python -m http.server` (already in the cluster: nothing is pulled). On the local plane (kwok:
no container runs) and without a Docker engine these tests are skipped, saying why.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness import baton
from harness.chart import CHART, adopt_crd, classify_denials
from harness.scenarios import cleanup_failure_scenario, handoff_scenario

ROOT = Path(__file__).resolve().parents[2]
IMAGE_REPO = "baton"
IMAGE_TAG = "e2e"
IMAGE = f"{IMAGE_REPO}:{IMAGE_TAG}"
RELEASE = "baton-e2e"


@pytest.fixture(scope="module")
def kind_cluster(cluster: Any) -> Any:
    if cluster.backend != "kind":
        pytest.skip(f"in-cluster e2e needs BATON_TEST_BACKEND=kind (a cluster that runs containers); "
                    f"this session's backend is {cluster.backend!r}, whose pods run no containers "
                    f"(tests/integration/test_chart_install.py covers the chart there)")
    return cluster


@pytest.fixture(scope="module")
def image(kind_cluster: Any) -> str:
    """Build the image (Docker) and load it into the kind cluster."""
    docker = shutil.which("docker")
    assert docker, "the kind backend runs only with Docker"
    subprocess.run([docker, "build", "-t", IMAGE, str(ROOT)], check=True, timeout=1200)
    from pytest_kind import KindCluster  # type: ignore[import-not-found]

    kind = KindCluster(name=os.environ.get("BATON_TEST_KIND_NAME", "baton-test"),
                       kubeconfig=Path(kind_cluster.kubeconfig))
    kind.ensure_kind()
    kind.load_docker_image(IMAGE)
    return IMAGE


@pytest.fixture
def release(kind_cluster: Any, image: str, namespace: str) -> Iterator[str]:
    core = client.CoreV1Api(kind_cluster.api_client)
    ns = f"baton-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "baton.dev/test": "true"}}})
    adopt_crd(kind_cluster, RELEASE, ns)
    kind_cluster.helm("install", RELEASE, str(CHART), "-n", ns, "--wait", "--timeout", "300s",
                      "--set", f"image.repository={IMAGE_REPO}", "--set", f"image.tag={IMAGE_TAG}",
                      "--set", "image.pullPolicy=Never", "--set", "operator.leaseSeconds=5",
                      "--set-json", f'watch={{"namespaces":["{namespace}"]}}', timeout=360)
    try:
        yield ns
    finally:
        rts = baton.Runtimes(kind_cluster.api_client, namespace)
        for rt in rts.custom.list_namespaced_custom_object(baton.GROUP, baton.VERSION, namespace,
                                                           baton.PLURAL).get("items", []):
            rts.delete(rt["metadata"]["name"])  # retired by the operator, still running
        kind_cluster.helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "120s", timeout=180)
        try:
            core.delete_namespace(ns)
        except ApiException as e:
            if e.status != 404:
                raise


def tool_manifest(name: str, **kw: Any) -> dict[str, Any]:
    """A runtime whose pod really runs: the Baton image serving HTTP on 8080."""
    m = baton.runtime_manifest(name, image=IMAGE, **kw)
    [c] = m["spec"]["template"]["spec"]["containers"]
    c.update({"imagePullPolicy": "Never", "command": ["/opt/baton/bin/python", "-m", "http.server", "8080"],
              "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
              "env": [{"name": "VERSION", "value": "1"}]})
    m["spec"]["budgets"].update({"connectSeconds": 60, "terminationGraceSeconds": 2})
    return m


def bump_env(rts: baton.Runtimes, name: str) -> None:
    rt = rts.get(name)
    containers = rt["spec"]["template"]["spec"]["containers"]
    containers[0]["env"] = [{"name": "VERSION", "value": "2"}]
    rts.patch(name, {"spec": {"template": {"spec": {"containers": containers}}}})


def test_in_cluster_operator_hands_off_and_holds_cleanup_failures(
        kind_cluster: Any, release: str, namespace: str) -> None:
    rts = baton.Runtimes(kind_cluster.api_client, namespace)
    watch = baton.PodWatch(kind_cluster.api_client, namespace)
    try:
        handoff_scenario(rts, watch, None, manifest=tool_manifest, change=bump_env,
                         first_ready_timeout=120, ready_timeout=120)
        cleanup_failure_scenario(rts, watch, None, manifest=tool_manifest, change=bump_env,
                                 ready_timeout=120)
    finally:
        watch.stop()
    logs = kind_cluster.kubectl("logs", "-n", release, "-l", f"app.kubernetes.io/instance={RELEASE}",
                                "--tail=-1", "--prefix").stdout
    _, unknown = classify_denials(logs)
    assert not unknown, "the operator hit RBAC denials in the cluster:\n" + "\n".join(unknown[:20])


def test_helm_test_passes_on_the_installed_release(kind_cluster: Any, release: str) -> None:
    """`helm test`: the chart's test Pod (the operator image) reads /metrics through the metrics
    Service and finds Baton's metrics (charts/baton/templates/tests/test-metrics.yaml)."""
    # No --logs: the hook-delete-policy removes the Pod once it succeeded.
    proc = kind_cluster.helm("test", RELEASE, "-n", release, "--timeout", "120s", timeout=180)
    assert re.search(r"^TEST SUITE:\s+\S+-test-metrics$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^Phase:\s+Succeeded$", proc.stdout, re.M), proc.stdout
