"""Peak operator RSS with many large ConfigMaps in the cluster, none referenced (issue 23; a
benchmark, not a test).

One plane: COUNT ConfigMaps of KIB KiB each (base64 noise, spread over a few namespaces, created
with modest concurrency), then, for each operator tree given (this worktree's by default; e.g.
`--baton-path /work/main/operator` for main beside it), one cluster-wide operator replica (the
default chart's scope: every namespace, ConfigMaps and Secrets watched) is started, waited for
until its ConfigMap view holds them all (baton_cache_objects), left to settle, and its peak RSS
(VmHWM, from /proc) printed beside the chart's memory limit (charts/baton/values.yaml), with
what the API server answered to its ConfigMap lists (apiserver_response_sizes).

Usage: .venv/bin/python -m bench.configmap_rss [--count 2000] [--kib 100]
           [--baton-path DIR ...] [--kubeconfig FILE]
(without --kubeconfig it starts its own plane with hack/cluster.py in a temp dir and stops it;
with one, it uses that cluster and deletes what it created. All traffic is loopback; every wait
is bounded.) `make bench-configmaps [COUNT=2000] [BASELINE=<another tree>/operator]` runs it.
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

if not __package__:  # run by path: dev is importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m bench.configmap_rss ...")

import yaml
from kubernetes import client, config

from dev import process
from dev.crds import wait_established
from dev.ports import free_port
from dev.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = [f"cmrss-{i}" for i in range(4)]


def chart_limit_mib() -> float:
    values = yaml.safe_load((ROOT / "charts" / "baton" / "values.yaml").read_text())
    text = str(values["resources"]["limits"]["memory"])
    m = re.fullmatch(r"(\d+)(Mi|Gi)", text)
    if m is None:
        raise SystemExit(f"cannot read the chart's memory limit {text!r}")
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of `pid`, MiB."""
    status = Path(f"/proc/{pid}/status").read_text()

    def field(name: str) -> float:
        m = re.search(rf"{name}:\s+(\d+) kB", status)
        return int(m.group(1)) / 1024 if m else float("nan")
    return field("VmRSS"), field("VmHWM")


def listed_mib(api: client.ApiClient) -> float:
    """What the API server has answered to ConfigMap lists so far (its apiserver_response_sizes:
    the bodies as sent, gzip-compressed where the client accepts it, as aiohttp does), MiB."""
    method, url, headers, body, _ = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
    resp.read()
    total = 0.0
    for line in resp.data.decode().splitlines():
        if line.startswith("apiserver_response_sizes_sum{") and 'resource="configmaps"' in line \
                and 'verb="LIST"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total / 2**20


