"""Baton at scale beside the Deployment controller, on the local plane (a benchmark, not a test).

One run, one plane, the same pod template and the same number N of objects on each side:
- create: N ToolRuntimes, then N one-replica Recreate Deployments (in their own namespaces);
  time until all are Ready (Baton: status.current.generation 1 and Ready=True; Deployment:
  availableReplicas 1);
- change: K simultaneous template changes on each side; time until all K converged (Baton:
  generation 2 Ready; Deployment: observedGeneration caught up, 1 updated + available replica);
- the operator's CPU-seconds and peak RSS (from /proc), API requests per runtime created (its
  own baton_api_requests_total), and, idle for 60 s afterwards, its CPU and API writes.

Usage: .venv/bin/python -m bench.scale [--n 1000] [--changes 100] [--replicas 1] [--workers 8]
(starts its own plane with hack/cluster.py in a temp dir and stops it; all traffic is loopback;
every wait is bounded.) `make bench-scale N=... CHANGES=...` runs it.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m bench.scale ...")

from kubernetes import client, config

from bench import watched
from dev import digestkey, process
from dev.crds import wait_established
from dev.ports import free_port
from dev.wait import WaitTimeout, wait_for

ROOT = Path(__file__).resolve().parents[1]

NS_B, NS_D = "scale-baton", "scale-deploy"
# --beside-single: one unsharded replica over N runtimes of its own, beside the sharded ones.
NS_S = "scale-single"
TICKS = os.sysconf("SC_CLK_TCK")


def template(image: str, kind: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "scale", "kind": kind}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "server", "image": image}]}}


class Proc:
    """CPU-seconds and peak RSS of a process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def peak_rss_mib(self) -> float:
        return self._status_mib("VmHWM")

    def rss_mib(self) -> float:
        """RSS now: after the idle period, what the cache and the process keep (the peak adds
        what a burst of work held for a while)."""
        return self._status_mib("VmRSS")

    def _status_mib(self, field: str) -> float:
        m = re.search(rf"{field}:\s+(\d+) kB", Path(f"/proc/{self.pid}/status").read_text())
        return int(m.group(1)) / 1024 if m else float("nan")


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU-seconds of the whole machine since boot, from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / TICKS, sum(ticks) / TICKS


def plane_procs(plane: Path) -> dict[str, Proc]:
    """The local plane's processes (hack/cluster.py writes "name pid" lines to DIR/pids)."""
    out = {}
    for line in (plane / "pids").read_text().splitlines():
        name, pid = line.split()
        out[name] = Proc(int(pid))
    return out


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def api_requests(text: str, *, writes_only: bool = False) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("baton_api_requests_total{"):
            if writes_only and not re.search(r'verb="(POST|PUT|PATCH|DELETE)"', line):
                continue
            total += float(line.rsplit(" ", 1)[1])
    return total


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of every sample of one family (all label values, or those with `labels`)."""
    total = 0.0
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


# The per-replica figures, in the table's order: (heading, width, format).
FIGURES = (("CPU-s", 8, ".1f"), ("peak RSS MiB", 13, ".1f"), ("RSS idle MiB", 13, ".1f"), ("watch events", 13, ".0f"),
           ("watch MiB", 10, ".2f"), ("cached objs", 12, ".0f"), ("ranges", 7, ".0f"), ("transitions", 12, ".0f"),
           ("passes", 7, ".0f"), ("API reqs", 9, ".0f"), ("409s", 6, ".0f"))
# What the issue compares, one replica of a pair against one replica alone (issue 26: <= 0.6).
COMPARED = ("watch events", "watch MiB", "cached objs", "passes", "API reqs", "CPU-s", "peak RSS MiB")


def replica_figures(p: Proc, port: int) -> dict[str, float]:
    text = scrape(port)
    return {"CPU-s": p.cpu(), "peak RSS MiB": p.peak_rss_mib(), "RSS idle MiB": p.rss_mib(),
            "watch events": metric_sum(text, "baton_watch_events_total"),
            "watch MiB": metric_sum(text, "baton_watch_bytes_total") / 2**20,
            "cached objs": metric_sum(text, "baton_cache_objects"),
            "ranges": metric_sum(text, "baton_shard_ranges_held"),
            "transitions": metric_sum(text, "baton_transitions_total"),
            "passes": metric_sum(text, "baton_passes_total"),
            "API reqs": metric_sum(text, "baton_api_requests_total"),
            "409s": metric_sum(text, "baton_api_requests_total", code="409")}


def per_replica(procs: list[Proc], ports: list[int], *, single: tuple[Proc, int] | None = None) -> None:
    """Each replica's own cost, in one table: what sharding divides (sharded, each replica lists
    and watches only its ranges' objects). With `single` (--beside-single), its row too, and each
    replica's figures against it: the same machine, the same moments, the same API server."""
    rows = [(f"scale-{i}", replica_figures(p, port)) for i, (p, port) in enumerate(zip(procs, ports))]
    if single is not None:
        rows.append(("single", replica_figures(*single)))
    print_replicas(rows, against_last=single is not None)


