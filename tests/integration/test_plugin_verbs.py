"""`kubectl baton suspend|resume|force-retire` and kubectl's --as/--as-group, against the real API
server with the operator as a real process: suspend retires the generation and starts none, resume
starts the next; force-retire refuses a generation that is not the one its pins hold (nothing
written) and retires the one they do; an impersonated user without rights gets the API server's 403.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from kubernetes import client

from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, VERSION, Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


def _plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", cluster.kubeconfig], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def _ready(rts: Runtimes, name: str) -> dict[str, Any]:
    return rts.condition(name, "Ready") or {}


def test_suspend_retires_and_resume_starts_the_next(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    operators("op-a")
    rts.create(runtime_manifest("sleepy"))
    rts.wait_ready("sleepy", 1)

    res = _plugin(cluster, "suspend", "sleepy", "-n", namespace)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("toolruntime/sleepy suspended: generation 1 retires within its budgets")
    assert rts.get("sleepy")["spec"]["suspend"] is True
    wait_for(lambda: _ready(rts, "sleepy").get("reason") == "Suspended" and not rts.pods("sleepy"), timeout=90,
             what="generation 1 retired, Ready=False Suspended, no pod")
    assert [h["generation"] for h in rts.status("sleepy").get("history", [])] == [1]
    assert not rts.status("sleepy").get("current")

    res = _plugin(cluster, "suspend", "sleepy", "-n", namespace)
    assert (res.returncode, res.stdout) == (0, "toolruntime/sleepy is already suspended: nothing changed\n")

    res = _plugin(cluster, "resume", "sleepy", "-n", namespace, "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {
        "kind": "ToolRuntime", "namespace": namespace, "name": "sleepy", "verb": "resume", "spec": {"suspend": False},
        "changed": True, "message": "toolruntime/sleepy resumed: a new generation starts"}
    rts.wait_ready("sleepy", 2, timeout=90)

    res = _plugin(cluster, "resume", "sleepy", "-n", namespace)
    assert (res.returncode, res.stdout) == (
        0, "toolruntime/sleepy is already running (not suspended): nothing changed\n")
    # Nothing retires now: a force-retire is refused before anything is written.
    res = _plugin(cluster, "force-retire", "sleepy", "--generation", "2", "-n", namespace)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "error: toolruntime 'sleepy' has no transition: no retire waits for pins, nothing to force-retire\n")
    assert "baton.dev/force-retire" not in (rts.get("sleepy")["metadata"].get("annotations") or {})


def _claim(rts: Runtimes, name: str, *, runtime: str, generation: int) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntimeClaim", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime}, "generation": generation, "fork": "plan-9", "branch": "a",
                     "state": "Committed"}}
    client.CustomObjectsApi(rts.core.api_client).create_namespaced_custom_object(
        GROUP, VERSION, rts.ns, "toolruntimeclaims", body)


def test_force_retire_refuses_a_stale_generation_and_retires_the_pinned_one(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    operators("op-a")
    rts.create(runtime_manifest("held", budgets={"pinSeconds": 3}))
    rts.wait_ready("held", 1)
    _claim(rts, "plan-9-a", runtime="held", generation=1)
    rts.set_image("held", "example/tool:2")
    wait_for(lambda: (rts.condition("held", "RetirementBlocked") or {}).get("status") == "True", timeout=60,
             what="RetirementBlocked=True")

    res = _plugin(cluster, "force-retire", "held", "--generation", "2", "-n", namespace)
    assert (res.returncode, res.stdout) == (1, ""), res.stderr
    assert res.stderr == ("error: toolruntime 'held': generation 2 is not the one waiting for pins; generation 1 is "
                          "(Handoff g1 -> g2 at StoppingAdmission): use --generation 1\n")
    assert "baton.dev/force-retire" not in (rts.get("held")["metadata"].get("annotations") or {})

    res = _plugin(cluster, "force-retire", "held", "--generation", "1", "-n", namespace)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ("toolruntime/held: force-retire of generation 1 requested (RetirementBlocked): it retires "
                          "past its pins, recorded in its history\n")
    rts.wait_ready("held", 2, timeout=90)
    [entry] = [h for h in rts.status("held").get("history", []) if h["generation"] == 1]
    assert "force-retired past pins (claims plan-9-a)" in entry.get("message", "")


def test_as_impersonates_and_a_user_without_rights_is_refused(rts: Runtimes, cluster: Any, namespace: str) -> None:
    rts.create(runtime_manifest("guarded", suspend=True))

    res = _plugin(cluster, "suspend", "guarded", "-n", namespace, "--as", "baton-test-nobody")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == (f'error: Forbidden: toolruntimes.baton.dev "guarded" is forbidden: User "baton-test-nobody" '
                          f'cannot get resource "toolruntimes" in API group "baton.dev" in the namespace "{namespace}"\n')

    # Two groups, each its own header: joined into one value they would name no group that has rights.
    res = _plugin(cluster, "resume", "guarded", "-n", namespace, "--as", "baton-test-nobody",
                  "--as-group", "baton-test-ops", "--as-group", "system:masters", "--request-timeout", "1m")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "toolruntime/guarded resumed: a new generation starts\n"
    assert rts.get("guarded")["spec"]["suspend"] is False
