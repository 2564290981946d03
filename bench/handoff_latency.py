"""Handoff latency of Baton beside a Deployment with strategy Recreate (a benchmark, not a test).

Both run the same pod template on the same local control plane in the same run, interleaved.
Every Baton wait is at its minimum (all budgets 1 s; no drain probe, no Service), and the
Deployment's pods get terminationGracePeriodSeconds 1, so both pay the same one-second grace.

A third runtime, "claimed", runs the same rounds with CLAIMS unreferenced ToolRuntimeClaims on
the generation being retired (half Speculative, referencing each other, half Abandoned): they pin
nothing, so its handoff must cost what the plain one costs (the issue's bound: within 100 ms).

Latency = from the template patch until the new pod is Ready and the old one is gone:
  Baton:      status.current.generation == N+1 and Ready=True (the old pod is confirmed gone first).
  Deployment: observedGeneration caught up, 1 updated + available replica, 1 pod in total.

Usage: .venv/bin/python -m bench.handoff_latency [--rounds 15] [--trace]
(starts its own plane with hack/cluster.py in a temp dir and stops it; all traffic is loopback)

--trace: the API server writes an audit log (request metadata), and the last round of Baton and
of the Deployment are printed request by request: when each was received (ms after the template
patch), how long the API server took, who sent it (baton, kube-controller-manager, scheduler,
kwok, the bench's own polls left out), verb, object and code. That is where a handoff's time goes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m bench.handoff_latency ...")

from kubernetes import client, config

from dev import digestkey, process
from dev.crds import wait_established
from dev.ports import free_port
from dev.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]

NS = "bench"
POLL = 0.02


def wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll every POLL seconds: the latencies measured are no coarser than that."""
    wait_for(check, timeout=timeout, what=what, interval=POLL)


def pod_template(image: str, kind: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "bench", "kind": kind}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "server", "image": image}]}}


CLAIMS = 20


def at_phase(phase: float) -> None:
    """Wait until the wall clock's fraction of a second is `phase`. A pod's deletionTimestamp is
    kept to the whole second (RFC 3339) and kwok removes the pod once it has passed, so where in
    its second a delete lands moves the handoff by up to a second: each round starts all three
    at the same drawn phase, so they pay the same rounding (a paired comparison)."""
    time.sleep((phase - time.time() % 1.0) % 1.0)


def unreferenced_claims(custom: client.CustomObjectsApi, runtime: str, generation: int) -> None:
    """CLAIMS claims on `generation` that pin nothing: speculative branches referencing each other
    and abandoned ones (only a CommitEligible or Committed reference pins)."""
    fork = f"{runtime}-g{generation}"
    for k in range(CLAIMS):
        state = "Speculative" if k % 2 == 0 else "Abandoned"
        spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, "generation": generation, "fork": fork,
                                "branch": f"b{k}", "state": state}
        if state == "Speculative" and k > 0:
            spec["references"] = [f"b{k - 1}"]
        custom.create_namespaced_custom_object("baton.dev", "v1alpha1", NS, "toolruntimeclaims", {
            "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntimeClaim",
            "metadata": {"name": f"{fork}-b{k}"}, "spec": spec})


def baton_round(custom: client.CustomObjectsApi, i: int, name: str = "tool", claims: bool = False,
                phase: float | None = None) -> float:
    gen_before = custom.get_namespaced_custom_object("baton.dev", "v1alpha1", NS, "toolruntimes", name)[
        "status"]["current"]["generation"]
    if claims:
        unreferenced_claims(custom, name, gen_before)
        # Claims that exist when the change comes (Baton has seen them: their phase is written).
        wait(lambda: all((c.get("status") or {}).get("phase") == "Bound" for c in custom.list_namespaced_custom_object(
            "baton.dev", "v1alpha1", NS, "toolruntimeclaims",
            ).get("items", []) if c["spec"]["generation"] == gen_before
            and c["spec"]["runtimeRef"]["name"] == name), 30, "claims Bound")
    if phase is not None:
        at_phase(phase)
    t0 = time.monotonic()
    custom.patch_namespaced_custom_object("baton.dev", "v1alpha1", NS, "toolruntimes", name,
                                          {"spec": {"template": pod_template(f"example/tool:{i}", "baton")}})

    def done() -> bool:
        st = custom.get_namespaced_custom_object("baton.dev", "v1alpha1", NS, "toolruntimes", name).get("status", {})
        ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
        return (st.get("current") or {}).get("generation") == gen_before + 1 and ready.get("status") == "True"

    wait(done, 60, "baton handoff")
    return time.monotonic() - t0


