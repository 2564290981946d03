"""The gateway in a real cluster (kind), tried as an agent developer would: the chart installed
with `gateway.enabled=true`, the official MCP Python SDK (`mcp` from PyPI) as the tool (its
streamable-HTTP server, tools `fast` and `slow`), and two official SDK clients in pods calling the
runtime by its Service name: the Python SDK's `Client` in both protocol eras it speaks, and the
TypeScript SDK's (`@modelcontextprotocol/sdk` from npm) `Client` over its
`StreamableHTTPClientTransport` in its default era. Each keeps ONE session for the whole run (no
reconnect logic of ours: the SDKs do not re-initialize after a 404, issue 42) and calls `fast`
every 200 ms across 5 template changes (handoffs), while a long `slow` call on the same session
spans the first; the gateway re-binds the handshake-era sessions to each next generation
(`spec.service.sessions: Rebind`, the default; docs/gateway.md, "Measured on kind").

    .venv/bin/python -m pytest tests/e2e/test_gateway_mcp.py -q -s    # prints the figures

The tool and the Python client are tests/e2e/mcptool (server.py, client.py), one image built by
hack/kind.py from a hash-pinned lock; the TypeScript client is tests/e2e/mcptool-ts (client.mjs,
package-lock.json), an image on Debian's nodejs. How the Python client picks each era (the SDK's
`mcp/client/client.py`, `Client.mode`): "2026-07-28" adopts the stateless revision (no
handshake; each request carries `MCP-Protocol-Version: 2026-07-28`, which the server routes to its
stateless path); "legacy" runs the initialize handshake, which this server (stateful, the SDK's
default) answers with 2025-11-25 and an `Mcp-Session-Id` held in its memory. The TypeScript SDK
1.32 speaks 2025-11-25 (its LATEST_PROTOCOL_VERSION): the handshake era.

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
from dev.wait import WaitTimeout, wait_for
from harness.chart import CHART, adopt_crd
from harness.cluster import Cluster, load_kind_module
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

ROOT = Path(__file__).resolve().parents[2]
MCPTOOL = ROOT / "tests" / "e2e" / "mcptool"
MCPTOOL_TS = ROOT / "tests" / "e2e" / "mcptool-ts"
RELEASE = "baton-gw"
# kind's podSubnet (hack/kind/cluster.yaml): the only addresses the gateway may dial.
POD_CIDR = "198.19.0.0/24"
GRACE = 10          # terminationGraceSeconds of the tool
SLOW = 10           # seconds of the long call
HOLD = 3            # the WebSocket stays open this long after the long calls ended
HANDOFFS = 5        # template changes: generations 1 .. 1 + HANDOFFS
FINAL = f"v{1 + HANDOFFS}"
AFTER = 5           # each client stops after this many answers from the last generation
PY_CLIENT, TS_CLIENT = "mcp-client", "mcp-client-ts"
pytestmark = pytest.mark.timeout(1200)


@dataclass
class Images:
    operator: str
    mcptool: str
    mcptool_ts: str


@pytest.fixture(scope="module")
def images(kind_cluster: Cluster) -> Images:
    route = kind_cluster.kind
    assert route is not None, "the kind_cluster fixture sets .kind"
    if route.docker:
        # A laptop with Docker: the Dockerfile's pinned base; pip fetches the locked files.
        ops, tool, ts = "baton:e2e", "baton-mcptool:e2e", "baton-mcptool-ts:e2e"
        for tag, ctx, extra in ((ops, ROOT, []), (tool, MCPTOOL, ["-f", str(MCPTOOL / "Containerfile")]),
                                (ts, MCPTOOL_TS, ["-f", str(MCPTOOL_TS / "Containerfile")])):
            subprocess.run(["docker", "build", "-t", tag, *extra, str(ctx)], check=True, timeout=1200)
            subprocess.run([str(route.kind), "load", "docker-image", "--name", route.name, tag],
                           check=True, timeout=300)
        return Images(ops, tool, ts)
    plane = load_kind_module()
    built = plane.app_images()
    for archive in (built.operator_archive, built.mcptool_archive, built.mcptool_ts_archive):
        plane.load_archive(route.kind, route.name, archive, route.env)
    return Images(built.operator, built.mcptool, built.mcptool_ts)


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


def answered_by(evs: list[dict[str, Any]], era: str, version: str) -> bool:
    return any(e["ev"] == "call" and e["era"] == era and e.get("ok") and e.get("v") == version
               for e in evs)


def test_mcp_sdk_clients_keep_one_session_across_handoffs_through_the_gateway(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    ns = kind_namespace
    rts = Runtimes(kind_cluster.api_client, ns)
    core = rts.core
    watch = PodWatch(kind_cluster.api_client, ns)
    t_patch: list[float] = []
    evs: dict[str, list[dict[str, Any]]] = {}
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
        common = ["--url", f"http://{host}/mcp", "--final", FINAL, "--after", str(AFTER),
                  "--slow", str(SLOW), "--max-seconds", "300"]
        core.create_namespaced_pod(ns, {"metadata": {"name": PY_CLIENT}, "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "client", "image": images.mcptool, "imagePullPolicy": "Never",
                            "command": ["/opt/mcp/bin/python", "/srv/client.py", *common,
                                        "--ws", f"ws://{host}/ws", "--hold", str(HOLD)]}]}})
        core.create_namespaced_pod(ns, {"metadata": {"name": TS_CLIENT}, "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "client", "image": images.mcptool_ts, "imagePullPolicy": "Never",
                            "command": ["node", "/srv/client.mjs", *common]}]}})

        def read() -> dict[str, list[dict[str, Any]]]:
            evs.update({pod: events(core, ns, pod) for pod in (PY_CLIENT, TS_CLIENT)})
            return evs

        def under_way() -> bool:
            e = read()
            return (sum(x["ev"] in ("slow-start", "ws-open") for x in e[PY_CLIENT]) == 3
                    and any(x["ev"] == "slow-start" for x in e[TS_CLIENT]))

        # The long calls and the WebSocket are open on g1: then the template changes, 5 times.
        wait_for(under_way, timeout=240, interval=1, what="the clients' long calls and WebSocket under way")
        loops: list[tuple[str, str]] = []
        for n in range(2, 2 + HANDOFFS):
            t_patch.append(time.time())
            containers = rts.get("mcp")["spec"]["template"]["spec"]["containers"]
            containers[0]["env"] = [{"name": "VERSION", "value": str(n)}]
            rts.patch("mcp", {"spec": {"template": {"spec": {"containers": containers}}}})
            rts.wait_ready("mcp", n, timeout=120)
            if not loops:  # the eras each client runs, from its first answered calls
                loops = sorted({(pod, x["era"]) for pod, e in read().items() for x in e if x["ev"] == "call"})
            # Every client is answered by generation n before the next change: each generation
            # serves each session (its re-bound one for the handshake era).
            v = f"v{n}"
            try:
                wait_for(lambda: all(answered_by(read()[pod], era, v) for pod, era in loops), timeout=60,
                         interval=0.5, what=f"an answer from {v} in every client loop {loops}")
            except WaitTimeout as timeout:
                stranded = [(pod, era) for pod, era in loops if not answered_by(evs[pod], era, v)]
                last = [e for pod, era in stranded for e in evs[pod]
                        if e.get("era") == era and e["ev"] in ("call", "http", "session-error")][-6:]
                raise AssertionError(f"{timeout}; not answered by {v}: {stranded}; their last events: "
                                     + json.dumps(last)) from None
        for pod in (PY_CLIENT, TS_CLIENT):
            wait_for(lambda pod=pod: core.read_namespaced_pod(pod, ns).status.phase in ("Succeeded", "Failed"),
                     timeout=120, interval=1, what=f"the client pod {pod} done")
        st = rts.wait_ready("mcp", 1 + HANDOFFS, timeout=60)
        read()
    finally:
        watch.stop()
        for pod in (PY_CLIENT, TS_CLIENT):  # the namespace goes too; the pods at once
            try:
                core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
            except ApiException as err:
                if err.status != 404:
                    raise
    assert watch.assert_one_at_a_time("mcp") == list(range(1, 2 + HANDOFFS))
    summaries = {pod: next((e for e in evs[pod] if e["ev"] == "summary"), None) for pod in evs}
    for pod, summary in summaries.items():
        assert summary is not None, f"no summary in {pod}'s log:\n" + "\n".join(map(str, evs[pod][-30:]))
    py, ts = summaries[PY_CLIENT], summaries[TS_CLIENT]
    assert py is not None and ts is not None
    clients = {f"python {era}": s for era, s in py["eras"].items()}
    clients.update({f"typescript {era}": s for era, s in ts["eras"].items()})
    ws = py["ws"]
    [g1_gone] = watch.deleted_gen("mcp", 1)
    # The operator's delete: the first event of g1 with a deletionTimestamp, which the API server
    # sets to the delete's time + the grace, at 1 s resolution (the kubelet's final delete, with
    # no grace, moves it to its own time: the DELETED event carries that one).
    marked = next(e for e in watch.snapshot() if e.uid == g1_gone.uid and e.deleting)
    deleted = marked.deletion_timestamp.timestamp() - GRACE
    since = min(e["t0"] for pod in evs for e in evs[pod] if e["ev"] == "call")
    print(f"\n{HANDOFFS} handoffs through the gateway (template changes at "
          + ", ".join(f"+{t - since:.1f}s" for t in t_patch) + " of the clients' run):")
    for name, s in clients.items():
        print(f"  {name}: {s['ok']} calls answered, {s['failed']} failed, {s['sessions']} session(s) "
              f"({s['session_ids']} Mcp-Session-Id {s['session_id_prefix']}), versions {s['versions']}, "
              f"longest (held) call {s['max_call_seconds']:.2f}s, time lost to failures "
              f"{s['lost_seconds']:.2f}s, http {s['http']}, errors {s['errors']}; long call {s['slow']}"
              + (f"; transport errors {s['transport_errors']}" if s.get("transport_errors") else ""))
    print(f"  WebSocket: {ws}; g1 deleted at about +{deleted - since:.1f}s "
          f"({deleted - ws.get('closed', 0):.1f}s after the WebSocket closed)")
    print(f"  history: {st.get('history')}")
    print("  client events other than answered fast calls:")
    for pod in evs:
        for e in evs[pod]:
            if not (e["ev"] == "call" and e.get("ok")) and e["ev"] != "summary":
                print(f"    {pod} " + json.dumps(e))
    assert not py["timed_out"] and not ts["timed_out"], (py, ts)
    assert len(clients) == 3, clients
    every_version = [f"v{n}" for n in range(1, 2 + HANDOFFS)]
    for name, s in clients.items():
        # No call failed; one Client, one session, for the whole run; no refusal on the way.
        assert s["failed"] == 0 and s["errors"] == [], (name, s)
        assert s["sessions"] == 1 and s["http"] == {}, (name, s)
        # Every generation answered, in order: each answer's version at least the one before.
        assert s["monotonic"] and s["order"] == every_version, (name, s["order"])
        assert s["versions"][FINAL] >= AFTER, (name, s["versions"])
        # The long call completes, on g1, although the template changed while it ran.
        assert s["slow"].get("ok") and s["slow"]["v"] == "v1", (name, s["slow"])
        assert s["slow"]["t1"] > t_patch[0], (name, s["slow"], t_patch)
    # The handshake era: the session id the client got at initialize served every generation
    # (the gateway's own id, re-bound underneath); the 2026-07-28 era has none.
    assert clients["python 2026-07-28"]["session_ids"] == 0, clients["python 2026-07-28"]
    for name in ("python 2025-11-25", *(n for n in clients if n.startswith("typescript"))):
        assert clients[name]["session_ids"] == 1, (name, clients[name])
    # The WebSocket held open on g1 stayed open through the seal, answered every echo, closed
    # normally; g1 was deleted only after it closed (the drain counted it: no probe here).
    assert ws.get("ok") and ws["v"] == "v1" and ws["echoes"] >= SLOW, ws
    assert ws["closed"] > t_patch[0] + 1, (ws, t_patch)
    assert deleted + 1 > ws["closed"], (deleted, ws)
    history = st["history"]
    assert [h["outcome"] for h in history][-HANDOFFS:] == ["Retired"] * HANDOFFS, history
    print(f"client logs: {sum(map(len, evs.values()))} events since {datetime.fromtimestamp(since).isoformat()}")
