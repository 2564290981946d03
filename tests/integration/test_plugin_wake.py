"""`kubectl baton wake` and the idle lines of `kubectl baton status` (issue 43 item 3), against the
real API server: the plugin as its console script, the CRD as installed. No operator runs: the
test writes status.idle as the operator would, and reads what the plugin wrote."""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from baton.model import meta, names
from harness.runtimes import GROUP, VERSION, Runtimes, runtime_manifest

SINCE = "2026-01-05T10:00:00Z"


def _plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", cluster.kubeconfig], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def _idle_runtime(name: str) -> dict[str, Any]:
    manifest = runtime_manifest(name, service=True)
    manifest["spec"]["service"]["gateway"] = True
    manifest["spec"]["idle"] = {"afterSeconds": 120, "wakeSeconds": 20}
    return manifest


def test_wake_annotates_an_idle_runtime_and_refuses_one_without_spec_idle(
        crd: None, rts: Runtimes, cluster: Any, namespace: str) -> None:
    rts.create(_idle_runtime("sleepy"))
    custom = client.CustomObjectsApi(cluster.api_client)
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "toolruntimes", "sleepy", {"status": {
        "idle": {"since": SINCE, "lastWake": {"requestedAt": "2026-01-05T09:00:00Z", "readyAt": "2026-01-05T09:00:04Z",
                                               "seconds": 4.5, "outcome": "Woken"}}}})

    res = _plugin(cluster, "status", "sleepy", "-n", namespace)
    assert res.returncode == 0, res.stderr
    assert f"  idle: since {SINCE} (" in res.stdout
    assert "  last wake: requested 2026-01-05T09:00:00Z (" in res.stdout and "in 4.5s (Woken)" in res.stdout

    res = _plugin(cluster, "wake", "sleepy", "-n", namespace, "-o", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    written = rts.get("sleepy")["metadata"]["annotations"][names.ANN_WAKE]
    assert out["annotations"] == {names.ANN_WAKE: written} and out["changed"] is True
    asked, since = meta.parse_time(written), meta.parse_time(SINCE)
    assert asked is not None and since is not None and asked > since
    assert abs((asked - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) < 60

    rts.create(runtime_manifest("always-on"))
    res = _plugin(cluster, "wake", "always-on", "-n", namespace)
    assert res.returncode == 1
    assert res.stderr == ("error: toolruntime 'always-on' has no spec.idle: it is never idled, so there is nothing "
                          "to wake (spec.idle.afterSeconds turns idling on)\n")
    assert names.ANN_WAKE not in (rts.get("always-on")["metadata"].get("annotations") or {})
