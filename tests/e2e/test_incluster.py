"""Baton in a real cluster (kind): its image built from the Dockerfile, installed by `helm
install` as a user would, handing off real tool processes (docs/kind.md).

    .venv/bin/python -m pytest tests/e2e -q       # part of `make test`: root with podman, or Docker

The kind cluster is the ``kind_cluster`` fixture (tests/conftest.py): built and started here with
podman where there is no Docker engine, skipped with the reason where neither can run. The tool
is tests/e2e/toolserver/server.py (a long /work request, /idle 503 while one is in flight, a
SIGTERM handler that finishes it), in its own image. Every timestamp compared comes from the
pod status the kubelet wrote; every order from the API server's watch.

Network rule: the tests reach the cluster only through the API server on 127.0.0.1; in-cluster
traffic (a client pod to the tool's Service, the operator's drain probe) stays inside the kind
node's network namespace, on 198.19.0.0/16.
"""
from __future__ import annotations

import ipaddress
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.chart import CHART, adopt_crd, classify_denials
from harness.cluster import Cluster, load_kind_module
from harness.runtimes import Runtimes, runtime_manifest
from harness.scenarios import cleanup_failure_scenario, read_or_none
from harness.watchlog import PodEvent, PodWatch

ROOT = Path(__file__).resolve().parents[2]
TOOLSERVER = ROOT / "tests" / "e2e" / "toolserver"
RELEASE = "baton-e2e"
CLUSTER_NET = ipaddress.ip_network("198.19.0.0/16")
pytestmark = pytest.mark.timeout(900)


@dataclass
class Images:
    operator: str
    toolserver: str


def _load(kind_cluster: Cluster) -> Images:
    route = kind_cluster.kind
    assert route is not None, "the kind_cluster fixture sets .kind"
    if route.docker:
        # A laptop with Docker: the Dockerfile's pinned python base, `kind load docker-image`.
        # The tool server under the name examples/*.yaml use (hack/kind.py TOOLSERVER_IMAGE).
        ops, tool = "baton:e2e", load_kind_module().TOOLSERVER_IMAGE
        for tag, ctx, extra in ((ops, ROOT, []), (tool, TOOLSERVER, ["-f", str(TOOLSERVER / "Containerfile")])):
            subprocess.run(["docker", "build", "-t", tag, *extra, str(ctx)], check=True, timeout=1200)
            subprocess.run([str(route.kind), "load", "docker-image", "--name", route.name, tag],
                           check=True, timeout=300)
        return Images(ops, tool)
    plane = load_kind_module()
    built = plane.app_images()
    for archive in (built.operator_archive, built.toolserver_archive):
        plane.load_archive(route.kind, route.name, archive, route.env)
    return Images(built.operator, built.toolserver)


@pytest.fixture(scope="module")
def images(kind_cluster: Cluster) -> Images:
    return _load(kind_cluster)


@pytest.fixture(scope="module")
def release(kind_cluster: Cluster, images: Images) -> Iterator[str]:
    """The chart installed with the built image; Pod Security "restricted" enforced on its
    namespace; every other value the chart's default (all namespaces watched)."""
    core = client.CoreV1Api(kind_cluster.api_client)
    ns = f"baton-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest", "baton.dev/test": "true"}}})
    adopt_crd(kind_cluster, RELEASE, ns)
    repo, _, tag = images.operator.rpartition(":")
    kind_cluster.helm("install", RELEASE, str(CHART), "-n", ns, "--wait", "--timeout", "300s",
                      "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
                      "--set", "image.pullPolicy=Never", timeout=360)
    try:
        yield ns
    finally:
        kind_cluster.helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "180s",
                          timeout=240, check=False)
        try:
            core.delete_namespace(ns)
        except ApiException as e:
            if e.status != 404:
                raise