def print_replicas(rows: list[tuple[str, dict[str, float]]], *, against_last: bool) -> None:
    """The per-replica table; with `against_last`, then each other row's COMPARED figures divided
    by the last row's."""
    print(f"{'per replica':14} " + " ".join(f"{head:>{width}}" for head, width, _ in FIGURES))
    for label, fig in rows:
        print(f"{label:14} " + " ".join(f"{fig[head]:{width}{fmt}}" for head, width, fmt in FIGURES))
    if not against_last:
        return
    alone = rows[-1][1]
    print(f"each replica against the {rows[-1][0]} one beside it (issue 26: <= 0.6)")
    print(f"{'':14} " + " ".join(f"{head:>{max(width, 8)}}" for head, width, _ in FIGURES if head in COMPARED))
    for label, fig in rows[:-1]:
        print(f"{label:14} " + " ".join(
            f"{fig[head] / alone[head] if alone[head] else float('nan'):{max(width, 8)}.2f}"
            for head, width, _ in FIGURES if head in COMPARED))


def failover(ops: list[subprocess.Popen[bytes]], procs: list[Proc], ports: list[int], *, custom: Any, coord: Any,
             core: Any, ranges: int, timeout: float, runtimes: watched.Watched) -> None:
    """SIGKILL the last replica, change at once the template of every runtime in its ranges, and
    time until each has handed off (the next generation Ready): the takeover of a lost replica.
    Two earlier moments come from what the API server recorded, not from polling: when the last
    of the dead replica's range Leases was taken (its `acquireTime`), and when the last of its
    runtimes' handoffs began (the `eventTime` of its TransitionStarted Event)."""
    import datetime

    from baton.sharding import ranges as ranges_mod
    victim = f"scale-{len(ops) - 1}"
    held = {int(lz.metadata.name.rsplit(".", 1)[1]) for lz in coord.list_namespaced_lease(
        NS_B, label_selector="baton.dev/component=shard-range").items if lz.spec.holder_identity == victim}
    items = custom.list_namespaced_custom_object("baton.dev", "v1alpha1", NS_B, "toolruntimes")["items"]
    orphans = {rt["metadata"]["name"]: int(((rt.get("status") or {}).get("current") or {}).get("generation") or 0)
               for rt in items if ranges_mod.range_of(rt["metadata"]["uid"], ranges=ranges) in held}
    ops[-1].kill()
    ops[-1].wait(timeout=30)
    t0 = time.monotonic()
    killed = datetime.datetime.now(datetime.timezone.utc)
    parallel(lambda i: custom.patch_namespaced_custom_object(
        "baton.dev", "v1alpha1", NS_B, "toolruntimes", sorted(orphans)[i],
        {"spec": {"template": template("example/tool:3", "baton")}}), len(orphans))

    skipped = wait_served_above(runtimes, orphans, what="the killed replica's runtimes handed off", timeout=timeout,
                                interval=0.5)
    took = time.monotonic() - t0
    taken = [lz.spec.acquire_time for lz in coord.list_namespaced_lease(
        NS_B, label_selector="baton.dev/component=shard-range").items
        if int(lz.metadata.name.rsplit(".", 1)[1]) in held and lz.spec.holder_identity != victim and lz.spec.acquire_time]
    begun: dict[str, datetime.datetime] = {}
    for ev in core.list_namespaced_event(NS_B, field_selector="reason=TransitionStarted").items:
        at = ev.event_time or ev.first_timestamp
        name = ev.involved_object.name
        if name in orphans and at is not None and at >= killed:
            begun[name] = min(begun.get(name, at), at)
    print(f"failover: {victim} SIGKILLed holding {len(held)} of {ranges} ranges ({len(orphans)} runtimes); "
          f"every one handed off a template change made right after the kill in {took:.1f}s"
          f" ({skipped} skipped a generation number given up)")
    ranges_text = (f"{(max(taken) - killed).total_seconds():.1f}s" if len(taken) == len(held)
                   else f"? ({len(taken)} of {len(held)} show a survivor's acquireTime)")
    begun_text = (f"{(max(begun.values()) - killed).total_seconds():.1f}s" if len(begun) == len(orphans)
                  else f"? ({len(begun)} of {len(orphans)} TransitionStarted Events found)")
    print(f"  by the API server's records: the last of its ranges taken by a survivor {ranges_text} after the kill; "
          f"the last of its runtimes' handoffs begun {begun_text} after it")