def deployment_round(apps: client.AppsV1Api, core: client.CoreV1Api, i: int, phase: float | None = None) -> float:
    if phase is not None:
        at_phase(phase)
    t0 = time.monotonic()
    patched = apps.patch_namespaced_deployment("recreate", NS, {"spec": {"template": pod_template(f"example/tool:{i}", "deployment")}})
    want = patched.metadata.generation

    def done() -> bool:
        d = apps.read_namespaced_deployment("recreate", NS)
        s = d.status
        if (s.observed_generation or 0) < want or (s.updated_replicas or 0) != 1 or (s.available_replicas or 0) != 1:
            return False
        return len(core.list_namespaced_pod(NS, label_selector="app=bench,kind=deployment").items) == 1

    wait(done, 60, "deployment rollout")
    return time.monotonic() - t0


ACTORS = {"system:kube-controller-manager": "kcm", "system:kube-scheduler": "scheduler", "kwok": "kwok"}


def trace(audit: Path, start: float, end: float, title: str) -> None:
    """Print the requests the API server received between `start` and `end` (wall clock), but
    for the bench's own polls, node heartbeats and leader elections."""
    rows = []
    for line in audit.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("stage") != "ResponseComplete" or ev.get("verb") == "watch":
            continue
        received = datetime.datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        done = datetime.datetime.fromisoformat(ev["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        if not start - 0.001 <= received <= end:
            continue
        ref = ev.get("objectRef") or {}
        if ref.get("namespace") in ("kube-node-lease", "kube-system"):
            continue
        agent = ev.get("userAgent") or ""
        user = ev["user"]["username"]
        who = "baton" if agent.startswith("baton") else ACTORS.get(user, "bench" if agent.startswith("OpenAPI") else user)
        if who == "bench" and ev["verb"] != "patch":
            continue
        obj = "/".join(x for x in (ref.get("resource"), ref.get("name"), ref.get("subresource")) if x)
        rows.append((received - start, done - received, who, ev["verb"], obj, (ev.get("responseStatus") or {}).get("code")))
    print(f"\n{title}: {end - start:.3f} s, {len(rows)} requests (ms after the patch, ms in the API server)")
    for at, took, who, verb, obj, code in sorted(rows):
        print(f"  {1000 * at:7.1f} {1000 * took:6.1f}  {who:9} {verb:7} {obj} {code}")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--trace", action="store_true", help="print the last rounds' requests from an audit log")
    ap.add_argument("--seed", type=int, default=1, help="seed of the rounds' start phases (see at_phase)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="baton-bench-"))
    py = sys.executable
    audit = work / "audit.log"
    process.plane(py, "up", "--dir", work / "plane", *(["--audit-log", str(audit)] if args.trace else []),
                  check=True, stdout=subprocess.DEVNULL)
    kubeconfig = str(work / "plane" / "kubeconfig")
    op: subprocess.Popen[bytes] | None = None
    try:
        config.load_kube_config(kubeconfig)
        core, apps, custom = client.CoreV1Api(), client.AppsV1Api(), client.CustomObjectsApi()
        kubectl = [str(Path(py).parent / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)
        wait_established(client.ApiClient())
        core.create_namespace({"metadata": {"name": NS}})
        wait(lambda: bool(core.list_namespaced_service_account(NS).items), 30, "default SA")
        health = free_port()
        env = dict(os.environ, KUBECONFIG=kubeconfig, BATON_INSTANCE_ID="bench", BATON_NAMESPACES=NS,
                   BATON_METRICS_BIND=f"127.0.0.1:{free_port()}", BATON_HEALTH_BIND=f"127.0.0.1:{health}",
                   BATON_LOG_LEVEL="WARNING", BATON_DIGEST_KEY_FILE=digestkey.ensure(work / "digest.key"))
        op = subprocess.Popen([py, "-m", "baton"], env=env, stdout=open(work / "operator.log", "wb"),
                              stderr=subprocess.STDOUT)

        wait(lambda: process.healthy(health), 30, "operator healthy")
        ones = {k: 1 for k in ("lockSeconds", "connectSeconds", "drainSeconds", "terminationGraceSeconds",
                               "cleanupSeconds")}
        rt_template = pod_template("example/tool:0", "baton")
        for name in ("tool", "claimed"):
            custom.create_namespaced_custom_object("baton.dev", "v1alpha1", NS, "toolruntimes", {
                "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "metadata": {"name": name},
                "spec": {"template": rt_template, "budgets": {**ones, "connectSeconds": 30}}})
        dep_template = pod_template("example/tool:0", "deployment")
        apps.create_namespaced_deployment(NS, {
            "metadata": {"name": "recreate"},
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": {"app": "bench", "kind": "deployment"}},
                     "template": dep_template}})
        for name in ("tool", "claimed"):
            wait(lambda: (custom.get_namespaced_custom_object("baton.dev", "v1alpha1", NS, "toolruntimes", name)
                          .get("status", {}).get("current") or {}).get("generation") == 1, 60, "baton g1")
        wait(lambda: (apps.read_namespaced_deployment("recreate", NS).status.available_replicas or 0) == 1, 60,
             "deployment available")
        b: list[float] = []
        c: list[float] = []
        d: list[float] = []
        windows: dict[str, tuple[float, float]] = {}
        phases = random.Random(args.seed)
        for i in range(1, args.rounds + 1):
            phase = phases.random()
            time.sleep(1.0)  # the previous round's trailing writes (claims turning Stale) settle
            t = time.time()
            b.append(baton_round(custom, i, phase=phase))
            windows["baton"] = (t, time.time())
            time.sleep(1.0)
            c.append(baton_round(custom, i, "claimed", claims=True, phase=phase))
            time.sleep(1.0)
            t = time.time()
            d.append(deployment_round(apps, core, i, phase=phase))
            windows["recreate"] = (t, time.time())
        print(f"rounds: {args.rounds} (interleaved, same cluster, same pod template, grace 1 s; "
              f"each round's three changes start at the same phase of the second, seed {args.seed})")
        print(f"{'':12} {'p50 s':>8} {'p95 s':>8} {'mean s':>8}")
        for label, xs in (("baton", b), (f"+{CLAIMS} claims", c), ("recreate", d)):
            print(f"{label:12} {statistics.median(xs):8.3f} {pct(xs, 0.95):8.3f} {statistics.mean(xs):8.3f}")
        print(f"ratio baton/recreate: p50 {statistics.median(b) / statistics.median(d):.2f}  "
              f"p95 {pct(b, 0.95) / pct(d, 0.95):.2f}  mean {statistics.mean(b) / statistics.mean(d):.2f}")
        print(f"paired (same round, same phase) baton - recreate: median "
              f"{1000 * statistics.median(x - y for x, y in zip(b, d)):+.0f} ms")
        print(f"{CLAIMS} unreferenced claims on the retired generation add: "
              f"p50 {1000 * (statistics.median(c) - statistics.median(b)):+.0f} ms, "
              f"mean {1000 * (statistics.mean(c) - statistics.mean(b)):+.0f} ms")
        if args.trace:
            time.sleep(1.5)  # the audit log's last lines
            for label, (start, end) in windows.items():
                trace(audit, start, end, f"last {label} round")
        return 0
    finally:
        if op is not None:
            process.stop([op], timeout=15)
        process.plane(py, "down", "--dir", work / "plane", stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
