"""Idle runtimes beside always-on ones, on the local plane (a benchmark, not a test; issue 43).

One run, one plane (hack/cluster.py), two sides created at the same moment, each with its own
operator and gateway processes (tests/harness: OperatorProcess, GatewayProcess) in a namespace of
its own, so that each side's CPU and memory are its own:
- idle: N ToolRuntimes with `spec.idle` (afterSeconds 60, the CRD's floor; wakeSeconds 20);
- always-on: the same N runtimes without `spec.idle`.
All are behind their side's gateway. AWAKE runtimes of each side (the same on both) get a
tools/call through their gateway every KEEPALIVE seconds (their tools: harness ToolFleet servers
on kwok-loop pod IPs, 127.0.100.x); the others get no call, their pods on kwok-a (never dialled).
The floor of 60 s is paid once: every runtime is created together, so all the idle side's quiet
ones go idle together. Printed:

1. pods held by each side once the idle side settled (target: AWAKE on the idle side);
2. each side's operator and gateway: CPU-seconds over a steady window of STEADY seconds after
   that (only the keep-alive calls run), CPU-seconds from the creates until settled (the idle
   side retires N-AWAKE generations meanwhile), VmRSS at the end and VmHWM;
3. wake latency: WAKES idle runtimes (their tools on kwok-loop) each woken by one tools/call
   through the gateway, alternated with the plain start of the same pod (the woken pod's spec
   copied as a bare pod into a third namespace): the call's whole time against the bare pod's
   create -> Ready, both seen by this client (a watch of each namespace); also each woken pod's
   own create -> Ready and the gateway's Baton-Held-Ms. Target: wake p50 <= the pod's start + 1 s.

Usage: .venv/bin/python -m bench.idle [--n 1000] [--awake 10] [--wakes 10] [--steady 60]
(`make bench-idle N_IDLE=...`). Starts its own plane in a temp dir and stops it; all traffic goes
to 127.0.0.0/8; every wait and loop is bounded in count and time.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any, Callable

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m bench.idle ...")

from bench import gwstats, watched

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the harness the integration tests use

NS_IDLE, NS_ON, NS_PLAIN = "idle-bench-idle", "idle-bench-on", "idle-bench-plain"
AFTER_SECONDS = 60       # the CRD's floor for spec.idle.afterSeconds
WAKE_SECONDS = 20
KWOK_IMAGE = "registry.invalid/baton-test:0"  # never pulled: kwok runs no containers
TICKS = os.sysconf("SC_CLK_TCK")


def runtime(name: str, *, port: int, loopback: bool, idle: bool) -> dict[str, Any]:
    """One runtime behind the gateway; `loopback`: its pod on kwok-loop (a tool listens there)."""
    pod_spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1,
                                "containers": [{"name": "server", "image": KWOK_IMAGE,
                                                "ports": [{"name": "http", "containerPort": port}]}]}
    if loopback:
        pod_spec["nodeSelector"] = {"baton.dev/loopback": "true"}
        pod_spec["tolerations"] = [{"key": "baton.dev/loopback", "operator": "Exists", "effect": "NoSchedule"}]
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        "budgets": {"lockSeconds": 10, "connectSeconds": 20, "drainSeconds": 5, "terminationGraceSeconds": 1,
                    "cleanupSeconds": 10, "admissionSeconds": 60},
        # Loopback callers (this client) are no pods: admitted by address (docs/gateway.md).
        "service": {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True,
                    "clients": {"cidrs": ["127.0.0.0/8"]}},
    }
    if idle:
        spec["idle"] = {"afterSeconds": AFTER_SECONDS, "wakeSeconds": WAKE_SECONDS}
    return {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "metadata": {"name": name}, "spec": spec}


class Proc:
    """CPU-seconds and memory of a process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def mib(self, field: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return float("nan")


class PodTimes:
    """Pods of a namespace by a watch: when this client first saw each pod (by UID) and when it
    first saw it Ready (time.monotonic), and whether it is held (not being deleted)."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.uid_of: dict[str, str] = {}
        self.watch = watched.Watched(api, f"/api/v1/namespaces/{namespace}/pods", self._summary)

    def _summary(self, obj: dict[str, Any]) -> tuple[str, bool]:
        now = time.monotonic()
        meta = obj["metadata"]
        uid = meta["uid"]
        self.seen.setdefault(uid, now)
        self.uid_of[meta["name"]] = uid
        conds = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
            self.ready.setdefault(uid, now)
        return uid, bool(meta.get("deletionTimestamp"))

    def held(self) -> int:
        return self.watch.count(lambda _name, s: not s[1])

    def start_seconds(self, name: str, *, after: float) -> tuple[float] | None:
        """The pod named `name` first seen after `after` (a new generation's, not the one before):
        (first seen -> first seen Ready,), or None while it is not seen Ready."""
        uid = self.uid_of.get(name)
        if uid is None or uid not in self.ready or self.seen[uid] < after:
            return None
        return (self.ready[uid] - self.seen[uid],)


def runtime_summary(obj: dict[str, Any]) -> tuple[Any, bool, bool, bool]:
    """A ToolRuntime: (serving generation, Ready, a transition under way, idle: status.idle.since)."""
    idle_since = bool(((obj.get("status") or {}).get("idle") or {}).get("since"))
    return (*watched.runtime_summary(obj), idle_since)


def parallel(fn: Callable[[int], Any], n: int, threads: int = 16) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, range(n)))


def pct(values: list[float], q: float) -> str:
    return f"{gwstats.percentile(values, q):.2f}" if values else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="runtimes on each side (20..5000)")
    ap.add_argument("--awake", type=int, default=10, help="runtimes of each side kept busy by calls (1..100)")
    ap.add_argument("--wakes", type=int, default=10, help="idle runtimes woken, each beside a plain start (1..50)")
    ap.add_argument("--steady", type=float, default=60, help="seconds of the steady window (10..600)")
    ap.add_argument("--keepalive", type=float, default=15, help="seconds between the awake runtimes' calls (1..50)")
    ap.add_argument("--timeout", type=float, default=3600, help="bound of the whole run (60..7200)")
    args = ap.parse_args(argv)
    for name, value, lo, hi in (("--n", args.n, 20, 5000), ("--awake", args.awake, 1, 100),
                                ("--wakes", args.wakes, 1, 50), ("--steady", args.steady, 10, 600),
                                ("--keepalive", args.keepalive, 1, 50), ("--timeout", args.timeout, 60, 7200)):
        if not lo <= value <= hi:
            ap.error(f"{name} must be in {lo}..{hi}, got {value}")
    if args.awake + args.wakes > min(args.n, 100):
        ap.error(f"--awake + --wakes must be at most min(--n, 100) (kwok-loop's 127.0.100.0/24), "
                 f"got {args.awake} + {args.wakes}")
    return run(args)


def run(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    from dev import process
    from dev.ports import free_port
    from dev.crds import wait_established
    from dev.wait import wait_for
    from harness.gateway import GatewayProcess, ToolFleet, call, rpc
    from harness.operator import OperatorProcess

    t_start = time.monotonic()
    deadline = t_start + args.timeout

    def left(cap: float) -> float:
        return max(5.0, min(cap, deadline - time.monotonic()))

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t_start:7.1f}s] {text}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="baton-bench-idle-"))
    py = sys.executable
    say(f"work directory (logs): {work}; load average {os.getloadavg()[0]:.2f} (2 cores, shared: CPU and "
        f"latency figures are noisy)")
    process.plane(py, "up", "--dir", work / "plane", check=True, stdout=subprocess.DEVNULL)
    kubeconfig = str(work / "plane" / "kubeconfig")
    plane = types.SimpleNamespace(env=dict(os.environ, KUBECONFIG=kubeconfig), kubeconfig=kubeconfig)
    children: list[Any] = []
    fleets: list[Any] = []
    watches: list[watched.Watched] = []
    stop_keepalive = threading.Event()
    try:
        config.load_kube_config(kubeconfig)
        cfg = client.Configuration.get_default_copy()
        cfg.connection_pool_maxsize = 64
        api = client.ApiClient(cfg)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        kubectl = [str(Path(py).parent / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)
        wait_established(api)
        for ns in (NS_IDLE, NS_ON, NS_PLAIN):
            core.create_namespace({"metadata": {"name": ns}})
            wait_for(lambda: bool(core.list_namespaced_service_account(ns).items), timeout=60, what=f"{ns} default SA")

        sides = {"idle": NS_IDLE, "always-on": NS_ON}
        ops: dict[str, Any] = {}
        gws: dict[str, Any] = {}
        for side, ns in sides.items():
            # Production defaults where the harness sets short test values.
            op = OperatorProcess(plane, work, identity=f"op-{side}", namespaces=[ns],
                                 env={"BATON_SYSTEM_NAMESPACE": ns, "BATON_LOG_LEVEL": "WARNING",
                                      "BATON_LEASE_SECONDS": "15", "BATON_BACKOFF_BASE_SECONDS": "5"})
            children.append(op)
            op.start()
            gw = GatewayProcess(plane, work, identity=f"gw-{side}", namespaces=[ns], system_namespace=ns,
                                env={"BATON_LOG_LEVEL": "WARNING"})
            children.append(gw)
            gw.start()
            ops[side], gws[side] = op, gw
        procs = {f"{kind} {side}": Proc(p.proc.pid) for side in sides for kind, p in
                 (("operator", ops[side]), ("gateway", gws[side]))}

        # Names: rt-0000.. on both sides; the first AWAKE are kept busy, the next WAKES woken later.
        names = [f"rt-{i:04d}" for i in range(args.n)]
        awake, wakers = names[:args.awake], names[args.awake:args.awake + args.wakes]
        ports = {name: free_port() for name in awake + wakers}
        for side, ns in sides.items():
            for name in awake:
                fleets.append(ToolFleet(api, ns, name, port=ports[name]))
        pods = {side: PodTimes(api, ns) for side, ns in sides.items()}
        plain_pods = PodTimes(api, NS_PLAIN)
        rts = {side: watched.Watched(api, f"/apis/baton.dev/v1alpha1/namespaces/{ns}/toolruntimes", runtime_summary)
               for side, ns in sides.items()}
        for w in [*(p.watch for p in pods.values()), plain_pods.watch, *rts.values()]:
            watches.append(w.start())

        cpu0 = {k: p.cpu() for k, p in procs.items()}
        say(f"creating {args.n} runtimes on each side ({args.awake} kept awake, {args.wakes} to wake), interleaved")

        def create(i: int) -> None:
            name = names[i]
            for side, ns in sides.items():
                loop = name in ports
                body = runtime(name, port=ports.get(name, 8080), loopback=loop, idle=side == "idle")
                custom.create_namespaced_custom_object("baton.dev", "v1alpha1", ns, "toolruntimes", body)

        def keepalive() -> None:
            """A tools/call to each awake runtime of each side every KEEPALIVE seconds, from the
            creates on (afterSeconds counts from each one's Ready, and creating N takes longer):
            a round's calls in parallel, each bounded; a call before its runtime serves is held or
            refused, and the next round calls again."""
            targets = [(side, ns, name) for side, ns in sides.items() for name in awake]

            def one(target: tuple[str, str, str], i: int) -> None:
                side, ns, name = target
                try:
                    call(gws[side].port, f"{name}.{ns}", body=rpc(rid=f"keep-{i}"), timeout=30)
                except OSError:
                    pass  # the next round calls again

            bound = int(args.timeout / args.keepalive) + 1
            with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
                for i in range(bound):
                    if stop_keepalive.is_set() or time.monotonic() > deadline:
                        return
                    t_round = time.monotonic()
                    list(pool.map(lambda t: one(t, i), targets))
                    stop_keepalive.wait(max(0.0, args.keepalive - (time.monotonic() - t_round)))

        threading.Thread(target=keepalive, daemon=True).start()
        parallel(create, args.n)
        for side in sides:
            # Started: generation 1 Ready, or already idle (it was Ready for afterSeconds: with many
            # runtimes the first ones go idle before the last ones are Ready).
            wait_for(lambda: rts[side].count(lambda _n, s: (s[0] == 1 and s[1]) or s[3]) >= args.n,
                     timeout=left(300 + args.n), interval=1, what=f"{args.n} runtimes started on the {side} side")
        t_ready = time.monotonic()
        say(f"all {2 * args.n} started, Ready or already idle ({t_ready - t_start:.0f} s since start; "
            f"{rts['idle'].count(lambda _n, s: s[3])} idle by then)")

        quiet = args.n - args.awake
        say(f"waiting for {quiet} idle runtimes (afterSeconds {AFTER_SECONDS}, counted from each one's Ready)")
        wait_for(lambda: rts["idle"].count(lambda _n, s: s[3]) >= quiet and pods["idle"].held() <= args.awake,
                 timeout=left(AFTER_SECONDS + 300 + args.n), interval=1, what=f"{quiet} idle runtimes, their pods gone")
        t_settled = time.monotonic()
        cpu_settle = {k: p.cpu() - cpu0[k] for k, p in procs.items()}
        held = {side: pods[side].held() for side in sides}
        say(f"settled {t_settled - t_ready:.0f} s after all started: {rts['idle'].count(lambda _n, s: s[3])} idle; "
            f"pods held: idle side {held['idle']}, "
            f"always-on {held['always-on']} (target {args.awake})")
        time.sleep(left(args.steady))
        steady_s = time.monotonic() - t_settled
        cpu_steady = {k: p.cpu() - cpu0[k] - cpu_settle[k] for k, p in procs.items()}
        held_after = {side: pods[side].held() for side in sides}
        rss = {k: (p.mib("VmRSS"), p.mib("VmHWM")) for k, p in procs.items()}
        say(f"pods held after the steady window: idle side {held_after['idle']}, always-on {held_after['always-on']}")
        say(f"{'process':<20} {'CPU-s to settled':>17} {'CPU-s steady':>13} {'per minute':>11} {'VmRSS MiB':>10} {'VmHWM MiB':>10}")
        for k in procs:
            say(f"{k:<20} {cpu_settle[k]:>17.1f} {cpu_steady[k]:>13.1f} {cpu_steady[k] * 60 / steady_s:>11.2f} "
                f"{rss[k][0]:>10.1f} {rss[k][1]:>10.1f}")
        for kind in ("operator", "gateway"):
            a, b = f"{kind} idle", f"{kind} always-on"
            say(f"{kind}: idle/always-on CPU steady {cpu_steady[a] / max(cpu_steady[b], 0.01):.2f}, "
                f"VmRSS {rss[a][0] / rss[b][0]:.2f}, VmHWM {rss[a][1] / rss[b][1]:.2f}")

        # Wakes beside plain starts of the same pod, alternating which goes first.
        for name in wakers:
            fleets.append(ToolFleet(api, NS_IDLE, name, port=ports[name]))
        wake_s: list[float] = []
        wake_pod_s: list[float] = []
        held_ms: list[float] = []
        plain_s: list[float] = []
        failures: list[str] = []
        template: dict[str, Any] | None = None

        def wake(i: int) -> None:
            nonlocal template
            name = wakers[i]
            t0 = time.monotonic()
            reply = call(gws["idle"].port, f"{name}.{NS_IDLE}", body=rpc(rid=f"wake-{i}"), timeout=WAKE_SECONDS + 40)
            if reply.status != 200:
                failures.append(f"{name}: {reply.status} {reply.headers.get('baton-reason')}")
                return
            wake_s.append(reply.seconds)
            held_ms.append(float(reply.headers.get("baton-held-ms", "nan")))
            own = wait_for(lambda: pods["idle"].start_seconds(name, after=t0), timeout=left(30),
                           what=f"{name}'s new pod seen Ready")
            wake_pod_s.append(own[0])
            if template is None:
                pod = core.read_namespaced_pod(name, NS_IDLE)
                template = api.sanitize_for_serialization(pod.spec)

        def plain(i: int) -> None:
            assert template is not None
            spec = copy.deepcopy(template)
            spec.pop("nodeName", None)
            name = f"plain-{i}"
            t0 = time.monotonic()
            core.create_namespaced_pod(NS_PLAIN, {"metadata": {"name": name}, "spec": spec})
            uid = wait_for(lambda: plain_pods.uid_of.get(name), timeout=left(30), what=f"{name} seen")
            ready = wait_for(lambda: plain_pods.ready.get(uid), timeout=left(60), what=f"{name} Ready")
            plain_s.append(ready - t0)
            core.delete_namespaced_pod(name, NS_PLAIN, grace_period_seconds=0)

        wake(0)  # the first wake gives the pod spec the plain starts copy
        for i in range(args.wakes):
            order: list[Callable[[int], None]] = [plain, wake] if i % 2 == 0 else [wake, plain]
            for step in order:
                if step is wake and i == 0:
                    continue
                step(i)
        say(f"wake, {len(wake_s)} wakes (failed: {failures or 'none'}): call p50 {pct(wake_s, 50)} s p95 {pct(wake_s, 95)} s; "
            f"Baton-Held-Ms p50 {pct(held_ms, 50)} p95 {pct(held_ms, 95)}; the woken pod's own create -> Ready "
            f"p50 {pct(wake_pod_s, 50)} s p95 {pct(wake_pod_s, 95)} s")
        say(f"plain start of the same pod (bare pod, create -> Ready seen), {len(plain_s)}: p50 {pct(plain_s, 50)} s "
            f"p95 {pct(plain_s, 95)} s")
        if wake_s and plain_s:
            say(f"wake minus plain start: p50 {gwstats.percentile(wake_s, 50) - gwstats.percentile(plain_s, 50):+.2f} s, "
                f"p95 {gwstats.percentile(wake_s, 95) - gwstats.percentile(plain_s, 95):+.2f} s (target <= +1 s); "
                f"median pair by pair {statistics.median(w - p for w, p in zip(wake_s, plain_s)):+.2f} s")
        say(f"done in {time.monotonic() - t_start:.0f} s")
        return 0 if not failures else 1
    finally:
        stop_keepalive.set()
        # In parallel: each one's stop waits for its watch's next event or timeout (up to 30 s).
        with concurrent.futures.ThreadPoolExecutor(max(1, len(watches) + len(fleets))) as pool:
            list(pool.map(lambda stoppable: stoppable.stop(), [*watches, *fleets]))
        for child in reversed(children):
            child.kill()
        process.plane(py, "down", "--dir", work / "plane", stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    raise SystemExit(main())