def operator_pods(cluster: Cluster, ns: str | None = None) -> list[Any]:
    core = client.CoreV1Api(cluster.api_client)
    sel = f"app.kubernetes.io/instance={RELEASE}"
    pods = (core.list_namespaced_pod(ns, label_selector=sel) if ns
            else core.list_pod_for_all_namespaces(label_selector=sel))
    return list(pods.items)


def tool_manifest(name: str, image: str, *, grace: int = 10, ignore_sigterm: bool = False,
                  budgets: dict[str, int] | None = None) -> dict[str, Any]:
    m = runtime_manifest(
        name, image=image, service=True,
        budgets={"connectSeconds": 120, "drainSeconds": 40, "terminationGraceSeconds": grace,
                 "cleanupSeconds": grace + 60, **(budgets or {})},
        drain_probe={"httpGet": {"path": "/idle", "port": 8080}, "periodSeconds": 1})
    [c] = m["spec"]["template"]["spec"]["containers"]
    env = [{"name": "VERSION", "value": "1"}]
    if ignore_sigterm:
        env.append({"name": "IGNORE_SIGTERM", "value": "1"})
    c.update({"imagePullPolicy": "Never", "env": env,
              "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}})
    return m


def bump_version(rts: Runtimes, name: str) -> None:
    """A template change: generation 2 runs with VERSION=2."""
    containers = rts.get(name)["spec"]["template"]["spec"]["containers"]
    for e in containers[0]["env"]:
        if e["name"] == "VERSION":
            e["value"] = "2"
    rts.patch(name, {"spec": {"template": {"spec": {"containers": containers}}}})


class LogFollower:
    """The log of a pod's container from now until the container exits (the pod's name is
    shared by every generation: this follows the one running now), in a thread, bounded.

    The stream's chunks do not end at line ends: they are joined before lines are cut. An error
    that ends the stream is kept for the failure message instead of dying with the thread."""

    def __init__(self, core: client.CoreV1Api, ns: str, pod: str, timeout: float = 300) -> None:
        self._chunks: list[str] = []
        self.error: BaseException | None = None
        self._t = threading.Thread(target=self._run, args=(core, ns, pod, timeout), daemon=True)
        self._t.start()

    def _run(self, core: client.CoreV1Api, ns: str, pod: str, timeout: float) -> None:
        try:
            resp = core.read_namespaced_pod_log(pod, ns, follow=True, _preload_content=False,
                                                _request_timeout=timeout)
            for raw in resp.stream(decode_content=True):
                self._chunks.append(raw.decode(errors="replace"))
        except Exception as e:  # noqa: BLE001 - reported by describe(), not lost with the thread
            self.error = e

    @property
    def lines(self) -> list[str]:
        return "".join(list(self._chunks)).splitlines()

    def join(self, timeout: float) -> list[str]:
        self._t.join(timeout)
        return self.lines

    def has(self, text: str) -> bool:
        return any(text in ln for ln in self.lines)

    def describe(self) -> str:
        state = "following" if self._t.is_alive() else f"ended (error: {self.error!r})"
        return f"{state}; {len(self.lines)} line(s):\n" + "\n".join(self.lines[-20:])


def client_pod(core: client.CoreV1Api, ns: str, name: str, image: str, url: str) -> None:
    """A pod that sends one GET through the tool's Service (its ClusterIP), inside the cluster."""
    core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "get", "image": image, "imagePullPolicy": "Never",
                        "args": ["get", url]}]}})


