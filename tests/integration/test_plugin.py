"""`kubectl baton` against a real API server: list (-n, -A), -o json|yaml on every verb, errors,
and the confirmation before force-recover (a real pseudo-terminal, or --yes)."""
from __future__ import annotations

import datetime
import json
import os
import select
import signal
import subprocess
import time
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


def _plugin(cluster: Any, *args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", cluster.kubeconfig], stdin=stdin,
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def _load(output: str, text: str) -> Any:
    return json.loads(text) if output == "json" else yaml.safe_load(text)


def test_list_status_history_reset_in_every_output(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    operators("op-a")
    rts.create(runtime_manifest("alpha"))
    st = rts.wait_ready("alpha", 1)
    pod = st["current"]["pod"]

    res = _plugin(cluster, "list", "-n", namespace)
    assert res.returncode == 0, res.stderr
    header, *rows = res.stdout.splitlines()
    # The CRD's printer columns, through the API server's Table (tests/integration/test_plugin_table.py).
    assert header.split() == ["NAME", "GENERATION", "READY", "REASON", "POD", "AGE"]
    assert [r.split()[:5] for r in rows] == [["alpha", "1", "True", "GenerationReady", pod]]

    # `kubectl baton` finds the console script on PATH; -A adds the NAMESPACE column.
    kubectl = str(Path(cluster.bin_dir) / "kubectl")
    res = cluster.run(kubectl, "baton", "list", "-A", check=False)
    assert res.returncode == 0, res.stderr
    header, *rows = res.stdout.splitlines()
    assert header.split()[:2] == ["NAMESPACE", "NAME"]
    assert [namespace, "alpha", "1", "True"] in [r.split()[:4] for r in rows]

    res = _plugin(cluster, "list", "-n", "default")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "No resources found in default namespace.\n")

    for output in ("json", "yaml"):
        res = _plugin(cluster, "list", "-n", namespace, "-o", output)
        assert res.returncode == 0, res.stderr
        listed = _load(output, res.stdout)
        assert listed["kind"] == "List" and [i["metadata"]["name"] for i in listed["items"]] == ["alpha"]
        assert listed["items"][0]["status"]["current"]["generation"] == 1

        res = _plugin(cluster, "list", "-A", "-o", output)
        assert res.returncode == 0, res.stderr
        assert (namespace, "alpha") in [(i["metadata"]["namespace"], i["metadata"]["name"])
                                        for i in _load(output, res.stdout)["items"]]

        res = _plugin(cluster, "status", "alpha", "-n", namespace, "-o", output)
        assert res.returncode == 0, res.stderr
        shown = _load(output, res.stdout)
        assert (shown["namespace"], shown["name"]) == (namespace, "alpha")
        assert shown["status"]["current"] == rts.status("alpha")["current"]

        res = _plugin(cluster, "history", "alpha", "-n", namespace, "-o", output)
        assert res.returncode == 0, res.stderr
        assert [(h["generation"], h["outcome"]) for h in _load(output, res.stdout)["history"]] == [(1, "Current")]

    res = _plugin(cluster, "reset", "alpha", "-n", namespace, "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {
        "kind": "ToolRuntime", "namespace": namespace, "name": "alpha", "verb": "reset",
        "annotations": {"baton.dev/reset": "1"}, "generation": 1,
        "message": "toolruntime/alpha: reset of generation 1 requested"}
    rts.wait_ready("alpha", 2)
    res = _plugin(cluster, "history", "alpha", "-n", namespace, "-o", "yaml")
    assert [(h["generation"], h["outcome"]) for h in yaml.safe_load(res.stdout)["history"]] == [
        (1, "Reset"), (2, "Current")]

    # Errors: one line on stderr, nothing on stdout, whatever the output format.
    res = _plugin(cluster, "status", "missing", "-n", namespace, "-o", "json")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == f"error: toolruntime 'missing' not found in namespace {namespace!r}\n"
    res = _plugin(cluster, "force-recover", "alpha", "-n", namespace, "--yes")
    assert res.returncode == 1 and res.stderr.startswith("error: toolruntime 'alpha' has no cleanup failure")


def _held_by_a_cleanup_failure(rts: Runtimes, name: str) -> None:
    """The status an operator writes when generation 1's pod outlived cleanupSeconds (written here
    through the status subresource: no operator runs, so nothing acts on the annotation)."""
    rts.create(runtime_manifest(name))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rts.custom.patch_namespaced_custom_object_status(GROUP, VERSION, rts.ns, PLURAL, name, {
        "status": {
            "fencingToken": 1,
            "current": {"generation": 1, "pod": name, "uid": "uid-of-generation-1"},
            "lastCleanupFailure": {"generation": 1, "pod": name, "uid": "uid-of-generation-1",
                                   "reason": "PodStuckTerminating", "message": "still terminating", "at": now},
            "conditions": [
                {"type": "CleanupFailed", "status": "True", "reason": "PodStuckTerminating",
                 "message": "still terminating", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "CleanupFailed", "message": "",
                 "lastTransitionTime": now},
            ],
        }})


def _annotation(rts: Runtimes, name: str) -> str | None:
    value = (rts.get(name)["metadata"].get("annotations") or {}).get("baton.dev/force-recovery")
    return None if value is None else str(value)


def _on_terminal(cluster: Any, answer: bytes, *args: str) -> subprocess.CompletedProcess[str]:
    keyboard, tty = os.openpty()
    try:
        os.write(keyboard, answer)
        return _plugin(cluster, *args, stdin=tty)
    finally:
        os.close(tty)
        os.close(keyboard)


def test_force_recover_asks_first(rts: Runtimes, cluster: Any, namespace: str) -> None:
    _held_by_a_cleanup_failure(rts, "stuck")
    args = ("force-recover", "stuck", "-n", namespace)

    res = _plugin(cluster, *args)  # stdin is not a terminal
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == "error: not a terminal, so not asking for confirmation: pass --yes to go ahead\n"
    assert _annotation(rts, "stuck") is None

    res = _on_terminal(cluster, b"n\n", *args)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith(f"Force-delete pod stuck (uid uid-of-generation-1) of {namespace}/stuck generation 1")
    assert res.stderr.endswith("[y/N] error: not confirmed: nothing changed\n")
    assert _annotation(rts, "stuck") is None

    res = _on_terminal(cluster, b"y\n", *args)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ("toolruntime/stuck: force recovery of generation 1 requested "
                          "(abandons pod stuck uid uid-of-generation-1)\n")
    assert _annotation(rts, "stuck") == "1"

    rts.annotate("stuck", "baton.dev/force-recovery", None)
    res = _plugin(cluster, *args, "--yes", "-o", "yaml")
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load(res.stdout) == {
        "kind": "ToolRuntime", "namespace": namespace, "name": "stuck", "verb": "force-recover",
        "annotations": {"baton.dev/force-recovery": "1"}, "generation": 1,
        "abandons": {"pod": "stuck", "uid": "uid-of-generation-1"},
        "message": "toolruntime/stuck: force recovery of generation 1 requested "
                   "(abandons pod stuck uid uid-of-generation-1)"}
    assert _annotation(rts, "stuck") == "1"


def test_ctrl_c_at_the_confirmation_changes_nothing(rts: Runtimes, cluster: Any, namespace: str) -> None:
    _held_by_a_cleanup_failure(rts, "halted")
    script = Path(sys.executable).parent / "kubectl-baton"
    keyboard, tty = os.openpty()
    try:
        # A user at a terminal: SIGINT at its default. (A test run started in the background by a
        # non-interactive shell inherits SIGINT ignored, and so would the plugin.)
        proc = subprocess.Popen([str(script), "force-recover", "halted", "-n", namespace,
                                 "--kubeconfig", cluster.kubeconfig],
                                stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cluster.env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stderr is not None and proc.stdout is not None
        seen, deadline = b"", time.monotonic() + 30
        while not seen.endswith(b"[y/N] ") and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                seen += os.read(proc.stderr.fileno(), 4096)
        assert seen.endswith(b"[y/N] "), seen
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(tty)
        os.close(keyboard)
    assert proc.returncode == 130 and out == b""
    assert (seen + err).decode().endswith("[y/N] \nerror: interrupted\n")
    assert _annotation(rts, "halted") is None
