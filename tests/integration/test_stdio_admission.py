"""spec.stdio at admission (issue 44): the CRD refuses a stdio runtime Baton could not build, with a
message that names the field, fills the defaults, and `kubectl explain` documents it."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dev.wait import wait_for
from harness.runtimes import runtime_manifest


def stdio_manifest(name: str = "stdio", **stdio: Any) -> dict[str, Any]:
    m = runtime_manifest(name, budgets={"terminationGraceSeconds": 12, "cleanupSeconds": 20})
    del m["spec"]["template"]["spec"]["containers"][0]["ports"]
    m["spec"]["stdio"] = {"command": ["mcp-server-time"], **stdio}
    return m


def _changed(change: Any, name: str = "bad") -> dict[str, Any]:
    m = copy.deepcopy(stdio_manifest(name))
    change(m)
    return m


def _set_container(**fields: Any) -> Any:
    return lambda m: m["spec"]["template"]["spec"]["containers"][0].update(fields)


# What CEL can check within the CRD's cost budget. The template's container, port and volume
# lists carry no maxItems, so a rule iterating them is refused at CRD install ("estimated rule cost
# exceeds budget"): those checks (spec.stdio.container names a container, the port and the names
# are free...) are the operator's (baton.model.spec.stdio_problem, Degraded InvalidSpec naming the
# field; tests/unit/lifecycle/test_stdio_pod.py and tests/integration/test_stdio_runtime.py).
CASES: list[tuple[str, Any, list[str]]] = [
    ("command-empty", lambda m: m["spec"]["stdio"].update(command=[]), ["spec.stdio.command", "at least 1"]),
    ("command-missing", lambda m: m["spec"]["stdio"].pop("command"), ["spec.stdio.command", "Required"]),
    ("command-empty-word", lambda m: m["spec"]["stdio"].update(command=[""]), ["spec.stdio.command[0]"]),
    ("port-too-big", lambda m: m["spec"]["stdio"].update(port=70000), ["spec.stdio.port", "65535"]),
    ("container-has-command", _set_container(command=["python", "-m", "server"]),
     ["spec.stdio.command", "leave them unset"]),
    ("container-has-args", _set_container(args=["--verbose"]), ["spec.stdio.command", "leave them unset"]),
    ("container-has-readiness-probe", _set_container(readinessProbe={"exec": {"command": ["true"]}}),
     ["spec.stdio", "readinessProbe is the bridge's"]),
    ("restart-always", lambda m: m["spec"]["template"]["spec"].update(restartPolicy="Always"),
     ["spec.stdio", "restartPolicy must be Never"]),
    ("path-under-baton", lambda m: m["spec"]["stdio"].update(path="/baton/ready"),
     ["spec.stdio.path", "/baton/"]),
    ("path-without-slash", lambda m: m["spec"]["stdio"].update(path="mcp"), ["spec.stdio.path", "should match"]),
    ("grace-below-eof-and-term", lambda m: m["spec"]["budgets"].update(terminationGraceSeconds=11),
     ["spec.budgets.terminationGraceSeconds", "spec.stdio.eofSeconds + spec.stdio.termSeconds + 2"]),
    ("eof-zero", lambda m: m["spec"]["stdio"].update(eofSeconds=0), ["spec.stdio.eofSeconds"]),
    ("term-too-big", lambda m: m["spec"]["stdio"].update(termSeconds=601), ["spec.stdio.termSeconds"]),
    ("unknown-stdio-field", lambda m: m["spec"]["stdio"].update(shell=True), ["shell"]),
]


@pytest.mark.parametrize("change,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_stdio_is_refused_naming_the_field(cluster: Any, crd: None, namespace: str, change: Any,
                                                   needles: list[str], tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_changed(change)))
    res = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert res.returncode != 0, f"accepted: {res.stdout}"
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in: {res.stderr}"


def test_a_stdio_runtime_is_accepted_with_its_defaults(cluster: Any, crd: None, namespace: str,
                                                       tmp_path: Any) -> None:
    m = stdio_manifest("stdio-defaults", args=["--local-timezone", "UTC"])
    m["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    m["spec"]["handoff"] = {"policy": "WhenIdle"}  # the bridge's drain endpoint is the probe
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(m))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    got = json.loads(cluster.kubectl("get", "trt", "stdio-defaults", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["stdio"] == {"command": ["mcp-server-time"], "args": ["--local-timezone", "UTC"],
                                    "port": 8080, "path": "/mcp", "eofSeconds": 5, "termSeconds": 5}


def test_a_named_container_may_keep_its_own_ports_and_command_beside(cluster: Any, crd: None, namespace: str,
                                                                    tmp_path: Any) -> None:
    """Only the stdio container is the bridge's: another container keeps its command and ports."""
    m = stdio_manifest("stdio-named", container="server", port=9000)
    m["spec"]["template"]["spec"]["containers"].insert(0, {"name": "side", "image": "example/side:1",
                                                           "command": ["sleep", "inf"],
                                                           "ports": [{"name": "metrics", "containerPort": 8080}]})
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(m))
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))


@pytest.mark.parametrize("path, text", [
    ("toolruntime.spec.stdio", "unmodified stdio MCP server"),
    ("toolruntime.spec.stdio.command", "It replaces the container's own command and args"),
    ("toolruntime.spec.stdio.termSeconds", "ends within the pod's grace"),
])
def test_kubectl_explain_documents_stdio(cluster: Any, crd: None, path: str, text: str) -> None:
    def explained() -> str | None:
        res = cluster.kubectl("explain", path, check=False)
        if res.returncode == 0:
            return str(res.stdout)
        assert "couldn't find resource" in res.stderr, res.stderr
        return None
    out = wait_for(explained, timeout=30, interval=0.5, what=f"kubectl explain {path}")
    assert text in " ".join(out.split()), out