def wait_served_above(runtimes: watched.Watched, above: dict[str, int], *, what: str, timeout: float,
                      interval: float) -> int:
    """Wait until each runtime in `above` serves a generation above the one given, Ready, with no
    transition under way; return how many skipped a number on the way. A holder that resumes a
    Creating written under another holder's token gives that number up (`lifecycle.lease`), so
    after a range move or a takeover the next serving generation may be two above, not one. On a
    timeout, say what the ones still waiting look like before raising."""
    def served(name: str, s: Any) -> bool:
        return name in above and s[0] is not None and s[0] > above[name] and s[1:] == (True, False)
    try:
        wait_for(lambda: runtimes.count(served) == len(above), timeout=timeout, what=what, interval=interval)
    except WaitTimeout:
        now = runtimes.summaries(set(above))
        waiting = {name: now.get(name) for name in above if not served(name, now.get(name) or (None, False, False))}
        shapes = collections.Counter(
            "absent" if s is None else f"generation {s[0]} (was {above[name]}), Ready {s[1]}, transition {s[2]}"
            for name, s in waiting.items())
        print(f"{what}: {len(waiting)} of {len(above)} still waiting; as (serving generation, Ready, transition):",
              file=sys.stderr)
        for shape, count in shapes.most_common(8):
            print(f"  {count:6d}  {shape}", file=sys.stderr)
        print(f"  e.g. {', '.join(sorted(waiting)[:8])}", file=sys.stderr)
        raise
    now = runtimes.summaries(set(above))
    return sum(1 for name, s in now.items() if s[0] > above[name] + 1)


def profiled(op: subprocess.Popen[bytes]) -> int:
    """Under py-spy the operator is py-spy's child: that process is measured, not the profiler."""
    return int(Path(f"/proc/{op.pid}/task/{op.pid}/children").read_text().split()[0])


def wait_sides(sides: list[tuple[str, watched.Watched, dict[str, int]]], *, what: str, timeout: float,
               interval: float, t0: float) -> list[tuple[int, float]]:
    """wait_served_above for each (namespace, its runtimes, the generations to serve above) at
    once, one thread each; per side, (numbers given up, seconds from t0 until that side was done)."""
    def one(side: tuple[str, watched.Watched, dict[str, int]]) -> tuple[int, float]:
        ns, runtimes, above = side
        skipped = wait_served_above(runtimes, above, what=f"{ns}: {what}", timeout=timeout, interval=interval)
        return skipped, time.monotonic() - t0
    with concurrent.futures.ThreadPoolExecutor(len(sides)) as pool:
        return list(pool.map(one, sides))


