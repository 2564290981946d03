"""`kubectl baton list` is the API server's Table: its columns are the CRD's printer columns, so it
prints what `kubectl get toolruntimes` prints (compared line by line against the real kubectl and
API server), a printer column added to the CRD appears in both at once; and --context picks a
kubeconfig context (two in one file, the current one pointing at a closed port), with its
namespace, and tls-server-name is what the server's certificate is checked against."""
from __future__ import annotations

import copy
import datetime
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from dev.wait import wait_for
from dev.crds import CRD
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, install_crd, runtime_manifest


def _plugin(cluster: Any, *args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", kubeconfig or cluster.kubeconfig],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=cluster.env)


def _status(rts: Runtimes, name: str, *, generation: int, holder: str) -> None:
    """The status an operator writes for a Ready generation (through the status subresource: no
    operator runs, so the cells are exactly these values)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rts.custom.patch_namespaced_custom_object_status(GROUP, VERSION, rts.ns, PLURAL, name, {"status": {
        "fencingToken": generation, "holder": holder,
        "current": {"generation": generation, "pod": f"{name}-g{generation}", "uid": f"uid-{generation}",
                    "templateHash": "h"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "GenerationReady",
                        "message": f"generation {generation} ready", "lastTransitionTime": now}]}})


AGE = re.compile(r"^\d+[smhdy](\d+[smh])?$")


def _same_as_kubectl(cluster: Any, *args: str) -> list[str]:
    """The plugin's `list ARGS` and `kubectl get toolruntimes ARGS`, the same line for line up to
    the AGE column (the last one: each computes the age when it asks, a second apart at most);
    the lines, AGE cut off."""
    mine = _plugin(cluster, "list", *args)
    assert mine.returncode == 0, mine.stderr
    theirs = cluster.kubectl("get", "toolruntimes", *args)
    ours_lines, their_lines = mine.stdout.splitlines(), theirs.stdout.splitlines()
    assert ours_lines[0] == their_lines[0] and ours_lines[0].endswith("AGE"), (mine.stdout, theirs.stdout)
    cut = ours_lines[0].index("AGE")
    assert [line[:cut] for line in ours_lines] == [line[:cut] for line in their_lines], (mine.stdout, theirs.stdout)
    assert all(AGE.match(line[cut:]) for line in ours_lines[1:]), mine.stdout
    return [line[:cut].rstrip() for line in ours_lines]


def test_list_prints_the_servers_table_as_kubectl_get(rts: Runtimes, cluster: Any, namespace: str,
                                                      tmp_path: Path) -> None:
    rts.create(runtime_manifest("alpha"))
    rts.create(runtime_manifest("beta"))
    _status(rts, "alpha", generation=3, holder="op-a")

    lines = _same_as_kubectl(cluster, "-n", namespace)
    assert [line.split() for line in lines] == [
        ["NAME", "GENERATION", "READY", "REASON", "POD"], ["alpha", "3", "True", "GenerationReady", "alpha-g3"],
        ["beta"]]
    lines = _same_as_kubectl(cluster, "-A")
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [namespace, "alpha", "3"] in [line.split()[:3] for line in lines]

    # A printer column added to the CRD: in the plugin's list as soon as in kubectl's, from the
    # same source; its value from the status. The CRD is put back as it was afterwards.
    crd = yaml.safe_load(CRD.read_text())
    changed = copy.deepcopy(crd)
    columns = changed["spec"]["versions"][0]["additionalPrinterColumns"]
    columns.insert(0, {"name": "Written By", "type": "string", "jsonPath": ".status.holder",
                       "description": "a column of this test"})
    try:
        (tmp_path / "crd.yaml").write_text(yaml.safe_dump(changed))
        cluster.kubectl("apply", "-f", str(tmp_path / "crd.yaml"))
        wait_for(lambda: "WRITTEN BY" in cluster.kubectl("get", "toolruntimes", "-n", namespace).stdout,
                 timeout=60, what="the API server serves the new printer column")
        lines = _same_as_kubectl(cluster, "-n", namespace)
        assert lines[0].split()[:3] == ["NAME", "WRITTEN", "BY"]
        assert lines[1].split()[:3] == ["alpha", "op-a", "3"]
        assert lines[2].split() == ["beta"]
    finally:
        install_crd(cluster)
    wait_for(lambda: "WRITTEN BY" not in _plugin(cluster, "list", "-n", namespace).stdout, timeout=60,
             what="the CRD's own columns back")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_context_flag_picks_the_context_and_its_namespace(rts: Runtimes, cluster: Any, namespace: str,
                                                          tmp_path: Path) -> None:
    rts.create(runtime_manifest("gamma"))
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    [real] = [c for c in admin["clusters"] if c["name"] == next(
        x for x in admin["contexts"] if x["name"] == admin["current-context"])["context"]["cluster"]]
    [user] = [u for u in admin["users"] if u["name"] == next(
        x for x in admin["contexts"] if x["name"] == admin["current-context"])["context"]["user"]]
    server = real["cluster"]["server"]
    dead = f"https://127.0.0.1:{_closed_port()}"
    renamed = {**real["cluster"], "server": server.replace("127.0.0.1", "localhost"),
               "tls-server-name": "kubernetes.default.svc"}
    kc = tmp_path / "two-contexts"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
        "clusters": [{"name": "real", "cluster": real["cluster"]},
                     {"name": "dead", "cluster": {**real["cluster"], "server": dead}},
                     {"name": "by-name", "cluster": renamed},
                     {"name": "wrong-name", "cluster": {**renamed, "tls-server-name": "not-the-api-server.example"}}],
        "users": [{"name": "admin", "user": user["user"]}],
        "contexts": [{"name": "elsewhere", "context": {"cluster": "dead", "user": "admin"}},
                     {"name": "here", "context": {"cluster": "real", "user": "admin", "namespace": namespace}},
                     {"name": "by-name", "context": {"cluster": "by-name", "user": "admin", "namespace": namespace}},
                     {"name": "wrong-name", "context": {"cluster": "wrong-name", "user": "admin"}}],
    }))

    res = _plugin(cluster, "list", kubeconfig=str(kc))  # the current context: a closed port
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"error: cannot reach the API server {dead}: "
                                                               "Connection refused\n")
    for context in ("here", "by-name"):
        res = _plugin(cluster, "list", "--context", context, kubeconfig=str(kc))  # no -n: the context's namespace
        assert res.returncode == 0, res.stderr
        assert [line.split()[0] for line in res.stdout.splitlines()] == ["NAME", "gamma"], res.stdout
        res = _plugin(cluster, "status", "gamma", "--context", context, "-o", "json", kubeconfig=str(kc))
        assert res.returncode == 0 and f'"namespace": "{namespace}"' in res.stdout, res.stderr
    # Through kubectl, which hands the flag on to the plugin.
    res = cluster.run(str(Path(cluster.bin_dir) / "kubectl"), "baton", "list", "--context", "here",
                      "--kubeconfig", str(kc), check=False)
    assert res.returncode == 0 and "gamma" in res.stdout, res.stderr

    res = _plugin(cluster, "list", "--context", "wrong-name", kubeconfig=str(kc))
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith(f"error: cannot reach the API server {renamed['server']}: TLS: ")
    assert "not-the-api-server.example" in res.stderr or "mismatch" in res.stderr, res.stderr
    res = _plugin(cluster, "list", "--context", "nope", kubeconfig=str(kc))
    assert (res.returncode, res.stderr) == (1, f"error: invalid kubeconfig {kc}: context 'nope' does not exist "
                                               "(there are: by-name, elsewhere, here, wrong-name)\n")