def cached_configmaps(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return -1.0
    m = re.search(r'^baton_cache_objects\{kind="ConfigMap"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else -1.0


def create_configmaps(core: client.CoreV1Api, *, count: int, kib: int, concurrency: int) -> None:
    noise = base64.b64encode(os.urandom(kib * 1024 * 3 // 4)).decode()  # kib KiB of text

    def create(i: int) -> None:
        # Rotated per object, so no two are alike (nothing for compression to share).
        cut = random.randrange(len(noise))
        body = {"metadata": {"name": f"cm-{i:05d}"}, "data": {"blob": noise[cut:] + noise[:cut]}}
        for attempt in range(5):
            try:
                core.create_namespaced_config_map(NAMESPACES[i % len(NAMESPACES)], body, _request_timeout=60)
                return
            except client.ApiException as exc:
                if exc.status == 409:
                    return
                if attempt == 4 or exc.status not in (429, 500, 503, 504):
                    raise
                time.sleep(1 + attempt)

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, range(count)))


def measure(py: str, kubeconfig: str, baton_path: Path | None, *, count: int, settle: float, work: Path,
            timeout: float, admin: client.ApiClient) -> dict[str, Any]:
    mport, hport = free_port(), free_port()
    env = dict(os.environ, KUBECONFIG=kubeconfig, BATON_INSTANCE_ID="cmrss", BATON_LOG_LEVEL="WARNING",
               BATON_METRICS_BIND=f"127.0.0.1:{mport}", BATON_HEALTH_BIND=f"127.0.0.1:{hport}")
    env.pop("BATON_NAMESPACES", None)  # every namespace: the default chart's scope
    if baton_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(baton_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    where = subprocess.run([py, "-c", "import baton, os; print(os.path.dirname(os.path.dirname(baton.__file__)))"],
                           env=env, check=True, capture_output=True, text=True, cwd=work).stdout.strip()
    log = open(work / f"operator-{len(list(work.glob('operator-*.log')))}.log", "wb")
    listed0 = listed_mib(admin)
    op = subprocess.Popen([py, "-m", "baton"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        t0 = time.monotonic()
        peak_seen = 0.0

        def listed() -> bool:
            nonlocal peak_seen
            if op.poll() is not None:
                raise AssertionError(f"operator exited with {op.returncode} (log in {log.name})")
            peak_seen = max(peak_seen, rss_mib(op.pid)[1])
            return cached_configmaps(mport) >= count
        wait_for(listed, timeout=timeout, what=f"{count} ConfigMaps in the operator's view", interval=0.2)
        synced_after = time.monotonic() - t0
        end = time.monotonic() + settle
        while time.monotonic() < end:
            if op.poll() is not None:
                raise AssertionError(f"operator exited with {op.returncode} (log in {log.name})")
            time.sleep(0.5)
        current, peak = rss_mib(op.pid)
        return {"tree": where, "synced_s": synced_after, "rss": current, "peak": max(peak, peak_seen),
                "listed": listed_mib(admin) - listed0, "cached": cached_configmaps(mport)}
    finally:
        process.stop([op], timeout=30)
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--kib", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--settle", type=float, default=20.0, help="seconds measured after the view is full")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--baton-path", type=Path, action="append", default=[],
                    help="an operator tree (the directory holding baton/) to measure too; repeatable")
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting a plane")
    args = ap.parse_args()
    if not 1 <= args.count <= 5000 or not 1 <= args.kib <= 900 or not 1 <= args.concurrency <= 32:
        raise SystemExit("--count 1..5000, --kib 1..900, --concurrency 1..32")
    work = Path(tempfile.mkdtemp(prefix="baton-cmrss-"))
    py = sys.executable
    own_plane = args.kubeconfig is None
    if own_plane:
        process.plane(py, "up", "--dir", work / "plane", check=True, stdout=subprocess.DEVNULL)
    kubeconfig = str(work / "plane" / "kubeconfig") if own_plane else args.kubeconfig
    config.load_kube_config(kubeconfig)
    core = client.CoreV1Api()
    made: list[str] = []
    try:
        kubectl = [str(Path(py).parent / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)
        wait_established(client.ApiClient())
        for ns in NAMESPACES:
            core.create_namespace({"metadata": {"name": ns}})
            made.append(ns)
        t0 = time.monotonic()
        create_configmaps(core, count=args.count, kib=args.kib, concurrency=args.concurrency)
        print(f"{args.count} ConfigMaps of {args.kib} KiB ({args.count * args.kib / 1024:.0f} MiB of data) "
              f"created in {time.monotonic() - t0:.0f} s, none referenced", flush=True)
        limit = chart_limit_mib()
        trees: list[Path | None] = [None, *args.baton_path]
        print(f"{'operator tree':44} {'view full (s)':>13} {'peak RSS (MiB)':>15} {'RSS after (MiB)':>16} "
              f"{'listed (MiB)':>12} {'chart limit':>12}")
        failed = False
        for tree in trees:
            r = measure(py, kubeconfig, tree, count=args.count, settle=args.settle, work=work, timeout=args.timeout,
                        admin=client.ApiClient())
            under = r["peak"] < limit
            failed |= tree is None and not under
            print(f"{r['tree']:44} {r['synced_s']:13.1f} {r['peak']:15.1f} {r['rss']:16.1f} {r['listed']:12.1f} "
                  f"{limit:9.0f} Mi {'under' if under else 'OVER'}", flush=True)
        return 1 if failed else 0
    finally:
        for ns in made:
            try:
                core.delete_namespace(ns)
            except client.ApiException:
                pass
        if own_plane:
            process.plane(py, "down", "--dir", work / "plane", stdout=subprocess.DEVNULL)
        print(f"(logs in {work})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