def parallel(fn: Callable[[int], Any], n: int, threads: int = 16) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, range(n)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--shard-ranges", type=int, default=0,
                    help="BATON_SHARD_RANGES for every replica (0: off); with 2+ replicas the run ends with "
                         "the failover of a SIGKILLed replica")
    ap.add_argument("--idle-seconds", type=int, default=60)
    ap.add_argument("--skip-deployments", action="store_true",
                    help="no Deployments beside (the per-replica figures and the failover only; the ratios print as -)")
    ap.add_argument("--skip-failover", action="store_true",
                    help="with shards, stop after the per-replica figures (a profile then covers create, changes and idle only)")
    ap.add_argument("--beside-single", action="store_true",
                    help="with shards, also one unsharded replica over N runtimes of its own namespace, created "
                         "and changed at the same moments; each sharded replica's figures are then printed against "
                         "its (one run: the same machine and API server for both)")
    ap.add_argument("--log-level", default="WARNING", help="BATON_LOG_LEVEL of the operators (logs: the work directory)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--profile", metavar="FILE", help="run the (first) operator under py-spy record, "
                    "writing collapsed stacks to FILE (pip install py-spy; .[bench]); with --beside-single, "
                    "the single replica too, to FILE.single")
    args = ap.parse_args()
    if args.beside_single and not args.shard_ranges:
        ap.error("--beside-single needs --shard-ranges (the replicas it is set beside are sharded)")
    work = Path(tempfile.mkdtemp(prefix="baton-scale-"))
    py = sys.executable
    process.plane(py, "up", "--dir", work / "plane", check=True, stdout=subprocess.DEVNULL)
    kubeconfig = str(work / "plane" / "kubeconfig")
    ops: list[subprocess.Popen[bytes]] = []
    procs: list[Proc] = []
    # Every operator started (the sharded ones and the single one): the process started, and the
    # one measured (under py-spy the operator is py-spy's child).
    started: list[tuple[subprocess.Popen[bytes], Proc]] = []
    single: tuple[Proc, int] | None = None
    watchers: list[watched.Watched] = []
    try:
        config.load_kube_config(kubeconfig)
        cfg = client.Configuration.get_default_copy()
        cfg.connection_pool_maxsize = 32
        api = client.ApiClient(cfg)
        core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        kubectl = [str(Path(py).parent / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)
        wait_established(client.ApiClient())
        for ns in (NS_B, NS_D, *((NS_S,) if args.beside_single else ())):
            core.create_namespace({"metadata": {"name": ns}})

        def start_operator(identity: str, namespace: str, shard_ranges: int, *,
                           profile: str | None = None) -> tuple[subprocess.Popen[bytes], Proc, int]:
            mport, hport = free_port(), free_port()
            env = dict(os.environ, KUBECONFIG=kubeconfig, BATON_INSTANCE_ID=identity, BATON_NAMESPACES=namespace,
                       BATON_METRICS_BIND=f"127.0.0.1:{mport}", BATON_HEALTH_BIND=f"127.0.0.1:{hport}",
                       BATON_LOG_LEVEL=args.log_level, BATON_WORKERS=str(args.workers),
                       BATON_DIGEST_KEY_FILE=digestkey.ensure(work / "digest.key"),
                       BATON_SHARD_RANGES=str(shard_ranges), BATON_SYSTEM_NAMESPACE=namespace)
            argv = [py, "-m", "baton"]
            if profile:
                spy = str(Path(py).parent / "py-spy")
                argv = [spy, "record", "--format", "raw", "--rate", "50", "--nonblocking",
                        "--output", profile, "--", *argv]
            op = subprocess.Popen(argv, env=env, stdout=open(work / f"operator-{identity}.log", "wb"),
                                  stderr=subprocess.STDOUT)
            started.append((op, Proc(op.pid)))
            wait_for(lambda: process.healthy(hport), timeout=60, what="operator healthy", interval=0.2)
            if profile:
                started[-1] = (op, Proc(profiled(op)))
            return op, started[-1][1], mport

        metrics_ports = []
        for r in range(args.replicas):
            op, measured, mport = start_operator(f"scale-{r}", NS_B, args.shard_ranges,
                                                 profile=args.profile if r == 0 else None)
            ops.append(op)
            procs.append(measured)
            metrics_ports.append(mport)
        if args.beside_single:
            _, measured, mport = start_operator("single", NS_S, 0,
                                                profile=f"{args.profile}.single" if args.profile else None)
            single = (measured, mport)
        budgets = {"lockSeconds": 10, "connectSeconds": 120, "drainSeconds": 1, "terminationGraceSeconds": 1,
                   "cleanupSeconds": 30}

        # Readiness as the watches report it: a poll listing all N objects would load the API
        # server (and this process) in proportion to N at every poll (bench/watched.py).
        watched_rt = watched.Watched(api, f"/apis/baton.dev/v1alpha1/namespaces/{NS_B}/toolruntimes",
                                     watched.runtime_summary).start()
        watched_d = watched.Watched(api, f"/apis/apps/v1/namespaces/{NS_D}/deployments",
                                    watched.deployment_summary).start()
        watchers.extend((watched_rt, watched_d))
        watched_s: watched.Watched | None = None
        if args.beside_single:
            watched_s = watched.Watched(api, f"/apis/baton.dev/v1alpha1/namespaces/{NS_S}/toolruntimes",
                                        watched.runtime_summary).start()
            watchers.append(watched_s)
        # The namespaces whose runtimes are created and changed together: the sharded replicas'
        # first, then the single replica's beside them (each runtime of one has its twin in the other).
        sides = [(NS_B, watched_rt)] + ([(NS_S, watched_s)] if watched_s is not None else [])

        def deploy_ready(names: set[str], want_gen: dict[str, int] | None = None) -> Callable[[], bool]:
            def check() -> bool:
                done = watched_d.count(lambda name, s: name in names
                                       and (not want_gen or s[1] >= want_gen[name]) and s[2:] == (1, 1, 1))
                return done == len(names)
            return check

        n = args.n
        names = {f"rt-{i:04d}" for i in range(n)}
        cpu0 = [p.cpu() for p in procs]
        def requests_now(*, writes_only: bool = False) -> float:
            """The sharded replicas' API requests so far. The single replica beside them is scraped
            at the same moments (and its answer dropped): a scrape costs its process CPU, so each
            process pays for as many."""
            if single is not None:
                scrape(single[1])
            return sum(api_requests(scrape(port), writes_only=writes_only) for port in metrics_ports)

        req0 = requests_now()
        t0 = time.monotonic()
        # Interleaved: with --beside-single, the twins in the two namespaces are created together.
        parallel(lambda j: custom.create_namespaced_custom_object(
            "baton.dev", "v1alpha1", sides[j % len(sides)][0], "toolruntimes", {
                "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime",
                "metadata": {"name": f"rt-{j // len(sides):04d}"},
                "spec": {"template": template("example/tool:1", "baton"), "budgets": budgets}}), n * len(sides))
        (skipped_create, baton_create), *single_create = wait_sides(
            [(ns, side, dict.fromkeys(names, 0)) for ns, side in sides], what="all Ready", timeout=args.timeout,
            interval=0.5, t0=t0)
        cpu_create = sum(p.cpu() for p in procs) - sum(cpu0)
        req_create = requests_now() - req0

        dnames = {f"d-{i:04d}" for i in range(n)} if not args.skip_deployments else set()
        t0 = time.monotonic()
        parallel(lambda i: apps.create_namespaced_deployment(NS_D, {
            "metadata": {"name": f"d-{i:04d}"},
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": {"app": "scale", "kind": "deployment", "d": f"d-{i:04d}"}},
                     "template": {**template("example/tool:1", "deployment"),
                                  "metadata": {"labels": {"app": "scale", "kind": "deployment", "d": f"d-{i:04d}"}}}}}),
                 len(dnames))
        wait_for(deploy_ready(dnames), timeout=args.timeout, what="deployments: all available", interval=0.5)
        deploy_create = time.monotonic() - t0

        k = min(args.changes, n)
        changed = {f"rt-{i:04d}" for i in range(k)}
        cpu1 = sum(p.cpu() for p in procs)
        plane = plane_procs(work / "plane")
        plane0 = {name: pr.cpu() for name, pr in plane.items()}
        busy0, total0 = machine_busy()
        served_before = [(ns, side, {name: s[0] for name, s in side.summaries(changed).items()}) for ns, side in sides]
        t0 = time.monotonic()
        parallel(lambda j: custom.patch_namespaced_custom_object(
            "baton.dev", "v1alpha1", sides[j % len(sides)][0], "toolruntimes", f"rt-{j // len(sides):04d}",
            {"spec": {"template": template("example/tool:2", "baton")}}), k * len(sides))
        (skipped_change, baton_change), *single_change = wait_sides(
            served_before, what="changes converged", timeout=args.timeout, interval=1.0, t0=t0)
        cpu_change = sum(p.cpu() for p in procs) - cpu1
        busy1, total1 = machine_busy()
        plane_change = {name: pr.cpu() - plane0[name] for name, pr in plane.items()}
        cores = (total1 - total0) / baton_change  # CPU-seconds of all cores per second of wall time

        dchanged = {f"d-{i:04d}" for i in range(k)} if not args.skip_deployments else set()
        want: dict[str, int] = {}
        t0 = time.monotonic()

        def patch_deploy(i: int) -> None:
            name = f"d-{i:04d}"
            d = apps.patch_namespaced_deployment(name, NS_D, {"spec": {"template": {"spec": {
                "containers": [{"name": "server", "image": "example/tool:2"}]}}}})
            want[name] = d.metadata.generation
        parallel(patch_deploy, len(dchanged))
        wait_for(deploy_ready(dchanged, want), timeout=args.timeout, what="deployments: changes converged", interval=1.0)
        deploy_change = time.monotonic() - t0

        time.sleep(5)
        cpu2 = sum(p.cpu() for p in procs)
        w0 = requests_now(writes_only=True)
        time.sleep(args.idle_seconds)
        idle_cpu = sum(p.cpu() for p in procs) - cpu2
        idle_writes = requests_now(writes_only=True) - w0
        rss = max(p.peak_rss_mib() for p in procs)
        if single_create and single_change:
            print(f"beside: one unsharded replica over N runtimes of {NS_S}, created and changed at the same moments: "
                  f"all Ready {single_create[0][1]:.1f}s, changes converged {single_change[0][1]:.1f}s, "
                  f"numbers given up {single_create[0][0]}, {single_change[0][0]}")

        print(f"N={n}, changes={k}, replicas={args.replicas}, workers={args.workers} "
              f"(same plane, same template; Baton first, then Deployments)")
        print(f"{'':38} {'baton':>10} {'deploy':>10} {'ratio':>7}")
        for label, ours, theirs in (("create N, all Ready (s)", baton_create, deploy_create),
                                    ("K template changes converged (s)", baton_change, deploy_change)):
            if args.skip_deployments:
                print(f"{label:38} {ours:10.1f} {'-':>10} {'-':>7}")
            else:
                print(f"{label:38} {ours:10.1f} {theirs:10.1f} {ours / theirs:7.2f}")
        print(f"{'operator CPU-s, create phase':38} {cpu_create:10.1f}")
        print(f"{'operator CPU-s per runtime created':38} {cpu_create / n:10.4f}")
        print(f"{'operator CPU-s, change phase':38} {cpu_change:10.1f}")
        print(f"{'handoffs per second':38} {k / baton_change:10.2f}")
        # Where the machine's CPU went while Baton's changes ran: when the cores are all busy,
        # another replica cannot add handoffs per second, whatever its own efficiency.
        print(f"{'machine busy, change phase (cores)':38} {(busy1 - busy0) / baton_change:10.2f} of {cores:.0f}")
        print(f"{'  operator(s) CPU-s / wall s':38} {cpu_change / baton_change:10.2f}")
        for name, used in sorted(plane_change.items(), key=lambda kv: -kv[1]):
            print(f"{f'  {name} CPU-s / wall s':38} {used / baton_change:10.2f}")
        print(f"{'generation numbers given up (create, changes)':38} {skipped_create:6d}, {skipped_change}")
        print(f"{'API requests per runtime created':38} {req_create / n:10.1f}")
        print(f"{'operator peak RSS (MiB)':38} {rss:10.1f}")
        print(f"{f'idle {args.idle_seconds}s: CPU-s (% of a core)':38} {idle_cpu:10.2f} "
              f"({100 * idle_cpu / args.idle_seconds:.2f} %)")
        print(f"{f'idle {args.idle_seconds}s: API writes':38} {idle_writes:10.0f}")
        per_replica(procs, metrics_ports, single=single)
        if args.shard_ranges and len(ops) >= 2 and not args.skip_failover:
            failover(ops, procs, metrics_ports, custom=custom, coord=client.CoordinationV1Api(api), core=core,
                     ranges=args.shard_ranges, timeout=args.timeout, runtimes=watched_rt)
        return 0
    finally:
        for w in watchers:
            w.stop()
        for op, measured in started:
            if measured.pid != op.pid:
                # Stop the operator itself: py-spy then writes its profile and exits.
                try:
                    os.kill(measured.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            else:
                op.terminate()
        process.stop([op for op, _ in started], timeout=30, terminate=False)
        process.plane(py, "down", "--dir", work / "plane", stdout=subprocess.DEVNULL)
        print(f"(logs in {work})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
