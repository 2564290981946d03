"""examples/*.yaml run as they are: applied unmodified (namespace `agents` included) against the
local plane with the CRD installed, admitted with their defaults, and run by the operator. Their
images are the one the kind route builds (hack/kind.py), so they also run as written on kind
(tests/e2e/test_incluster.py applies one there and sees it Ready). The stdio examples (spec.stdio,
examples/stdio-*.yaml) run a server from a registry package in an image a platform team builds:
each names its own image and says how it is built (a Containerfile in its comments); on the local
plane the operator builds their pods with the bridge (init container, command)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness import scenarios
from harness.cluster import load_kind_module
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NS = "agents"  # the namespace the examples name
BATON_IMAGE = "registry.invalid/baton:examples"  # the operator's own image (the bridge's source)


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def runtime_of(path: Path) -> dict[str, Any]:
    [rt] = [d for d in docs(path) if d["kind"] == "ToolRuntime"]
    return rt


def test_there_are_examples_and_each_names_the_agents_namespace() -> None:
    assert {p.name for p in EXAMPLES} >= {"mcp-server.yaml", "browser-session.yaml", "suspended.yaml",
                                          "stdio-time.yaml", "stdio-memory.yaml"}
    for path in EXAMPLES:
        kinds = [d["kind"] for d in docs(path)]
        assert kinds.count("ToolRuntime") == 1, (path.name, kinds)
        assert all(d["metadata"]["namespace"] == NS for d in docs(path)), path.name


def test_every_example_image_is_one_the_kind_route_builds() -> None:
    """No image that exists nowhere: each container runs the tool server hack/kind.py builds and
    loads into the kind node, and is not pulled (no registry holds it). A stdio example runs its
    own server's image instead, which its comments say how to build (a Containerfile from a
    language image, the registry package pinned)."""
    built = load_kind_module().TOOLSERVER_IMAGE
    for path in EXAMPLES:
        rt = runtime_of(path)
        pod = rt["spec"]["template"]["spec"]
        stdio = "stdio" in rt["spec"]
        assert stdio == path.name.startswith("stdio-"), f"{path.name}: stdio examples are named stdio-*.yaml"
        for c in pod["containers"] + pod.get("initContainers", []):
            if stdio:
                text = path.read_text()
                assert c["image"] != built and c["image"].startswith("localhost/"), (path.name, c["image"])
                assert "#   FROM " in text and "pinned" in text and c["image"].rsplit(":", 1)[1] in text, \
                    f"{path.name}: says how {c['image']} is built"
            else:
                assert c["image"] == built, f"{path.name}: container {c['name']} runs {c['image']}, not {built}"
            assert c.get("imagePullPolicy", "IfNotPresent") in ("IfNotPresent", "Never"), (path.name, c)


@pytest.fixture
def agents(cluster: Any, crd: None, _namespace_reaper: list[str]) -> Iterator[str]:
    """Namespace `agents` for the examples; afterwards its pods are force-deleted, the runtimes'
    finalizers stripped (no operator runs any more), and it is deleted like every test namespace."""
    core = client.CoreV1Api(cluster.api_client)
    core.create_namespace({"metadata": {"name": NS, "labels": {"baton.dev/test": "true"}}})
    wait_for(lambda: scenarios.read_or_none(lambda: core.read_namespaced_service_account("default", NS)) is not None,
             timeout=30, what=f"ServiceAccount {NS}/default")
    try:
        yield NS
    finally:
        custom = client.CustomObjectsApi(cluster.api_client)
        for rt in custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]:
            _ignore_404(lambda: custom.patch_namespaced_custom_object(
                GROUP, VERSION, NS, PLURAL, rt["metadata"]["name"],
                {"metadata": {"finalizers": None}}))
        for pod in core.list_namespaced_pod(NS).items:
            _ignore_404(lambda: core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0))
        core.delete_namespace(NS)
        _namespace_reaper.append(NS)


def _ignore_404(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as e:
        if e.status != 404:
            raise


def test_examples_are_admitted_as_they_are_and_run(
        cluster: Any, agents: str, operators: Callable[..., OperatorProcess]) -> None:
    rts = Runtimes(cluster.api_client, agents)
    names = {}
    for path in EXAMPLES:
        res = cluster.kubectl("apply", "-f", str(path), check=False)
        assert res.returncode == 0, f"{path.name} refused: {res.stderr}"
        [rt] = [d for d in docs(path) if d["kind"] == "ToolRuntime"]
        names[path.name] = rt["metadata"]["name"]
        stored = rts.get(rt["metadata"]["name"])
        # Admission kept every field the example sets and filled in the rest.
        assert stored["spec"]["template"] == rt["spec"]["template"]
        assert set(stored["spec"]["budgets"]) == {"lockSeconds", "connectSeconds", "drainSeconds",
                                                  "terminationGraceSeconds", "cleanupSeconds", "pendingSeconds",
                                                  "pinSeconds", "admissionSeconds"}
        for k, v in (rt["spec"].get("budgets") or {}).items():
            assert stored["spec"]["budgets"][k] == v
        assert stored["spec"]["recovery"]["onCleanupFailure"] in ("Hold", "Force")
    # Re-applying (what `kubectl apply` users do) changes no spec: metadata.generation stays, so
    # it can never look like a template change. (kubectl may still say "configured": its merge
    # patch re-sends lists the API server defaulted, e.g. a port's protocol.)
    before = {n: rts.get(n)["metadata"]["generation"] for n in names.values()}
    cluster.kubectl("apply", "-f", str(ROOT / "examples"))
    assert {n: rts.get(n)["metadata"]["generation"] for n in names.values()} == before

    operators("op-examples", namespaces=[agents], env={"BATON_IMAGE": BATON_IMAGE})
    rts.wait_ready(names["mcp-server.yaml"], 1)
    rts.wait_ready(names["browser-session.yaml"], 1)
    for path in EXAMPLES:
        rt = runtime_of(path)
        if "stdio" in rt["spec"]:
            assert_stdio_pod(rts, rt)
    suspended = names["suspended.yaml"]
    wait_for(lambda: (rts.condition(suspended, "Ready") or {}).get("reason") == "Suspended",
             timeout=60, what=f"{suspended} Ready=False Suspended")
    assert not rts.pods(suspended)
    svc = client.CoreV1Api(cluster.api_client).read_namespaced_service(names["mcp-server.yaml"], agents)
    assert svc.spec.session_affinity == "ClientIP"
    wide = cluster.kubectl("get", "trt", "-n", agents, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-2:] == ["STEP", "MESSAGE"], wide
    print(wide)
    print(json.dumps(rts.status(names["mcp-server.yaml"]).get("conditions"), indent=1))


def assert_stdio_pod(rts: Runtimes, rt: dict[str, Any]) -> None:
    """The pod a stdio example produces: the bridge installed from Baton's image, the example's
    own image running the bridge in front of the example's command."""
    name, stdio = rt["metadata"]["name"], rt["spec"]["stdio"]
    st = rts.wait_ready(name, 1)
    pod = rts.api.sanitize_for_serialization(rts.core.read_namespaced_pod(st["current"]["pod"], rts.ns))["spec"]
    [init] = pod["initContainers"]
    assert (init["name"], init["image"]) == ("baton-bridge-install", BATON_IMAGE), init
    [c] = pod["containers"]
    [wanted] = rt["spec"]["template"]["spec"]["containers"]
    assert c["image"] == wanted["image"]
    assert c["command"][0] == "/baton/baton-bridge", c["command"]
    assert c["command"][c["command"].index("--") + 1:] == stdio["command"], c["command"]
    assert c.get("args", []) == stdio.get("args", [])
    assert c["readinessProbe"]["httpGet"]["path"] == "/baton/ready"
    assert {"name": "mcp", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    assert pod["restartPolicy"] == "Never"
    for mount in wanted.get("volumeMounts", []):
        assert mount in c["volumeMounts"], "the example's own mounts are kept"