def pod_phase(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    phase = core.read_namespaced_pod(name, ns).status.phase
    return phase if phase in ("Succeeded", "Failed") else None


def terminated(ev: PodEvent, container: str = "server") -> Any:
    state = ev.container_states.get(container)
    assert state is not None and state.terminated is not None, f"{ev.name} {ev.uid}: {state}"
    return state.terminated


def started_at(watch: PodWatch, runtime: str, generation: int) -> Any:
    """When generation N's container started, from the first status that says so."""
    uids = {e.uid for e in watch.added_gen(runtime, generation)}
    for e in watch.snapshot():
        st = e.container_states.get("server") if e.uid in uids else None
        if st is not None and st.running is not None:
            return st.running.started_at
        if st is not None and st.terminated is not None:
            return st.terminated.started_at
    raise AssertionError(f"no start of {runtime} generation {generation} in the watch")


def service_ip(rts: Runtimes, name: str) -> str:
    svc = wait_for(lambda: read_or_none(lambda: rts.core.read_namespaced_service(name, rts.ns)),
                   timeout=30, what=f"Service {name}")
    ip = str(svc.spec.cluster_ip)
    assert ipaddress.ip_address(ip) in CLUSTER_NET, f"ClusterIP {ip} outside {CLUSTER_NET}"
    return ip


def slice_addresses(cluster: Cluster, ns: str, service: str) -> set[str]:
    disco = client.DiscoveryV1Api(cluster.api_client)
    out: set[str] = set()
    for s in disco.list_namespaced_endpoint_slice(
            ns, label_selector=f"kubernetes.io/service-name={service}").items:
        for ep in s.endpoints or []:
            out.update(ep.addresses or [])
    return out


def start_in_flight(cluster: Cluster, rts: Runtimes, name: str, image: str,
                    seconds: int) -> tuple[LogFollower, str]:
    """Generation 1 Ready; its log followed; a client pod's request of `seconds` in flight to it
    through the Service. Returns (the log, generation 1's pod IP)."""
    rts.create(tool_manifest(name, image))
    rts.wait_ready(name, 1, timeout=180)
    g1 = rts.gen_pod(name, 1)
    assert g1 is not None and ipaddress.ip_address(g1.status.pod_ip) in CLUSTER_NET
    log = LogFollower(rts.core, rts.ns, name)
    ip = service_ip(rts, name)
    # The EndpointSlice names g1 before the client starts; kube-proxy's rules may still lag it,
    # which the client's bounded connect wait covers.
    wait_for(lambda: str(g1.status.pod_ip) in slice_addresses(cluster, rts.ns, name), timeout=60,
             what=f"{name} g1 in the Service's EndpointSlice")
    client_name = f"{name}-client"
    client_pod(rts.core, rts.ns, client_name, image, f"http://{ip}/work?seconds={seconds}")
    try:
        wait_for(lambda: log.has("work start"), timeout=120,
                 what=f"the client's request in flight to {name} g1")
    except Exception as e:
        raise AssertionError(f"{e}\nclient pod: {client_report(rts, client_name)}\n"
                             f"{name}'s log: {log.describe()}") from e
    return log, str(g1.status.pod_ip)


def client_report(rts: Runtimes, client_name: str) -> str:
    """The client pod's phase and log, and kube-proxy's state and log (it carries ClusterIP
    traffic), for a failure message."""
    try:
        pod = rts.core.read_namespaced_pod(client_name, rts.ns)
        out = rts.core.read_namespaced_pod_log(client_name, rts.ns)
        proxies = rts.core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-proxy").items
        report = [f"phase {pod.status.phase}; log:\n{out}"]
        for kp in proxies:
            restarts = [cs.restart_count for cs in kp.status.container_statuses or []]
            tail = rts.core.read_namespaced_pod_log(kp.metadata.name, "kube-system", tail_lines=30)
            report.append(f"{kp.metadata.name}: phase {kp.status.phase}, restarts {restarts}; log tail:\n{tail}")
    except ApiException as e:
        return f"unreadable ({e.status} {e.reason})"
    return "\n".join(report) if proxies else "\n".join([*report, "no kube-proxy pod"])


def assert_request_completed(rts: Runtimes, name: str) -> str:
    client_name = f"{name}-client"
    phase = wait_for(lambda: pod_phase(rts.core, rts.ns, client_name), timeout=120,
                     what=f"{client_name} finished")
    out = rts.core.read_namespaced_pod_log(client_name, rts.ns)
    assert phase == "Succeeded" and re.search(r"answer 200 done version=1\b", out), out
    return out


# --- the tests ----------------------------------------------------------------------------------


def test_operator_pods_ready_and_metrics_through_service(kind_cluster: Cluster, release: str) -> None:
    """Both replicas Ready under Pod Security "restricted" (non-root, read-only root filesystem):
    startup, liveness and readiness probes pass with no restart; /metrics answers through the
    metrics Service (the API server's service proxy: from here only 127.0.0.1 is dialled)."""
    pods = operator_pods(kind_cluster, release)
    assert len(pods) == 2, [p.metadata.name for p in pods]
    for p in pods:
        [cs] = p.status.container_statuses
        assert cs.ready and cs.started and cs.restart_count == 0, (p.metadata.name, cs)
        sc = p.spec.security_context
        assert sc.run_as_non_root and sc.run_as_user == 65532
        assert p.spec.containers[0].security_context.read_only_root_filesystem
    core = client.CoreV1Api(kind_cluster.api_client)
    [svc] = core.list_namespaced_service(
        release, label_selector=f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=metrics").items
    text = kind_cluster.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{release}/services/http:{svc.metadata.name}:metrics/proxy/metrics").stdout
    assert re.search(r"^baton_\w+", text, re.M), text[:2000]


def test_handoff_drains_an_in_flight_request_through_the_service(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    rts = Runtimes(kind_cluster.api_client, kind_namespace)
    watch = PodWatch(kind_cluster.api_client, kind_namespace)
    try:
        log, g1_ip = start_in_flight(kind_cluster, rts, "tool", images.toolserver, seconds=20)
        assert g1_ip in slice_addresses(kind_cluster, kind_namespace, "tool")
        bump_version(rts, "tool")
        # Admission stops: g1 leaves the EndpointSlice while it still runs the request.
        wait_for(lambda: rts.gen_pod("tool", 1) is not None and not log.has("work done")
                 and g1_ip not in slice_addresses(kind_cluster, kind_namespace, "tool"),
                 timeout=15, what="g1 out of the EndpointSlice while its request is in flight")
        rts.wait_ready("tool", 2, timeout=240)
        lines = log.join(timeout=30)
        client_log = assert_request_completed(rts, "tool")
    finally:
        watch.stop()
    assert watch.assert_one_at_a_time("tool") == [1, 2]
    # The drain probe saw 503 until the request finished, then 200; SIGTERM came after that.
    idx = {k: next((i for i, ln in enumerate(lines) if k in ln), None)
           for k in ("idle 503", "work done", "SIGTERM", "exit")}
    first_200_after = next((i for i, ln in enumerate(lines)
                            if "idle 200" in ln and idx["work done"] is not None and i > idx["work done"]), None)
    assert None not in idx.values() and first_200_after is not None, "\n".join(lines)
    assert idx["idle 503"] < idx["work done"] < first_200_after < idx["SIGTERM"] < idx["exit"], "\n".join(lines)
    assert not any("idle 200" in ln for ln in lines[idx["idle 503"]:idx["work done"]]), "\n".join(lines)
    # g1 exited on its SIGTERM (0, not the kubelet's 137) before g2's container started.
    [g1_gone] = watch.deleted_gen("tool", 1)
    t1 = terminated(g1_gone)
    g2_start = started_at(watch, "tool", 2)
    print(f"g1 finished {t1.finished_at} (exit {t1.exit_code}); g2 started {g2_start}; client: {client_log.strip()}")
    assert t1.exit_code == 0, t1
    assert t1.finished_at <= g2_start, (t1.finished_at, g2_start)


def test_operator_pod_deleted_mid_handoff_the_other_replica_finishes(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    """The replica holding the runtime's Lease is deleted while it drains (a real SIGTERM, the
    chart's grace): it finishes its step and hands the Lease back; another replica ends the
    handoff; the request in flight completes; one generation at a time throughout."""
    rts = Runtimes(kind_cluster.api_client, kind_namespace)
    watch = PodWatch(kind_cluster.api_client, kind_namespace)
    op_watch = PodWatch(kind_cluster.api_client, release)
    coord = client.CoordinationV1Api(kind_cluster.api_client)
    core = client.CoreV1Api(kind_cluster.api_client)

    def holder() -> str | None:
        lease = read_or_none(lambda: coord.read_namespaced_lease("baton-tool", kind_namespace))
        return lease.spec.holder_identity if lease is not None else None

    try:
        start_in_flight(kind_cluster, rts, "tool", images.toolserver, seconds=20)
        bump_version(rts, "tool")
        draining = wait_for(lambda: holder() if (rts.status("tool").get("transition") or {}).get("step")
                            == "Draining" else None, timeout=30, what="the handoff Draining under a Lease")
        core.delete_namespaced_pod(draining, release)  # the chart's terminationGracePeriodSeconds
        holders: list[str] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # bounded: the handoff's budgets are far below this
            h = holder()
            if h and (not holders or holders[-1] != h):
                holders.append(h)
            st = rts.status("tool")
            if (st.get("current") or {}).get("generation") == 2 and not st.get("transition"):
                break
            time.sleep(0.2)
        rts.wait_ready("tool", 2, timeout=5)
        assert_request_completed(rts, "tool")
        wait_for(lambda: op_watch.deleted(draining), timeout=120, what=f"operator pod {draining} gone")
    finally:
        watch.stop()
        op_watch.stop()
    assert watch.assert_one_at_a_time("tool") == [1, 2]
    assert any(h != draining for h in holders), (draining, holders)
    # The deleted replica shut down on SIGTERM within its grace (exit 0, not SIGKILL's 137).
    [gone] = [e for e in op_watch.deleted(draining)]
    t = terminated(gone, "operator")
    print(f"deleted {draining} (exit {t.exit_code} at {t.finished_at}); Lease holders after: {holders}")
    assert t.exit_code == 0, t


def test_tool_ignoring_sigterm_is_killed_at_its_grace(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    rts = Runtimes(kind_cluster.api_client, kind_namespace)
    watch = PodWatch(kind_cluster.api_client, kind_namespace)
    try:
        rts.create(tool_manifest("deaf", images.toolserver, grace=8, ignore_sigterm=True))
        rts.wait_ready("deaf", 1, timeout=180)
        log = LogFollower(rts.core, rts.ns, "deaf")
        bump_version(rts, "deaf")
        st = rts.wait_ready("deaf", 2, timeout=240)
        lines = log.join(timeout=30)
    finally:
        watch.stop()
    # It got the SIGTERM and did not exit on it.
    assert any("SIGTERM ignored" in ln for ln in lines) and not any(ln.endswith(" exit") for ln in lines), lines
    assert watch.assert_one_at_a_time("deaf") == [1, 2]
    [g1_gone] = watch.deleted_gen("deaf", 1)
    t1 = terminated(g1_gone)
    g2_start = started_at(watch, "deaf", 2)
    print(f"g1 deletionTimestamp {g1_gone.deletion_timestamp}; killed {t1.finished_at} "
          f"(exit {t1.exit_code}); g2 started {g2_start}")
    # SIGKILL (128 + 9) at the end of the 8 s grace: at the deletion's deadline (the API server
    # sets it to the delete's time + grace), give or take the kubelet's start of its own count
    # and the 1 s resolution of both times (seen: 1 s before it); an exit on SIGTERM would come
    # about 8 s before it.
    assert t1.exit_code == 137, t1
    assert t1.finished_at >= g1_gone.deletion_timestamp - timedelta(seconds=3), (t1, g1_gone.deletion_timestamp)
    assert t1.finished_at <= g2_start
    assert [h["outcome"] for h in st["history"]] == ["Retired"]
    cf = next(c for c in st["conditions"] if c["type"] == "CleanupFailed")
    assert cf["status"] == "False", cf


def test_cleanup_failure_is_held_until_a_force_recovery(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    """Invariant 5 with a real kubelet: generation 1's container exits on SIGTERM, but a
    finalizer keeps its pod Terminating past cleanupSeconds: CleanupFailed is held and no
    generation 2 starts until a force recovery names generation 1."""
    rts = Runtimes(kind_cluster.api_client, kind_namespace)
    watch = PodWatch(kind_cluster.api_client, kind_namespace)
    try:
        cleanup_failure_scenario(
            rts, watch, None, change=bump_version, ready_timeout=180,
            manifest=lambda name, budgets=None: tool_manifest(name, images.toolserver, grace=2,
                                                              budgets=budgets))
    finally:
        watch.stop()


def test_operator_logs_show_no_rbac_denials(kind_cluster: Cluster, release: str) -> None:
    logs = kind_cluster.kubectl("logs", "-n", release, "-l", f"app.kubernetes.io/instance={RELEASE}",
                                "--tail=-1", "--prefix").stdout
    _, unknown = classify_denials(logs)
    assert not unknown, "the operator hit RBAC denials in the cluster:\n" + "\n".join(unknown[:20])


def test_helm_test_passes_on_the_installed_release(kind_cluster: Cluster, release: str) -> None:
    """`helm test`: the chart's test Pod (the operator image) reads /metrics through the metrics
    Service and finds Baton's metrics (charts/baton/templates/tests/test-metrics.yaml)."""
    proc = kind_cluster.helm("test", RELEASE, "-n", release, "--timeout", "180s", timeout=240)
    assert re.search(r"^TEST SUITE:\s+\S+-test-metrics$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^Phase:\s+Succeeded$", proc.stdout, re.M), proc.stdout


def test_an_example_runs_as_written(kind_cluster: Cluster, release: str, images: Images) -> None:
    """examples/mcp-server.yaml applied unmodified (its namespace `agents`, its Secret, the tool
    server image the route loaded) under the installed chart: generation 1 Ready, its Service
    in front, the pod running the example's image."""
    example = ROOT / "examples" / "mcp-server.yaml"
    core = client.CoreV1Api(kind_cluster.api_client)
    ns = "agents"  # the namespace the example names
    core.create_namespace({"metadata": {"name": ns, "labels": {"baton.dev/test": "true"}}})
    rts = Runtimes(kind_cluster.api_client, ns)
    try:
        wait_for(lambda: read_or_none(lambda: core.read_namespaced_service_account("default", ns)) is not None,
                 timeout=60, what=f"ServiceAccount {ns}/default")
        kind_cluster.kubectl("apply", "-f", str(example))
        rts.wait_ready("search-mcp", 1, timeout=240)
        [pod] = rts.pods("search-mcp")
        assert [c.image for c in pod.spec.containers] == [images.toolserver]
        assert all(s.ready for s in pod.status.container_statuses), pod.status.container_statuses
        svc = core.read_namespaced_service("search-mcp", ns)
        assert svc.spec.session_affinity == "ClientIP"
        print(kind_cluster.kubectl("get", "trt,pods,svc", "-n", ns, "-o", "wide").stdout)
    finally:
        # The operator still runs: it retires the generation and removes its finalizer.
        kind_cluster.kubectl("delete", "-f", str(example), "--ignore-not-found", "--wait=true",
                             "--timeout=180s", check=False, timeout=240)
        core.delete_namespace(ns)
        wait_for(lambda: read_or_none(lambda: core.read_namespace(ns)) is None, timeout=180,
                 what=f"namespace {ns} deleted")


def test_helm_uninstall_leaves_no_baton_pod(kind_cluster: Cluster, release: str) -> None:
    """Runs last in this module (pytest keeps file order): the release's fixture then finds it
    uninstalled."""
    assert operator_pods(kind_cluster), "the release runs before the uninstall"
    kind_cluster.helm("uninstall", RELEASE, "-n", release, "--wait", "--timeout", "180s", timeout=240)
    wait_for(lambda: not operator_pods(kind_cluster), timeout=120,
             what=f"no pod of release {RELEASE} left in any namespace")
    assert not client.CoreV1Api(kind_cluster.api_client).list_namespaced_pod(release).items
