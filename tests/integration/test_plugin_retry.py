"""`kubectl baton retry` and the hook lines of `kubectl baton status` (issue 45 item 5), against
the real API server: the plugin as its console script, the CRD as installed (so the status fields
it reads are ones the server keeps). No operator runs: the test writes the status as the operator
would (a preRetire hook failed under failurePolicy Fail: CleanupFailed=True HookFailed), and reads
what the plugin wrote."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from baton.model import names
from harness.runtimes import GROUP, VERSION, Runtimes, runtime_manifest

AT = "2026-12-06T12:00:00Z"


def _plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", cluster.kubeconfig], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def _write_status(cluster: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    client.CustomObjectsApi(cluster.api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "toolruntimes", name, {"status": status})


def _condition(kind: str, value: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": value, "reason": reason, "message": message, "lastTransitionTime": AT}


def test_retry_names_the_failed_hooks_generation_and_status_shows_the_hooks(
        crd: None, rts: Runtimes, cluster: Any, namespace: str) -> None:
    rts.create(runtime_manifest("held"))
    # Nothing failed yet: refused, nothing written.
    res = _plugin(cluster, "retry", "held", "-n", namespace)
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == ("error: toolruntime 'held' has no failed hook to retry: no hook failed "
                          "(CleanupFailed=Unknown (-), Degraded=Unknown (-))\n")
    assert names.ANN_RETRY_HOOK not in (rts.get("held")["metadata"].get("annotations") or {})

    _write_status(cluster, namespace, "held", {
        "current": {"generation": 7, "pod": "held", "uid": "u7", "templateHash": "h", "startedAt": AT,
                    "hooks": [{"hook": "postReady", "outcome": "Succeeded", "seconds": 0.4, "attempts": 1}]},
        "history": [{"generation": 6, "pod": "held", "uid": "u6", "startedAt": AT, "retiredAt": AT,
                     "outcome": "Retired", "hooks": [
                         {"hook": "postReady", "outcome": "Ignored", "seconds": 1.5, "attempts": 2,
                          "message": "HTTP 500: cold"},
                         {"hook": "preRetire", "outcome": "Succeeded", "seconds": 0.25, "attempts": 1}]}],
        "transition": {"kind": "Handoff", "trigger": "TemplateChanged", "from": 7, "fromPod": "held", "fromUid": "u7",
                       "to": 8, "step": "CleanupFailed", "startedAt": AT,
                       "hook": {"hook": "preRetire", "generation": 7, "startedAt": AT, "attempts": 2,
                                "fencingToken": 4, "outcome": "Failed", "message": "HTTP 500: vendor down"}},
        "conditions": [_condition("CleanupFailed", "True", "HookFailed",
                                  "preRetire hook of generation 7 failed: HTTP 500: vendor down")],
    })
    res = _plugin(cluster, "status", "held", "-n", namespace)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert ("    hook: preRetire of generation 7: Failed (attempt 2): HTTP 500: vendor down; held: "
            "`kubectl baton retry held` runs it again, `kubectl baton force-recover held` retires without it") in lines
    assert ("  hooks of generation 6 (last retired): postReady Ignored in 1.5s (2 attempts): HTTP 500: cold; "
            "preRetire Succeeded in 0.2s") in lines
    assert "  hooks of generation 7 (current): postReady Succeeded in 0.4s" in lines

    res = _plugin(cluster, "retry", "held", "-n", namespace, "-o", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["annotations"] == {names.ANN_RETRY_HOOK: "7"} and out["verb"] == "retry"
    assert rts.get("held")["metadata"]["annotations"][names.ANN_RETRY_HOOK] == "7"

    # The operator started it again (its outcome not known yet): nothing to retry now.
    _write_status(cluster, namespace, "held", {
        "transition": {"hook": {"hook": "preRetire", "generation": 7, "startedAt": AT, "attempts": 3,
                                "outcome": None, "message": None}},
        "conditions": [_condition("CleanupFailed", "False", "HookRetried", "run again")]})
    res = _plugin(cluster, "retry", "held", "-n", namespace)
    assert (res.returncode, res.stderr) == (1, "error: toolruntime 'held' has no failed hook to retry: its preRetire "
                                               "hook of generation 7 is running (attempt 3), not failed\n")
    res = _plugin(cluster, "status", "held", "-n", namespace)
    assert "    hook: preRetire of generation 7: running since 2026-12-06T12:00:00Z (" in res.stdout
