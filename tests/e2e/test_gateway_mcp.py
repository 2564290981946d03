"""The gateway in a real cluster (kind), tried as an agent developer would: the chart installed
with `gateway.enabled=true`, the official MCP Python SDK (`mcp` from PyPI) as both the tool (its
streamable-HTTP server, tools `fast` and `slow`) and the client (its `Client`, in a pod, calling
the runtime by its Service name), a template change while a long call runs and short calls keep
coming, in both protocol eras the SDK speaks (docs/gateway.md, "Measured on kind").

    .venv/bin/python -m pytest tests/e2e/test_gateway_mcp.py -q -s    # prints the figures

The tool and the client are tests/e2e/mcptool (server.py, client.py), one image built by
hack/kind.py from a hash-pinned lock. How the client picks each era (the SDK's
`mcp/client/client.py`, `Client.mode`): "2026-07-28" adopts the stateless revision (no
handshake; each request carries `MCP-Protocol-Version: 2026-07-28`, which the server routes to its
stateless path); "legacy" runs the initialize handshake, which this server (stateful, the SDK's
default) answers with 2025-11-25 and an `Mcp-Session-Id` held in its memory.

Network rule: the test reaches the cluster only through the API server on 127.0.0.1 and reads the
client's results from its pod log; every call stays inside the kind node (198.19.0.0/16).
"""
from __future__ import annotations

import json
import subprocess
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from baton.model import names
from dev.wait import wait_for
from harness.chart import CHART, adopt_crd
from harness.cluster import Cluster, load_kind_module
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

ROOT = Path(__file__).resolve().parents[2]
MCPTOOL = ROOT / "tests" / "e2e" / "mcptool"
RELEASE = "baton-gw"
# kind's podSubnet (hack/kind/cluster.yaml): the only addresses the gateway may dial.
POD_CIDR = "198.19.0.0/24"
GRACE = 10          # terminationGraceSeconds of the tool
SLOW = 10           # seconds of the long call
HOLD = 3            # the WebSocket stays open this long after the long calls ended
pytestmark = pytest.mark.timeout(1200)


@dataclass
class Images:
    operator: str
    mcptool: str


@pytest.fixture(scope="module")
def images(kind_cluster: Cluster) -> Images:
    route = kind_cluster.kind
    assert route is not None, "the kind_cluster fixture sets .kind"
    if route.docker:
        # A laptop with Docker: the Dockerfile's pinned base; pip fetches the locked files.
        ops, tool = "baton:e2e", "baton-mcptool:e2e"
        for tag, ctx, extra in ((ops, ROOT, []), (tool, MCPTOOL, ["-f", str(MCPTOOL / "Containerfile")])):
            subprocess.run(["docker", "build", "-t", tag, *extra, str(ctx)], check=True, timeout=1200)
            subprocess.run([str(route.kind), "load", "docker-image", "--name", route.name, tag],
                           check=True, timeout=300)
        return Images(ops, tool)
    plane = load_kind_module()
    built = plane.app_images()
    for archive in (built.operator_archive, built.mcptool_archive):
        plane.load_archive(route.kind, route.name, archive, route.env)
    return Images(built.operator, built.mcptool)


@pytest.fixture(scope="module")
def release(kind_cluster: Cluster, images: Images) -> Iterator[str]:
    """The chart with the gateway on (two replicas, allowed to dial kind's pod network only),
    in a namespace enforcing Pod Security "restricted"."""
    core = client.CoreV1Api(kind_cluster.api_client)
    ns = f"baton-gw-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest", "baton.dev/test": "true"}}})
    adopt_crd(kind_cluster, RELEASE, ns)
    repo, _, tag = images.operator.rpartition(":")
    kind_cluster.helm("install", RELEASE, str(CHART), "-n", ns, "--wait", "--timeout", "300s",
                      "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
                      "--set", "image.pullPolicy=Never", "--set", "gateway.enabled=true",
                      "--set-json", f'gateway.allowedCidrs=["{POD_CIDR}"]', timeout=360)
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


