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

The same cluster and release also serve: stdio servers from PyPI and npm, unmodified, behind the
bridge across a handoff (issue 44; images tests/e2e/stdio-time and tests/e2e/stdio-node); a
preRetire hook reaching a real container with the fencing token (issue 45); an idle runtime woken
by the SDK's call (issue 43; created by a module fixture at the first test, so its idle minute
passes meanwhile). Their SDK clients and the hook receiver are tests/e2e/podclient/*.py, mounted
from ConfigMaps into pods of the MCP image (docs/kind.md).

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
STDIO_TIME = ROOT / "tests" / "e2e" / "stdio-time"
STDIO_NODE = ROOT / "tests" / "e2e" / "stdio-node"
# The SDK client scripts of the stdio and idle tests (run by the MCP image's Python from a ConfigMap).
PODCLIENT = ROOT / "tests" / "e2e" / "podclient"
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
    stdio_time: str     # mcp-server-time from PyPI on a Python image (tests/e2e/stdio-time)
    stdio_node: str     # server-memory and server-everything from npm on a Node image (tests/e2e/stdio-node)


@pytest.fixture(scope="module")
def images(kind_cluster: Cluster) -> Images:
    route = kind_cluster.kind
    assert route is not None, "the kind_cluster fixture sets .kind"
    if route.docker:
        # A laptop with Docker: the Dockerfile's pinned base; pip fetches the locked files.
        ops, tool, ts = "baton:e2e", "baton-mcptool:e2e", "baton-mcptool-ts:e2e"
        stdio_time, stdio_node = "baton-stdio-time:e2e", "baton-stdio-node:e2e"
        for tag, ctx, extra in ((ops, ROOT, []), (tool, MCPTOOL, ["-f", str(MCPTOOL / "Containerfile")]),
                                (ts, MCPTOOL_TS, ["-f", str(MCPTOOL_TS / "Containerfile")]),
                                (stdio_time, STDIO_TIME, ["-f", str(STDIO_TIME / "Containerfile")]),
                                (stdio_node, STDIO_NODE, ["-f", str(STDIO_NODE / "Containerfile")])):
            subprocess.run(["docker", "build", "-t", tag, *extra, str(ctx)], check=True, timeout=1200)
            subprocess.run([str(route.kind), "load", "docker-image", "--name", route.name, tag],
                           check=True, timeout=300)
        return Images(ops, tool, ts, stdio_time, stdio_node)
    plane = load_kind_module()
    built = plane.app_images()
    for archive in (built.operator_archive, built.mcptool_archive, built.mcptool_ts_archive,
                    built.stdio_time_archive, built.stdio_node_archive):
        plane.load_archive(route.kind, route.name, archive, route.env)
    return Images(built.operator, built.mcptool, built.mcptool_ts, built.stdio_time, built.stdio_node)


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


def mcp_runtime(image: str, *, name: str = "mcp") -> dict[str, Any]:
    """No drain probe: the gateway's count of calls and WebSockets in flight is the drain."""
    m = runtime_manifest(name, image=image, service=True, budgets={
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


# idle_runtime: created first so that its minute of idleness passes while this test runs.
@pytest.mark.usefixtures("idle_runtime")
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


# --- stdio servers from PyPI and npm (issue 44) and an idle runtime's wake (issue 43) ----------

LONG = 12           # seconds of server-everything's long-running operation across the handoff
STDIO_AFTER = 3     # each client loop stops after this many answers from generation 2
IDLE_AFTER = 60     # spec.idle.afterSeconds: the CRD's minimum
WAKE_SECONDS = 60   # spec.idle.wakeSeconds
# The stdio runtimes: (name, image field of Images, spec.stdio.command, args). The Node image
# holds both npm servers; the command picks one (docs/stdio.md: the container sets no command).
NODE_MODULES = "/srv/node_modules/@modelcontextprotocol"
STDIO_SERVERS = (("time", "stdio_time", ["mcp-server-time"], ["--local-timezone", "UTC"]),
                 ("memory", "stdio_node", ["node", f"{NODE_MODULES}/server-memory/dist/index.js"], []),
                 ("everything", "stdio_node", ["node", f"{NODE_MODULES}/server-everything/dist/index.js"], ["stdio"]))


def stdio_runtime(name: str, *, image: str, command: list[str], args: list[str]) -> dict[str, Any]:
    """A stdio runtime as examples/stdio-*.yaml write one: the container runs the registry's
    server unmodified (no command, ports or probe of its own: the bridge's), restricted, read-only
    root filesystem; behind the gateway with sessions re-bound at a handoff."""
    m = runtime_manifest(name, image=image, budgets={
        "connectSeconds": 120, "drainSeconds": 60, "terminationGraceSeconds": 20,
        "cleanupSeconds": 80, "admissionSeconds": 120})
    [c] = m["spec"]["template"]["spec"]["containers"]
    del c["ports"]
    c.update({"imagePullPolicy": "Never", "env": [{"name": "HANDOFF", "value": "1"}],
              "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
                                  "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}})
    if name == "memory":
        # server-memory writes its graph file at every change: an emptyDir lives as long as the
        # generation's pod (docs/stdio.md), so each generation starts with an empty graph.
        c["env"].append({"name": "MEMORY_FILE_PATH", "value": "/data/memory.jsonl"})
        c["volumeMounts"] = [{"name": "graph", "mountPath": "/data"}]
        m["spec"]["template"]["spec"]["volumes"] = [{"name": "graph", "emptyDir": {"sizeLimit": "64Mi"}}]
    m["spec"]["stdio"] = {"command": command, "args": args, "eofSeconds": 5, "termSeconds": 5}
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "mcp"}], "gateway": True, "sessions": "Rebind"}
    return m


def start_podclient(core: client.CoreV1Api, ns: str, pod: str, *, image: str, script: str,
                    args: list[str]) -> None:
    """A pod of the MCP image (the official Python SDK) running tests/e2e/podclient/SCRIPT, mounted
    from a ConfigMap (no image of its own to build)."""
    core.create_namespaced_config_map(ns, {"metadata": {"name": pod}, "data": {
        script: (PODCLIENT / script).read_text()}})
    core.create_namespaced_pod(ns, {"metadata": {"name": pod}, "spec": {
        "restartPolicy": "Never",
        "volumes": [{"name": "script", "configMap": {"name": pod}}],
        "containers": [{"name": "client", "image": image, "imagePullPolicy": "Never",
                        "command": ["/opt/mcp/bin/python", f"/podclient/{script}", *args],
                        "volumeMounts": [{"name": "script", "mountPath": "/podclient", "readOnly": True}]}]}})


def wait_pod_done(core: client.CoreV1Api, ns: str, pod: str, *, timeout: float) -> None:
    wait_for(lambda: core.read_namespaced_pod(pod, ns).status.phase in ("Succeeded", "Failed"),
             timeout=timeout, interval=1, what=f"the client pod {pod} done")


def test_stdio_servers_from_pypi_and_npm_across_a_handoff_through_the_gateway(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    """Issue 44 on kind: mcp-server-time (PyPI, a Python image) and server-memory and
    server-everything (npm, a Node image), unmodified, each as a stdio runtime behind the bridge
    the init container copies in from Baton's image; the official SDK Client calls tools on all
    three (two Client modes each, ONE session each) while every runtime hands off once, and
    server-everything's long-running operation spans its handoff."""
    ns = kind_namespace
    rts = Runtimes(kind_cluster.api_client, ns)
    core = rts.core
    watch = PodWatch(kind_cluster.api_client, ns)
    pod = "stdio-client"
    evs: list[dict[str, Any]] = []
    try:
        for name, image, command, args in STDIO_SERVERS:
            rts.create(stdio_runtime(name, image=getattr(images, image), command=command, args=args))
        for name, *_ in STDIO_SERVERS:
            rts.wait_ready(name, 1, timeout=240)
        g1 = {name: rts.gen_pod(name, 1) for name, *_ in STDIO_SERVERS}
        # The bridge came from Baton's image by the init container; the tool image is unchanged.
        for name, p in g1.items():
            assert p is not None, name
            assert [ic.image for ic in p.spec.init_containers or []] == [images.operator], (name, p.spec.init_containers)
            assert p.spec.containers[0].command[0].startswith("/baton/"), (name, p.spec.containers[0].command)
        start_podclient(core, ns, pod, image=images.mcptool, script="stdio_calls.py", args=[
            *(a for name, *_ in STDIO_SERVERS for a in (f"--{name}", f"http://{name}.{ns}.svc/mcp")),
            "--final-generation", "2", "--after", str(STDIO_AFTER), "--long", str(LONG)])

        def read() -> list[dict[str, Any]]:
            evs[:] = events(core, ns, pod)
            return evs

        wait_for(lambda: len([e for e in read() if e["ev"] == "long-start"]) == 2, timeout=240, interval=1,
                 what="the long calls under way, one per era (every client loop answered)")
        t_patch = time.time()
        for name, *_ in STDIO_SERVERS:
            containers = rts.get(name)["spec"]["template"]["spec"]["containers"]
            containers[0]["env"][0] = {"name": "HANDOFF", "value": "2"}
            rts.patch(name, {"spec": {"template": {"spec": {"containers": containers}}}})
        status = {name: rts.wait_ready(name, 2, timeout=180) for name, *_ in STDIO_SERVERS}
        wait_pod_done(core, ns, pod, timeout=240)
        read()
    finally:
        watch.stop()
        try:
            core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise
    for name, *_ in STDIO_SERVERS:
        assert watch.assert_one_at_a_time(name) == [1, 2], name
    summary = next((e for e in evs if e["ev"] == "summary"), None)
    assert summary is not None, "no summary in the client's log:\n" + "\n".join(map(str, evs[-30:]))
    long = summary["long"]
    print(f"\nstdio runtimes through the gateway, one handoff each (template changed "
          f"{t_patch - min(e['t'] for e in evs):.1f}s into the client's run):")
    for lp in summary["loops"]:
        print(f"  {lp['server']} ({lp['era']} Client): {lp['ok']} calls answered, {lp['failed']} failed, "
              f"answers by generation {lp['generations']}, Mcp-Session-Id (sha256[:8]) {lp['session_ids']}, "
              f"http refusals {lp['http']}, longest call {lp['max_call_seconds']:.2f}s, errors {lp['errors']}")
    memory = [e for e in evs if e["ev"] == "call" and e["server"] == "memory" and e.get("ok")]
    before = max((int(e["answer"].split()[0]) for e in memory if e["generation"] == 1), default=0)
    after = next((int(e["answer"].split()[0]) for e in memory if e["generation"] == 2), None)
    print(f"  memory's graph: {before} entities on generation 1; the first read on generation 2 held "
          f"{after} (its file on an emptyDir: a new generation starts empty)")
    print(f"  long calls (server-everything trigger-long-running-operation, {LONG}s), by Client mode: {long}")
    for name in status:
        print(f"  {name} history: {[(h.get('generation'), h.get('outcome')) for h in status[name].get('history', [])]}")
    assert not summary["timed_out"], summary
    assert len(summary["loops"]) == 2 * len(STDIO_SERVERS)
    for lp in summary["loops"]:
        # No call failed and nothing was refused; both generations answered. "legacy": one
        # session for the whole run (the gateway re-bound it). "auto": the bridge answered its
        # server/discover, so it spoke the stateless era: no session at all.
        assert lp["failed"] == 0 and lp["errors"] == [], lp
        assert len(lp["session_ids"]) == (1 if lp["era"] == "legacy" else 0), lp
        assert set(lp["generations"]) == {"1", "2"} and lp["late"] >= STDIO_AFTER, lp
        assert lp["http"] == {}, lp
    # Each era's long call completed (on generation 1, whose drain waited for it), its progress
    # routed back to its client on the call's own stream (the session's GET stream ends at the
    # seal), although the template changed while it ran.
    assert set(long) == {"auto", "legacy"}, long
    for era, call in long.items():
        assert call.get("ok") and "completed" in call["answer"], (era, call)
        assert call["t1"] > t_patch, (era, call, t_patch)
        assert call["progress"] and call["progress"] == sorted(call["progress"]), (era, call)
    for name in status:
        assert [h["outcome"] for h in status[name]["history"]][-1:] == ["Retired"], status[name]["history"]


HOOK_GATE = "e2e.baton.dev/released"  # the preRetire gate's annotation: holds the retire while the test reads


def test_a_pre_retire_hook_reaches_the_tool_with_the_fencing_token_it_got_from_the_downward_api(
        kind_cluster: Cluster, release: str, images: Images, kind_namespace: str) -> None:
    """Issue 45 on kind: spec.hooks.preRetire's httpPost reaches the retiring generation's real
    container (a receiver on the MCP image's Python, tests/e2e/podclient/hook_receiver.py) after
    its drain, carrying Baton-Generation and Baton-Fencing-Token; the container got
    BATON_FENCING_TOKEN and BATON_GENERATION through the downward API at its start. A gate holds
    the retire after the call so that the test reads the retiring pod's log before it goes."""
    ns = kind_namespace
    rts = Runtimes(kind_cluster.api_client, ns)
    core = rts.core
    script = "hook_receiver.py"
    core.create_namespaced_config_map(ns, {"metadata": {"name": "hooks"}, "data": {
        script: (PODCLIENT / script).read_text()}})
    m = runtime_manifest("hooked", image=images.mcptool, budgets={
        "connectSeconds": 120, "drainSeconds": 30, "terminationGraceSeconds": 2, "cleanupSeconds": 60})
    m["spec"]["template"]["spec"]["volumes"] = [{"name": "script", "configMap": {"name": "hooks"}}]
    [c] = m["spec"]["template"]["spec"]["containers"]
    c.update({"imagePullPolicy": "Never", "command": ["/opt/mcp/bin/python", f"/podclient/{script}"],
              "env": [{"name": "HANDOFF", "value": "1"}],
              "volumeMounts": [{"name": "script", "mountPath": "/podclient", "readOnly": True}],
              "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}})
    m["spec"]["hooks"] = {"preRetire": {"httpPost": {"path": "/release", "port": "http"}, "timeoutSeconds": 20,
                                        "gate": {"annotation": HOOK_GATE, "timeoutSeconds": 300}}}
    rts.create(m)
    rts.wait_ready("hooked", 1, timeout=180)
    g1 = rts.gen_pod("hooked", 1)
    assert g1 is not None
    annotations = g1.metadata.annotations or {}
    containers = rts.get("hooked")["spec"]["template"]["spec"]["containers"]
    containers[0]["env"] = [{"name": "HANDOFF", "value": "2"}]
    rts.patch("hooked", {"spec": {"template": {"spec": {"containers": containers}}}})

    def called() -> dict[str, Any] | None:
        hook = (rts.status("hooked").get("transition") or {}).get("hook") or {}
        return hook if hook.get("calledAt") and hook.get("hook") == "preRetire" else None

    # The httpPost answered; the gate holds generation 1's pod: its log has what it received.
    run = wait_for(called, timeout=120, interval=0.5, what="hooked's preRetire called, the gate waiting")
    log = core.read_namespaced_pod_log("hooked", ns, _request_timeout=30) or ""
    lines = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{")]
    rts.patch("hooked", {"metadata": {"annotations": {HOOK_GATE: "1"}}})
    st = rts.wait_ready("hooked", 2, timeout=120)
    start = next(e for e in lines if e["ev"] == "start")
    hooks = [e for e in lines if e["ev"] == "hook"]
    entry = next(h for h in st["history"] if h["generation"] == 1)
    print(f"\npreRetire hook on kind: generation 1's pod annotations "
          f"{ {k: v for k, v in annotations.items() if k.startswith('baton.dev/')} }; its container's "
          f"downward-API env at start {start['env']}; the hook call(s) it received {hooks}; "
          f"status.transition.hook {run}; history {entry.get('hooks')}")
    assert len(hooks) == 1, hooks
    [hook] = hooks
    headers = {k.lower(): v for k, v in hook["headers"].items()}
    token = start["env"]["BATON_FENCING_TOKEN"]
    # The token the tool got through the downward API is its pod's (the Lease's at the pod's
    # creation); the hook carries the token of the holder calling now (the run's), never lower:
    # the Lease's token grows at every acquisition (docs/design.md), and the handoff is a new one.
    assert token == annotations[names.ANN_FENCING_TOKEN] and int(token) > 0, (token, annotations)
    assert start["env"]["BATON_GENERATION"] == "1" and start["env"]["BATON_RUNTIME"] == f"{ns}/hooked", start
    assert hook["path"] == "/release", hook
    assert headers["baton-generation"] == "1" and headers["baton-hook"] == "preRetire", headers
    assert headers["baton-fencing-token"] == str(run["fencingToken"]), (headers, run)
    assert int(headers["baton-fencing-token"]) >= int(token), (headers, token)
    assert hook["body"]["fencingToken"] == run["fencingToken"] and hook["body"]["generation"] == 1, hook
    assert [h.get("outcome") for h in entry.get("hooks") or []] == ["Succeeded"], entry


@pytest.fixture(scope="module")
def idle_runtime(kind_cluster: Cluster, release: str, images: Images) -> Iterator[str]:
    """An MCP runtime with spec.idle (afterSeconds 60, the minimum) in a namespace of its own,
    created as early as the module's first test so that its idle minute passes meanwhile."""
    core = client.CoreV1Api(kind_cluster.api_client)
    ns = f"baton-idle-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {"baton.dev/test": "true"}}})
    m = mcp_runtime(images.mcptool, name="idle")
    m["spec"]["idle"] = {"afterSeconds": IDLE_AFTER, "wakeSeconds": WAKE_SECONDS}
    Runtimes(kind_cluster.api_client, ns).create(m)
    try:
        yield ns
    finally:
        try:
            core.delete_namespace(ns)
        except ApiException as e:
            if e.status != 404:
                raise


def test_an_idle_runtime_wakes_on_a_call_of_the_mcp_sdk(
        kind_cluster: Cluster, images: Images, idle_runtime: str) -> None:
    """Issue 43 on kind: the runtime went idle (Ready=False reason Idle, status.idle.since, no
    pod); the official SDK Client's call wakes it, is held, and is answered by the new generation."""
    ns = idle_runtime
    rts = Runtimes(kind_cluster.api_client, ns)
    core = rts.core

    def idle() -> dict[str, Any] | None:
        st = rts.status("idle")
        ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
        if (st.get("idle") or {}).get("since") and ready.get("reason") == "Idle" and rts.pod("idle") is None:
            return st
        return None

    st = wait_for(idle, timeout=IDLE_AFTER + 240, interval=1, what="ns/idle idle, its pod gone")
    idle_gen = [h for h in st.get("history") or [] if h.get("generation") == 1]
    pod = "wake-client"
    try:
        start_podclient(core, ns, pod, image=images.mcptool, script="wake_call.py",
                        args=["--url", f"http://idle.{ns}.svc/mcp", "--timeout", str(WAKE_SECONDS + 60)])
        wait_pod_done(core, ns, pod, timeout=WAKE_SECONDS + 180)
        evs = events(core, ns, pod)
    finally:
        try:
            core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise
    woken = rts.wait_ready("idle", 2, timeout=60)
    result = next((e for e in evs if e["ev"] == "result"), None)
    answers = [e for e in evs if e["ev"] == "http"]
    held = [e for e in answers if e["held_ms"] is not None]
    wake = (woken.get("idle") or {}).get("lastWake") or {}
    print(f"\nidle runtime woken by the MCP SDK Client: idle since {st['idle']['since']} "
          f"(generation 1 retired: {idle_gen}); the call answered {result}; "
          f"wake latency (status.idle.lastWake.seconds) {wake.get('seconds')} s, outcome {wake.get('outcome')}; "
          f"Baton-Held-Ms {[e['held_ms'] for e in held]}; HTTP answers {answers}")
    assert result is not None and result["ok"] and result["answer"] == "v1", evs
    # The first request (the Client's probe or initialize) was held for the wake and answered by
    # the woken generation; every answer after it by the same.
    assert held and all(e["status"] < 300 and e["generation"] == "2" for e in held), answers
    assert all(e["generation"] == "2" for e in answers if e["generation"]), answers
    assert wake.get("outcome") == "Woken" and wake.get("seconds") is not None, wake
    assert not (woken.get("idle") or {}).get("since"), woken.get("idle")
