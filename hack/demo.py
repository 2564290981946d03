"""`make demo`: Baton end to end on a throwaway local control plane, then everything stopped.

Starts the plane (hack/cluster.py, state in .baton/demo), installs the chart's CRD, runs the
operator as a local process, applies a ToolRuntime, changes it (a handoff), then makes the
serving pod stuck (a finalizer) and changes it again: CleanupFailed holds the handoff until a
force recovery names the stuck generation. Prints each command and its output.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m hack.demo ...")

from dev import digestkey, process
from dev.ports import free_port
from dev.wait import WaitTimeout, wait_for

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
VENV_BIN = Path(PY).parent
DIR = ROOT / ".baton" / "demo"
NS = "agents"

RUNTIME = """
apiVersion: baton.dev/v1alpha1
kind: ToolRuntime
metadata: {name: search-mcp, namespace: agents}
spec:
  template:
    spec:
      containers:
      - name: server
        image: ghcr.io/example/search-mcp:%s
        ports: [{containerPort: 8080}]
  service:
    ports: [{port: 80, targetPort: 8080}]
  budgets: {lockSeconds: 5, connectSeconds: 20, drainSeconds: 3, terminationGraceSeconds: 2, cleanupSeconds: 6}
"""


def sh(*args: str, show: bool = True, check: bool = True, stdin: str | None = None) -> str:
    if show:
        print(f"\n$ {' '.join(args)}", flush=True)
    res = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=120, env=ENV)
    out = (res.stdout + res.stderr).rstrip()
    if show and out:
        print(out, flush=True)
    if check and res.returncode != 0:
        raise SystemExit(f"demo: `{' '.join(args)}` failed ({res.returncode})")
    return res.stdout


def wait(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    print(f"  ... waiting for {what}", flush=True)
    try:
        wait_for(check, timeout=timeout, what=what, interval=0.5)
    except WaitTimeout:
        raise SystemExit(f"demo: timed out waiting for {what}") from None


def status() -> dict:
    out = subprocess.run(["kubectl", "get", "trt", "search-mcp", "-n", NS, "-o", "json"], capture_output=True,
                         text=True, env=ENV, timeout=30).stdout
    return json.loads(out or "{}").get("status") or {}


def ready_generation(n: int) -> Callable[[], bool]:
    def check() -> bool:
        st = status()
        ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
        return (st.get("current") or {}).get("generation") == n and ready.get("status") == "True"
    return check


def control_plane_bin() -> str:
    """The control plane's tools only, built if missing (`make demo` has built them already):
    never Prometheus or the kind set, which the demo does not use."""
    script = ["bash", str(ROOT / "hack" / "build-tools.sh")]
    found = subprocess.run(script + ["--print-bin-dir"], capture_output=True, text=True)
    if found.returncode != 0:
        subprocess.run(script + ["--only", "control-plane"], check=True)
        found = subprocess.run(script + ["--print-bin-dir"], capture_output=True, text=True, check=True)
    return found.stdout.strip()


def main() -> int:
    global ENV
    tools = control_plane_bin()
    ENV = dict(os.environ, PATH=f"{VENV_BIN}:{tools}:{os.environ['PATH']}", KUBECONFIG=str(DIR / "kubeconfig"))
    process.plane(PY, "down", "--dir", DIR, capture_output=True)
    print("== starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    process.plane(PY, "up", "--dir", DIR, check=True, stdout=subprocess.DEVNULL)
    operator: subprocess.Popen[bytes] | None = None
    try:
        print("\n== installing the CRDs from the Helm chart")
        # --kube-version: without a cluster Helm assumes v1.20.0, below the chart's kubeVersion.
        kube = next(line.split("=", 1)[1].strip() for line in (ROOT / "hack" / "versions.env").read_text().splitlines()
                    if line.startswith("KUBERNETES_VERSION="))
        # Both: the operator watches ToolRuntimeClaims too (pins fail closed without them).
        crd = sh("helm", "template", "baton", str(ROOT / "charts" / "baton"), "--show-only", "templates/crd.yaml",
                 "--show-only", "templates/crd-toolruntimeclaims.yaml", "--kube-version", kube, show=False)
        sh("kubectl", "apply", "-f", "-", stdin=crd)
        # Not `kubectl wait --for=condition=established`: it fails at once ("accessor error")
        # when it looks before the API server has written any condition.
        wait("both CRDs Established", lambda: sh(
            "kubectl", "get", "crd", "toolruntimes.baton.dev", "toolruntimeclaims.baton.dev", "-o",
            'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Established")].status}{" "}{end}',
            show=False, check=False).split() == ["True", "True"])
        sh("kubectl", "create", "namespace", NS)
        print("\n== running the operator (python -m baton), log in .baton/demo/operator.log")
        # Free ports: another checkout's demo or test run may be using fixed ones.
        health = free_port()
        env = dict(ENV, BATON_INSTANCE_ID="demo", BATON_METRICS_BIND=f"127.0.0.1:{free_port()}",
                   BATON_HEALTH_BIND=f"127.0.0.1:{health}", BATON_LEASE_SECONDS="5",
                   BATON_PROBE_ALLOWED_CIDRS="127.0.0.0/8",
                   BATON_DIGEST_KEY_FILE=digestkey.ensure(DIR / "digest.key"))
        operator = subprocess.Popen([PY, "-m", "baton"], env=env, stdout=open(DIR / "operator.log", "wb"),
                                    stderr=subprocess.STDOUT, cwd=ROOT)

        wait("the operator's /healthz", lambda: process.healthy(health), 30)

        print("\n== 1. a first ToolRuntime")
        sh("kubectl", "apply", "-f", "-", stdin=RUNTIME % "1.4.2")
        wait("generation 1 Ready", ready_generation(1))
        sh("kubectl", "get", "trt,pods,svc", "-n", NS)

        print("\n== 2. a template change: generation 1 is retired, confirmed gone, then generation 2 starts")
        sh("kubectl", "apply", "-f", "-", stdin=RUNTIME % "1.5.0")
        wait("generation 2 Ready", ready_generation(2))
        sh("kubectl", "get", "trt,pods", "-n", NS)
        sh("kubectl", "get", "events", "-n", NS, "--field-selector", "involvedObject.kind=ToolRuntime",
           "--sort-by=.lastTimestamp", "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")

        print("\n== 3. a stuck pod: generation 2 gets a finalizer nobody removes, then the template changes")
        serving = (status().get("current") or {})["pod"]
        sh("kubectl", "patch", "pod", serving, "-n", NS, "--type=merge",
           "-p", '{"metadata":{"finalizers":["demo.baton.dev/stuck"]}}')
        sh("kubectl", "apply", "-f", "-", stdin=RUNTIME % "1.6.0")

        def cleanup_failed() -> bool:
            c = next((c for c in status().get("conditions", []) if c["type"] == "CleanupFailed"), {})
            return c.get("status") == "True"

        wait("CleanupFailed=True (cleanupSeconds is 6)", cleanup_failed)
        sh("kubectl", "get", "trt,pods", "-n", NS)
        sh("kubectl", "baton", "status", "search-mcp", "-n", NS)
        print("\n   No generation 3 starts while generation 2's pod stands. A person decides:")
        sh("kubectl", "baton", "force-recover", "search-mcp", "-n", NS, "--yes")
        wait("generation 3 Ready", ready_generation(3))
        sh("kubectl", "get", "trt,pods", "-n", NS)
        sh("kubectl", "baton", "history", "search-mcp", "-n", NS)
        sh("kubectl", "get", "events", "-n", NS, "--field-selector", "involvedObject.kind=ToolRuntime",
           "--sort-by=.lastTimestamp", "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")
        print("\n== demo done")
        return 0
    finally:
        if operator is not None:
            process.stop([operator], timeout=20)
        process.plane(PY, "down", "--dir", DIR, check=False)


ENV: dict[str, str] = {}

if __name__ == "__main__":
    sys.exit(main())