def mcp_runtime(image: str) -> dict[str, Any]:
    """No drain probe: the gateway's count of calls and WebSockets in flight is the drain."""
    m = runtime_manifest("mcp", image=image, service=True, budgets={
        "connectSeconds": 120, "drainSeconds": 90, "terminationGraceSeconds": GRACE,
        "cleanupSeconds": GRACE + 60, "admissionSeconds": 120})
    m["spec"]["service"]["gateway"] = True
    [c] = m["spec"]["template"]["spec"]["containers"]
    c.update({"imagePullPolicy": "Never", "env": [{"name": "VERSION", "value": "1"}],
              "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}})
    return m


def gateway_ips(core: client.CoreV1Api, ns: str) -> set[str]:
    pods = core.list_namespaced_pod(ns, label_selector=f"{names.LABEL_COMPONENT}={names.COMPONENT_GATEWAY}")
    return {p.status.pod_ip for p in pods.items if p.status.pod_ip}


def slice_addresses(cluster: Cluster, ns: str, service: str) -> set[str]:
    disco = client.DiscoveryV1Api(cluster.api_client)
    out: set[str] = set()
    for s in disco.list_namespaced_endpoint_slice(
            ns, label_selector=f"kubernetes.io/service-name={service}").items:
        for ep in s.endpoints or []:
            out.update(ep.addresses or [])
    return out


def events(core: client.CoreV1Api, ns: str, pod: str) -> list[dict[str, Any]]:
    """The client's JSON lines so far (its stderr, the SDK's own logging, is skipped; so is a
    last line still being written while the client runs)."""
    try:
        # The client library answers None for an empty log.
        text = core.read_namespaced_pod_log(pod, ns, _request_timeout=30) or ""
    except ApiException as e:
        if e.status in (400, 404):  # not started yet
            return []
        raise
    out = []
    for ln in text.splitlines():
        if ln.startswith("{"):
            try:
                out.append(json.loads(ln))
            except json.JSONDecodeError:
                continue
    return out


def test_mcp_sdk_clients_across_a_handoff_through_the_gateway(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    ns = kind_namespace
    rts = Runtimes(kind_cluster.api_client, ns)
    core = rts.core
    watch = PodWatch(kind_cluster.api_client, ns)
    try:
        rts.create(mcp_runtime(images.mcptool))
        rts.wait_ready("mcp", 1, timeout=240)
        g1 = rts.gen_pod("mcp", 1)
        assert g1 is not None
        # The runtime's Service routes to the gateway pods, not to g1.
        gw = wait_for(lambda: gateway_ips(core, release) or None, timeout=60, what="gateway pod IPs")
        wait_for(lambda: slice_addresses(kind_cluster, ns, "mcp") == gw, timeout=90,
                 what=f"Service mcp's endpoints = the gateway pods {gw}")
        assert g1.status.pod_ip not in gw
        host = f"mcp.{ns}.svc"
        core.create_namespaced_pod(ns, {"metadata": {"name": "mcp-client"}, "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "client", "image": images.mcptool, "imagePullPolicy": "Never",
                            "command": ["/opt/mcp/bin/python", "/srv/client.py",
                                        "--url", f"http://{host}/mcp", "--ws", f"ws://{host}/ws",
                                        "--slow", str(SLOW), "--hold", str(HOLD),
                                        "--after", "10", "--max-seconds", "400"]}]}})
        # The long calls and the WebSocket are open on g1: then the template changes.
        started = wait_for(lambda: (lambda ev: ev if sum(e["ev"] in ("slow-start", "ws-open") for e in ev) == 3
                                    else None)(events(core, ns, "mcp-client")),
                           timeout=240, interval=1, what="the client's long calls and WebSocket under way")
        t_patch = time.time()
        containers = rts.get("mcp")["spec"]["template"]["spec"]["containers"]
        containers[0]["env"] = [{"name": "VERSION", "value": "2"}]
        rts.patch("mcp", {"spec": {"template": {"spec": {"containers": containers}}}})
        wait_for(lambda: core.read_namespaced_pod("mcp-client", ns).status.phase in ("Succeeded", "Failed"),
                 timeout=480, interval=1, what="the client pod done")
        st = rts.wait_ready("mcp", 2, timeout=60)
        evs = events(core, ns, "mcp-client")
    finally:
        watch.stop()
    assert watch.assert_one_at_a_time("mcp") == [1, 2]
    [summary] = [e for e in evs if e["ev"] == "summary"] or [None]
    assert summary is not None, "no summary in the client's log:\n" + "\n".join(map(str, evs[-30:]))
    modern, legacy = summary["eras"]["2026-07-28"], summary["eras"]["2025-11-25"]
    failures = [e for e in evs if e["ev"] in ("call", "session-error") and not e.get("ok", False)]
    ws = summary["ws"]
    [g1_gone] = watch.deleted_gen("mcp", 1)
    # The operator's delete: the first event of g1 with a deletionTimestamp, which the API server
    # sets to the delete's time + the grace, at 1 s resolution (the kubelet's final delete, with
    # no grace, moves it to its own time: the DELETED event carries that one).
    marked = next(e for e in watch.snapshot() if e.uid == g1_gone.uid and e.deleting)
    deleted = marked.deletion_timestamp.timestamp() - GRACE
    since = min(e["t0"] for e in evs if e["ev"] == "call")
    print(f"\nhandoff through the gateway (patch at +{t_patch - since:.1f}s of the client's run):")
    for era, s in summary["eras"].items():
        print(f"  {era}: {s['ok']} calls answered, {s['failed']} failed, {s['sessions']} session(s), "
              f"versions {s['versions']}, longest call {s['max_call_seconds']:.2f}s, "
              f"time lost to failures {s['lost_seconds']:.2f}s, http {s['http']}, errors {s['errors']}; "
              f"long call {s['slow']}")
    print(f"  WebSocket: {ws}; g1 deleted at about +{deleted - since:.1f}s "
          f"({deleted - ws.get('closed', 0):.1f}s after the WebSocket closed)")
    print(f"  history: {st.get('history')}")
    print("  failures: " + json.dumps(failures))
    print("  client events other than answered fast calls:")
    for e in evs:
        if not (e["ev"] == "call" and e.get("ok")) and e["ev"] != "summary":
            print("    " + json.dumps(e))
    assert not summary["timed_out"], summary
    # The long call completes, on g1, in both eras, although the template changed while it ran.
    for era, s in summary["eras"].items():
        assert s["slow"].get("ok") and s["slow"]["v"] == "v1", (era, s["slow"])
        assert s["slow"]["t1"] > t_patch, (era, s["slow"], t_patch)
        assert set(s["versions"]) == {"v1", "v2"} and s["versions"]["v2"] >= 10, (era, s["versions"])
    # 2026-07-28: no call fails; the calls that arrived during the handoff were held, then
    # answered by g2.
    assert modern["failed"] == 0 and modern["errors"] == [], modern
    assert modern["http"] == {} and modern["sessions"] == 1, modern
    # 2025-11-25: the session g1 issued gets the unknown-session 404 once; the client opens a new
    # session (held for g2) and carries on.
    assert legacy["failed"] == 1, legacy
    # The SDK raises the JSON-RPC error of the gateway's 404 body (docs/gateway.md, Refusals).
    assert "session not found" in legacy["errors"][0], legacy["errors"]
    assert legacy["sessions"] == 2, legacy
    http_404 = [e for e in evs if e["ev"] == "http" and e["era"] == "2025-11-25"]
    assert http_404 and all(e["status"] == 404 and e["reason"] == "UnknownSession" for e in http_404), http_404
    assert any(e["method"] == "POST" for e in http_404), http_404
    # The WebSocket held open on g1 stayed open through the seal, answered every echo, closed
    # normally; g1 was deleted only after it closed (the drain counted it: no probe here).
    assert ws.get("ok") and ws["v"] == "v1" and ws["echoes"] >= SLOW, ws
    assert ws["closed"] > t_patch + 1, (ws, t_patch)
    assert deleted + 1 > ws["closed"], (deleted, ws)
    [h] = st["history"]
    assert h["outcome"] == "Retired", h
    print(f"client log: {len(evs)} events since {datetime.fromtimestamp(since).isoformat()}")
