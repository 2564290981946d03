"""The gateway beside calling pods directly, on the local plane (a benchmark, not a test; issue 24).

One run, one plane (hack/cluster.py: etcd, kube-apiserver, kube-controller-manager, scheduler,
kwok), one operator and gateway processes started as the integration tests start them
(tests/harness: OperatorProcess, GatewayProcess, ToolServer). Four parts:

1. Handoffs: HANDOFFS template changes, one after the other, on each of four paths while a
   client makes RATE calls/s (paced, open loop: a call that hangs does not slow the next), each a
   small JSON-RPC POST in the stateless 2026-07-28 style (no session), on a new connection, with a
   per-call timeout; every failure is counted with its cause. The paths:
   - direct Service: a ToolRuntime with `gateway: false`. There is no kube-proxy on the local
     plane, and EndpointSlices cannot hold the loopback pod IPs the tools listen on, so the client
     does what kube-proxy does with the Service's ready endpoints, on every call: it lists the
     pods the Service selects, keeps the Ready ones that are not being deleted (what the
     EndpointSlice controller lists as ready), picks one, and dials its IP and target port. A
     fresher view than kube-proxy's (which lags the slices): this favours the direct path.
   - gateway: a ToolRuntime with `gateway: true`, called through one gateway replica (Host
     header `<runtime>.<namespace>`); the operator seals it (same system namespace).
   - a one-replica Deployment, strategy Recreate, with a Service, called as the direct path.
   - a one-replica Deployment, strategy RollingUpdate (maxSurge 1, maxUnavailable 0 for one
     replica): it runs two pods at once during each rollout, which Baton never does.
   - session (issue 42): a handshake-era (2025-11-25) MCP client through the gateway, its own
     runtime (sessions: Rebind, the default), its tools keeping MCP sessions in each pod's memory
     (an id another pod issued: 404). Two sessions, each initialized once and kept for the whole
     run, as the official SDKs keep theirs: the main one calls every 1/RATE s, one call after the
     other, through all handoffs; the probe one is quiet while a handoff runs, then makes the
     re-bound call (the gateway replays initialize and notifications/initialized on N+1 for it)
     and a few ordinary calls: the re-bind's added latency, p50/p95, free of any hold. With
     --baseline, again through the baseline's gateway (which may predate Rebind: then it shows
     what such a client gets there).
   Each pod's tool is a ToolServer on its kwok-loop IP (127.0.100.x). Pods are created un-Ready
   (baton.dev/test-never-ready) and turned Ready once their tool listens (a readiness probe that
   passes), and a tool stops listening when its pod is being deleted (as at SIGTERM). Grace 1 s.
2. Latency: client -> gateway -> tool against client -> tool, the same tool (an aiohttp server in
   its own process on the pod IP of a third runtime), interleaved call by call (the order swapped
   every pair), each path paced at LAT_RATE calls/s, LAT_CALLS calls each, kept-alive connections.
3. Throughput: one gateway process (pinned to one core with taskset when there are two or more),
   closed-loop aiohttp clients in another process, CONCURRENCY at once for TPUT_SECONDS; the
   gateway's own CPU-seconds from /proc give calls per CPU-second (the per-core figure). The same
   load straight to the tool first shows what the client and tool alone reach.
4. RSS: a fresh gateway process watching RSS_RUNTIMES ToolRuntimes, each with a pod, in another
   namespace; they are copies of the gateway runtime and of its pod as the operator wrote them
   (labels, annotations, spec, status naming the pod), created by this script without an
   operator (its pods land on kwok-a, 192.0.2.x, never dialled). Its peak RSS (VmHWM) after its
   views listed everything and it served calls.

Usage: .venv/bin/python -m bench.gateway [--handoffs 50] [--rate 20] [--lat-calls 4000] ...
(`make bench-gateway HANDOFFS=50 RATE=20 ...`). Starts its own plane in a temp dir and stops it;
all traffic goes to 127.0.0.0/8; every request loop is bounded in count and time.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import dataclasses
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.request
from pathlib import Path
from typing import Any, Callable

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m bench.gateway ...")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the harness the integration tests use

from bench import gwbaseline, gwsession, gwstats  # noqa: E402

NS, NS_RSS = "bench-gw", "bench-gw-rss"
TICKS = os.sysconf("SC_CLK_TCK")
NEVER_READY = "baton.dev/test-never-ready"
LOOP_PLACEMENT = {"nodeSelector": {"baton.dev/loopback": "true"},
                  "tolerations": [{"key": "baton.dev/loopback", "operator": "Exists", "effect": "NoSchedule"}]}
GROUP, VERSION, PLURAL = "baton.dev", "v1alpha1", "toolruntimes"
# The harness's GatewayProcess sets a 6 s registration Lease for its tests; the bench runs the
# default (15 s: a renewal may take up to 13 s before the replica stops forwarding).
GATEWAY_DEFAULTS = {"BATON_GATEWAY_LEASE_SECONDS": "15"}


def rpc(rid: Any) -> bytes:
    """A small stateless (2026-07-28 style) JSON-RPC call: no session header, no handshake."""
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "hello"}}}).encode()


def loopback(ip: str) -> str:
    import ipaddress
    if not ipaddress.ip_address(ip).is_loopback:
        raise AssertionError(f"refusing to dial {ip}: the bench only sends traffic to 127.0.0.0/8")
    return ip


# ---------------------------------------------------------------- subprocess modes (tool, load)

def tool_host_main(port: int, max_seconds: float, sessions_file: Path | None = None) -> None:
    """The tools of one path's pods, in a process of their own (as containers are; and apart from
    the client's threads): reads `start <ip>` and `stop <ip>` lines on stdin. start: an aiohttp
    JSON-RPC tool listens on ip:port; stop: it stops listening at once (SIGTERM), the calls in
    flight finish. Exits at EOF, after max_seconds, or when its parent is gone.
    With `sessions_file` (opt-in, the handshake-era path): each tool is a 2025-11-25 MCP server
    with sessions in its pod's memory (gwsession.SessionTool: an id another pod issued is a 404;
    stop forgets the pod's sessions); at exit, what it saw is written there as JSON."""
    from aiohttp import web

    parent = os.getppid()
    sessions = gwsession.SessionTool() if sessions_file is not None else None

    async def handle_session(request: web.Request) -> web.Response:
        assert sessions is not None
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        ip = sock[0] if sock else ""  # the pod the call reached: each site listens on its pod's IP
        sid = request.headers.get(gwsession.SESSION_HEADER)
        if request.method == "DELETE":
            answer = sessions.delete(ip=ip, session=sid)
        else:
            answer = sessions.post(ip=ip, session=sid, body=await request.read())
        headers = {gwsession.SESSION_HEADER: answer.session} if answer.session else {}
        return web.Response(status=answer.status, body=answer.body, headers=headers,
                            content_type="application/json" if answer.body else None)

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            rid = json.loads(body).get("id")
        except ValueError:
            rid = None
        return web.json_response({"jsonrpc": "2.0", "id": rid,
                                  "result": {"content": [{"type": "text", "text": "hello"}]}})

    async def run() -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue[str] = asyncio.Queue()

        def read() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(commands.put_nowait, line.strip())
            loop.call_soon_threadsafe(commands.put_nowait, "eof")
        threading.Thread(target=read, daemon=True).start()
        app = web.Application()
        if sessions is None:
            app.router.add_post("/{tail:.*}", handle)
        else:
            app.router.add_post("/{tail:.*}", handle_session)
            app.router.add_delete("/{tail:.*}", handle_session)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=10)
        await runner.setup()
        sites: dict[str, web.TCPSite] = {}

        async def start(ip: str) -> None:
            for attempt in range(50):  # the IP's previous tool may still be letting go of it
                try:
                    site = web.TCPSite(runner, loopback(ip), port, backlog=1024, reuse_address=True)
                    await site.start()
                    sites[ip] = site
                    return
                except OSError as exc:
                    if attempt == 49:
                        print(f"tool on {ip}:{port} could not listen: {exc}", file=sys.stderr, flush=True)
                    await asyncio.sleep(0.1)

        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline and os.getppid() == parent:
            try:
                cmd = await asyncio.wait_for(commands.get(), 1)
            except asyncio.TimeoutError:
                continue
            verb, _, ip = cmd.partition(" ")
            if verb == "eof":
                break
            if verb == "start" and ip not in sites:
                loop.create_task(start(ip))
            elif verb == "stop" and ip in sites:
                loop.create_task(sites.pop(ip).stop())
                if sessions is not None:
                    sessions.forget(ip)  # the pod's memory goes with it
        await runner.cleanup()
        if sessions is not None and sessions_file is not None:
            sessions_file.write_text(json.dumps(dict(sessions.counts)))

    asyncio.run(run())


def load_main(ip: str, port: int, host: str, seconds: float, concurrency: int, max_calls: int) -> None:
    """Closed-loop clients: `concurrency` kept-alive connections to ip:port (loopback), each posting
    one call after the other until `seconds` or `max_calls`; prints {calls, failed, seconds}."""
    import aiohttp

    async def run() -> dict[str, Any]:
        ok, failed = 0, 0
        causes: dict[str, int] = {}
        body = rpc(1)
        headers = {"Host": host, "Content-Type": "application/json"}
        conn = aiohttp.TCPConnector(limit=concurrency, force_close=False)
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout, skip_auto_headers=("User-Agent",)) as s:
            t0 = time.monotonic()
            deadline = t0 + seconds

            async def worker() -> None:
                nonlocal ok, failed
                while time.monotonic() < deadline and ok + failed < max_calls:
                    try:
                        async with s.post(f"http://{loopback(ip)}:{port}/mcp", data=body, headers=headers) as r:
                            await r.read()
                            cause = gwstats.cause_of_status(r.status, r.headers.get("Baton-Reason"))
                    except Exception as exc:  # counted, with its cause
                        cause = gwstats.cause_of_exception(exc)
                    if cause:
                        failed += 1
                        causes[cause] = causes.get(cause, 0) + 1
                    else:
                        ok += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return {"calls": ok + failed, "failed": failed, "causes": causes, "seconds": time.monotonic() - t0}

    print(json.dumps(asyncio.run(run())))


# ---------------------------------------------------------------- processes and /proc

class Proc:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def status_mib(self, field: str) -> float:
        m = re.search(rf"{field}:\s+(\d+) kB", Path(f"/proc/{self.pid}/status").read_text())
        return int(m.group(1)) / 1024 if m else float("nan")


def metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if not line.startswith("#") and head.split("{", 1)[0] == name and all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def pin(pid: int, core: int) -> bool:
    """Every thread of `pid` onto `core` (taskset -a); False when taskset or a second core is missing."""
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        return False
    return subprocess.run(["taskset", "-a", "-p", "-c", str(core), str(pid)], stdout=subprocess.DEVNULL).returncode == 0


def taskset_prefix(core: int | None) -> list[str]:
    return ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") and (os.cpu_count() or 1) >= 2 else []


# ---------------------------------------------------------------- tools on kwok-loop pod IPs

class PodTools:
    """The tool of each pod that `selector` selects in `namespace`, on the pod's IP, played by one
    tool host process (tool_host_main): started when the pod has an IP; once it listens, the pod
    is made Ready (its never-ready annotation removed, as a readiness probe passes); stopped
    (stops listening, finishes its calls in flight) once the pod is being deleted, as at SIGTERM.
    Watches in a thread, bounded by `max_seconds`. With `sessions_file`, the tools keep MCP
    sessions (tool_host_main); what they saw is in that file once `stop` returned."""

    def __init__(self, core: Any, namespace: str, selector: str, port: int, max_seconds: float, log: Path,
                 sessions_file: Path | None = None) -> None:
        self.core, self.namespace, self.selector, self.port = core, namespace, selector, port
        self.sessions_file = sessions_file
        self.host = subprocess.Popen([sys.executable, "-m", "bench.gateway", "--tool-host", str(port), str(max_seconds)]
                                     + (["--tool-sessions", str(sessions_file)] if sessions_file is not None else []),
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=open(log, "ab"))
        self.live: dict[str, str] = {}   # pod uid -> IP
        self.retired: set[str] = set()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _send(self, line: str) -> None:
        assert self.host.stdin is not None
        self.host.stdin.write(line.encode() + b"\n")
        self.host.stdin.flush()

    def _apply(self, kind: str, pod: Any) -> None:
        uid, ip = pod.metadata.uid, pod.status.pod_ip if pod.status else None
        with self.lock:
            if kind == "DELETED" or pod.metadata.deletion_timestamp:
                old = self.live.pop(uid, None)
                self.retired.add(uid)
                if old is not None:
                    self._send(f"stop {old}")
                return
            if not ip or uid in self.live or uid in self.retired:
                return
            self.live[uid] = loopback(ip)
            self._send(f"start {ip}")
        threading.Thread(target=self._make_ready, args=(pod.metadata.name, ip, pod.metadata.annotations or {}),
                         daemon=True).start()

    def _make_ready(self, name: str, ip: str, annotations: dict[str, str]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((loopback(ip), self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.01)
        if NEVER_READY in annotations:
            try:
                self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"annotations": {NEVER_READY: None}}})
            except Exception as exc:  # gone meanwhile: nothing to make Ready
                print(f"  (could not make {name} Ready: {type(exc).__name__})", file=sys.stderr)

    def _run(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                w = watch.Watch()
                for ev in w.stream(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector,
                                   timeout_seconds=10):
                    self._apply(ev["type"], ev["object"])
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception:  # a dropped watch: list and watch again
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)
        if self.host.stdin is not None:
            try:
                self.host.stdin.close()
            except OSError:
                pass
        try:
            self.host.wait(15)
        except subprocess.TimeoutExpired:
            self.host.kill()
            self.host.wait(10)


# ---------------------------------------------------------------- calls

def post(ip: str, port: int, host: str, body: bytes, timeout: float) -> tuple[int, str | None]:
    """One call on a new connection; (status, Baton-Reason)."""
    conn = http.client.HTTPConnection(loopback(ip), port, timeout=timeout)
    try:
        conn.request("POST", "/mcp", body=body, headers={"Host": host, "Content-Type": "application/json",
                                                          "Accept": "application/json, text/event-stream"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Baton-Reason")
    finally:
        conn.close()


class ServiceEndpoints:
    """What kube-proxy does for a Service, done per call by the client (see the module doc)."""

    def __init__(self, core: Any, namespace: str, service: str) -> None:
        svc = core.read_namespaced_service(service, namespace)
        self.core, self.namespace = core, namespace
        self.selector = ",".join(f"{k}={v}" for k, v in sorted((svc.spec.selector or {}).items()))
        port = next(p for p in svc.spec.ports if p.port == 80)
        self.target = port.target_port
        self.host = f"{service}.{namespace}.svc"

    def pick(self) -> tuple[str, int]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        ready = [p for p in pods if p.status and p.status.pod_ip and not p.metadata.deletion_timestamp
                 and any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))]
        if not ready:
            raise gwstats.NoEndpoint()
        pod = random.choice(ready)
        if isinstance(self.target, int) or str(self.target).isdigit():
            return pod.status.pod_ip, int(self.target)
        for c in pod.spec.containers:
            for p in c.ports or []:
                if p.name == self.target:
                    return pod.status.pod_ip, int(p.container_port)
        raise gwstats.NoEndpoint()


def paced(fn: Callable[[int], gwstats.Call], *, rate: float, max_calls: int, max_seconds: float,
          stop: threading.Event, workers: int) -> list[gwstats.Call]:
    """Call fn(i) at `rate` per second (open loop, on a pool) until `stop`, `max_calls` or
    `max_seconds`; every call is bounded by its own timeout."""
    out: list[concurrent.futures.Future[gwstats.Call]] = []
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        t0 = time.monotonic()
        for i in range(max_calls):
            due = t0 + i / rate
            if stop.is_set() or due - t0 > max_seconds:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            out.append(pool.submit(fn, i))
        return [f.result() for f in out]


def timed(i: int, dial: Callable[[], tuple[str, int, str]], timeout: float) -> gwstats.Call:
    t0 = time.monotonic()
    try:
        ip, port, host = dial()
        status, reason = post(ip, port, host, rpc(i), timeout)
        return gwstats.Call(t0, time.monotonic() - t0, gwstats.cause_of_status(status, reason))
    except Exception as exc:  # a failed call is what this counts
        return gwstats.Call(t0, time.monotonic() - t0, gwstats.cause_of_exception(exc))


# ---------------------------------------------------------------- the handshake-era client (issue 42)

SESSION_LABELS = {"session": "handshake-era session (gateway)", "sessbase": "handshake-era session (baseline)"}
# Ordinary calls of the probe session after each re-bound one (its baseline latency).
PROBE_ORDINARY_CALLS = 5
PROBE_GAP_SECONDS = 0.02


class SessionClient:
    """A handshake-era (2025-11-25) MCP client through the gateway: `open` initializes once and
    keeps the session id the gateway gives for the whole run; every call carries it. Like the
    official SDKs, it never initializes again after an error. Calls go one after the other on one
    kept-alive connection (a new one after an error: same session)."""

    def __init__(self, *, ip: str, port: int, host: str, timeout: float) -> None:
        self.ip, self.port, self.host, self.timeout = loopback(ip), port, host, timeout
        self.conn: http.client.HTTPConnection | None = None
        self.session: str | None = None
        self.first_generation: int | None = None

    def _send(self, method: str, body: bytes | None) -> tuple[int, str | None, bytes, Any]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.ip, self.port, timeout=self.timeout)
        headers = {"Host": self.host, "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": gwsession.PROTOCOL_VERSION}
        if self.session:
            headers[gwsession.SESSION_HEADER] = self.session
        try:
            self.conn.request(method, "/mcp", body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise
        if resp.will_close:
            self.conn.close()
            self.conn = None
        return resp.status, resp.getheader("Baton-Reason"), data, resp

    @staticmethod
    def _generation(resp: Any) -> int | None:
        g = resp.getheader("Baton-Generation")
        return int(g) if g and g.isdigit() else None

    def open(self) -> None:
        """initialize, then notifications/initialized; a RuntimeError naming what failed."""
        status, reason, data, resp = self._send("POST", gwsession.initialize(0))
        cause = gwsession.cause_of_answer(status, reason, data)
        sid = resp.getheader(gwsession.SESSION_HEADER)
        if cause or not sid:
            raise RuntimeError(f"initialize through the gateway: {cause or 'no Mcp-Session-Id on the answer'}")
        self.session, self.first_generation = sid, self._generation(resp)
        status, reason, data, _ = self._send("POST", gwsession.initialized())
        if status != 202:
            raise RuntimeError(f"notifications/initialized: HTTP {status} {reason or ''} (202 expected)")

    def call(self, rid: int) -> gwsession.SessionCall:
        t0 = time.monotonic()
        try:
            status, reason, data, resp = self._send("POST", gwsession.tool_call(rid))
            cause = gwsession.cause_of_answer(status, reason, data)
            return gwsession.SessionCall(t0, time.monotonic() - t0, cause, self._generation(resp))
        except Exception as exc:  # a failed call is what this counts
            return gwsession.SessionCall(t0, time.monotonic() - t0, gwstats.cause_of_exception(exc))

    def close(self) -> str:
        """DELETE the session (as a client ends it); the answer's status, or why none came."""
        try:
            status, reason, _, _ = self._send("DELETE", None)
            return f"HTTP {status}" + (f" {reason}" if reason else "")
        except Exception as exc:  # said, not raised: the run's figures stand
            return gwstats.cause_of_exception(exc)
        finally:
            if self.conn is not None:
                self.conn.close()


@dataclasses.dataclass
class SessionRun:
    """The handshake-era path's outcome: the main session's calls across the handoffs, and the
    probe session's (quiet during each handoff, then one re-bound call and a few ordinary ones)."""

    main: list[gwsession.SessionCall]
    probe: list[gwsession.SessionCall]
    main_first_generation: int | None
    probe_first_generation: int | None
    windows: list[tuple[float, float]]
    deleted: list[str]
    opened: str = ""   # why a session could not be opened ('' = both opened)

    def all_calls(self) -> list[gwstats.Call]:
        return [gwstats.Call(c.at, c.seconds, c.cause) for c in self.main + self.probe]


def session_run(*, ip: str, port: int, host: str, change: Callable[[int], None], handoffs: int, pause: float,
                interval: float, call_timeout: float) -> SessionRun:
    """Two handshake-era sessions through one gateway across `handoffs` template changes. The main
    session calls every `interval` seconds (one call after the other, as one agent does) through
    them all; its first call on each new generation was usually held through the handoff, so its
    latency holds the hold. The probe session makes no call while a handoff runs: once N+1 serves
    (the main session has been answered by it, bounded wait), its first call is the re-bound one
    (the gateway replays the handshake on N+1 for it) and PROBE_ORDINARY_CALLS ordinary ones
    follow: the re-bind's added latency, free of any hold."""
    main = SessionClient(ip=ip, port=port, host=host, timeout=call_timeout)
    probe = SessionClient(ip=ip, port=port, host=host, timeout=call_timeout)
    run = SessionRun([], [], None, None, [], [])
    try:
        main.open()
        probe.open()
    except Exception as exc:  # said in the output: nothing else to measure on this path
        run.opened = str(exc) if isinstance(exc, RuntimeError) else gwstats.cause_of_exception(exc)
        return run
    run.main_first_generation, run.probe_first_generation = main.first_generation, probe.first_generation
    stop = threading.Event()
    bound = handoffs * 60 + 60

    def loop() -> None:
        t0, i = time.monotonic(), 0
        while not stop.is_set() and i < int(bound / interval) and time.monotonic() - t0 < bound:
            started = time.monotonic()
            run.main.append(main.call(i))
            i += 1
            stop.wait(max(0.0, started + interval - time.monotonic()))

    def last_generation() -> int | None:
        return next((c.generation for c in reversed(run.main) if c.ok), None)

    def probe_calls(rid: int) -> int:
        for k in range(1 + PROBE_ORDINARY_CALLS):
            run.probe.append(probe.call(rid + k))
            time.sleep(PROBE_GAP_SECONDS)
        return rid + 1 + PROBE_ORDINARY_CALLS

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    rid = probe_calls(1)  # the probe's ordinary calls on generation 1
    for i in range(handoffs):
        before = last_generation()
        t0 = time.monotonic()
        change(i)
        run.windows.append((t0, time.monotonic()))
        deadline = time.monotonic() + 2.0  # the main session answered by N+1: the gateway forwards there
        while last_generation() == before and time.monotonic() < deadline:
            time.sleep(0.01)
        rid = probe_calls(rid)
        time.sleep(max(0.0, pause - (1 + PROBE_ORDINARY_CALLS) * PROBE_GAP_SECONDS))
    time.sleep(1.0)
    stop.set()
    thread.join(call_timeout + 60)
    run.deleted = [main.close(), probe.close()]
    return run


def session_lines(srun: SessionRun) -> list[str]:
    """What the handshake-era path measured, in words: calls and failures of each session, the
    re-bound calls' latency (the probe's, free of holds; the main session's, holds included)."""
    if srun.opened:
        return [f"  no session: {srun.opened}"]
    out: list[str] = []
    for who, calls in (("main", srun.main), ("probe", srun.probe)):
        t = gwstats.tally([gwstats.Call(c.at, c.seconds, c.cause) for c in calls])
        out.append(f"  {who} session: {t.calls} calls, {t.failed} failed ({gwstats.causes_text(t.causes)})")
    a = gwsession.added(srun.probe, first_generation=srun.probe_first_generation)
    if a is None:
        out.append("  re-bound calls (probe): none answered, or no ordinary call to compare with")
    else:
        out.append(f"  re-bound calls (probe, quiet during the handoff): {a.rebound}, p50 {1000 * a.rebound_p50:.3f} ms "
                   f"p95 {1000 * a.rebound_p95:.3f} ms; its {a.ordinary} ordinary calls p50 {1000 * a.ordinary_p50:.3f} ms "
                   f"p95 {1000 * a.ordinary_p95:.3f} ms; added p50 {1000 * a.added_p50:.3f} ms p95 {1000 * a.added_p95:.3f} ms")
    held = [srun.main[i].seconds for i in gwsession.rebound(srun.main, first_generation=srun.main_first_generation)]
    if held:
        out.append(f"  re-bound calls (main, first on each generation, mostly held through the handoff): {len(held)}, "
                   f"p50 {gwstats.percentile(held, 50):.3f} s p95 {gwstats.percentile(held, 95):.3f} s")
    out.append(f"  DELETE at the end (main, probe): {', '.join(srun.deleted)}")
    return out


def report_session_run(label: str, srun: SessionRun) -> None:
    print(f"  {label}:", flush=True)
    for c in sorted((c for c in srun.main + srun.probe if not c.ok), key=lambda c: c.at)[:8]:
        k = max((j for j, (a, _) in enumerate(srun.windows) if a <= c.at), default=-1)
        where = f"{c.at - srun.windows[k][0]:+.2f}s after handoff {k + 1} began" if k >= 0 else "before the first handoff"
        print(f"    failed: {where} (took {c.seconds:.2f}s): {c.cause}", flush=True)
    for line in session_lines(srun):
        print(line, flush=True)


# ---------------------------------------------------------------- objects

def runtime(name: str, *, port: int, gateway: bool, never_ready: bool = True, sessions: str | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntime", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {"app": name},
                                               "annotations": {NEVER_READY: "true"} if never_ready else {}},
                                  "spec": {"terminationGracePeriodSeconds": 1, **LOOP_PLACEMENT,
                                           "containers": [{"name": "tool", "image": "example/tool:1",
                                                           "ports": [{"name": "http", "containerPort": port}]}]}},
                     # The bench's clients are loopback sockets, no pod (docs/gateway.md, "Who may call").
                     "service": {"ports": [{"port": 80, "targetPort": "http"}], "gateway": gateway,
                                 "clients": {"cidrs": ["127.0.0.0/8"]}, **({"sessions": sessions} if sessions else {})},
                     "budgets": {"lockSeconds": 10, "connectSeconds": 60, "drainSeconds": 10,
                                 "terminationGraceSeconds": 1, "cleanupSeconds": 30, "admissionSeconds": 30}}}


def deployment(name: str, *, port: int, strategy: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"metadata": {"name": name},
            "spec": {"replicas": 1, "strategy": {"type": strategy}, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": {NEVER_READY: "true"}},
                                  "spec": {"terminationGracePeriodSeconds": 1, **LOOP_PLACEMENT,
                                           "containers": [{"name": "tool", "image": "example/tool:1",
                                                           "ports": [{"name": "http", "containerPort": port}]}]}}}}


def service(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"selector": {"app": name},
                                                 "ports": [{"port": 80, "targetPort": "http"}]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--handoffs", type=int, default=50, help="template changes on each path")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between one handoff's end and the next change")
    ap.add_argument("--rate", type=float, default=20, help="calls per second during the handoffs")
    ap.add_argument("--call-timeout", type=float, default=35,
                    help="seconds per call (handoff part); above admissionSeconds (30): the gateway answers by then")
    ap.add_argument("--lat-rate", type=float, default=200, help="calls per second on each path (latency)")
    ap.add_argument("--lat-calls", type=int, default=4000, help="calls on each path (latency)")
    ap.add_argument("--lat-pin", action="store_true",
                    help="latency part: the gateway pinned to core 1, the client (and the tool, always) to core 0, "
                         "as a gateway with a core of its own; else the scheduler places the gateway and the client")
    ap.add_argument("--tput-seconds", type=float, default=15)
    ap.add_argument("--concurrency", type=int, default=16, help="closed-loop clients (throughput)")
    ap.add_argument("--rss-runtimes", type=int, default=1000)
    ap.add_argument("--skip", default="", help="parts to leave out, comma-separated: handoffs,latency,throughput,rss")
    ap.add_argument("--gateway-log-level", default="INFO", help="of the handoff part's gateway (its log is in the work directory)")
    ap.add_argument("--paths", default="direct,gw,session,recreate,rolling",
                    help="handoff paths to run, comma-separated (session: the handshake-era client through the gateway)")
    ap.add_argument("--profile", metavar="FILE", help="py-spy record the throughput gateway's first round (collapsed stacks; "
                         "with --baseline the baseline's first round too, to FILE.baseline)")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="another checkout's root (e.g. a git worktree of an older commit): its gateway "
                         "(PYTHONPATH=DIR/operator, same interpreter) runs beside the current one in the latency "
                         "and throughput parts, and each figure is printed against it")
    ap.add_argument("--tput-rounds", type=int, default=2,
                    help="with --baseline: throughput rounds of each gateway, alternating")
    ap.add_argument("--tool-host", nargs=2, metavar=("PORT", "MAX_SECONDS"), help=argparse.SUPPRESS)
    ap.add_argument("--tool-sessions", type=Path, metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--load", nargs=6, metavar=("IP", "PORT", "HOST", "SECONDS", "CONCURRENCY", "MAX_CALLS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tool_host:
        tool_host_main(int(args.tool_host[0]), float(args.tool_host[1]), args.tool_sessions)
        return 0
    if args.load:
        load_main(args.load[0], int(args.load[1]), args.load[2], float(args.load[3]), int(args.load[4]), int(args.load[5]))
        return 0
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        if not (args.baseline / "operator" / "baton" / "gateway").is_dir():
            ap.error(f"--baseline: {args.baseline} has no operator/baton/gateway (give a checkout's root)")
        if args.tput_rounds < 1:
            ap.error(f"--tput-rounds: at least 1, got {args.tput_rounds}")
    return run(args)


def run(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    from dev import process
    from dev.crds import wait_established
    from dev.ports import free_port
    from dev.wait import wait_for
    from harness.gateway import GatewayProcess
    from harness.operator import OperatorProcess

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    load_before = os.getloadavg()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="baton-bench-gw-"))
    py = sys.executable
    process.plane(py, "up", "--dir", work / "plane", check=True, stdout=subprocess.DEVNULL)
    print(f"work directory (logs): {work}", flush=True)
    kubeconfig = str(work / "plane" / "kubeconfig")
    plane = types.SimpleNamespace(env=dict(os.environ, KUBECONFIG=kubeconfig), kubeconfig=kubeconfig)
    children: list[Any] = []            # operator and gateways (ChildProcess: killed by pid)
    subprocs: list[subprocess.Popen[bytes]] = []
    tools: list[PodTools] = []
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    try:
        config.load_kube_config(kubeconfig)
        cfg = client.Configuration.get_default_copy()
        cfg.connection_pool_maxsize = 64
        api = client.ApiClient(cfg)
        core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        kubectl = [str(Path(py).parent / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)
        wait_established(api)
        for ns in (NS, NS_RSS):
            core.create_namespace({"metadata": {"name": ns}})
            wait_for(lambda: bool(core.list_namespaced_service_account(ns).items), timeout=60, what=f"{ns} default SA")
        # Production defaults where the harness sets short test values (Leases of 15 s, back-off 5 s).
        op = OperatorProcess(plane, work, identity="bench-op", namespaces=[NS],
                             env={"BATON_SYSTEM_NAMESPACE": NS, "BATON_LOG_LEVEL": "WARNING",
                                  "BATON_LEASE_SECONDS": "15", "BATON_BACKOFF_BASE_SECONDS": "5"})
        children.append(op)
        op.start()
        gw = GatewayProcess(plane, work, identity="bench-gw", namespaces=[NS], system_namespace=NS,
                            env={"BATON_LOG_LEVEL": args.gateway_log_level, **GATEWAY_DEFAULTS})
        children.append(gw)
        gw.start()

        def rt_status(name: str) -> dict[str, Any]:
            return dict(custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name).get("status") or {})

        def rt_ready(name: str, gen: int) -> bool:
            st = rt_status(name)
            ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
            return (st.get("current") or {}).get("generation") == gen and ready.get("status") == "True" \
                and not st.get("transition")

        def baton_change(name: str) -> Callable[[int], None]:
            def change(i: int) -> None:
                gen = int((rt_status(name).get("current") or {})["generation"])
                custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, {"spec": {"template": {
                    "spec": {"containers": [{"name": "tool", "image": f"example/tool:{i + 2}",
                                             "ports": rt["spec"]["template"]["spec"]["containers"][0]["ports"]}]}}}})
                wait_for(lambda: rt_ready(name, gen + 1), timeout=120, what=f"{name} g{gen + 1} Ready", interval=0.05)
            rt = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
            return change

        def deploy_done(name: str, want: int) -> bool:
            s = apps.read_namespaced_deployment(name, NS).status
            if (s.observed_generation or 0) < want or (s.updated_replicas or 0) != 1 or (s.available_replicas or 0) != 1:
                return False
            return len(core.list_namespaced_pod(NS, label_selector=f"app={name}").items) == 1

        def deploy_change(name: str) -> Callable[[int], None]:
            def change(i: int) -> None:
                d = apps.patch_namespaced_deployment(name, NS, {"spec": {"template": {"spec": {"containers": [
                    {"name": "tool", "image": f"example/tool:{i + 2}"}]}}}})
                wait_for(lambda: deploy_done(name, d.metadata.generation), timeout=120, what=f"{name} rolled out",
                         interval=0.05)
            return change

        # ------------------------------------------------------------ part 1: handoffs
        rows: list[tuple[str, gwstats.Tally, list[float], list[float]]] = []
        gw_counts: dict[str, float] = {}
        session_runs: dict[str, SessionRun] = {}
        session_counts: dict[str, float] = {}
        tool_sessions: dict[str, dict[str, int]] = {}   # path -> what its tools saw (gwsession.SessionTool.counts)
        if "handoffs" not in skip:
            paths: list[tuple[str, str, Callable[[int], None], Callable[[], tuple[str, int, str]]]] = []
            wanted = {p.strip() for p in args.paths.split(",")}
            # With --baseline, the gateway path again through the baseline's gateway (its own
            # runtime; that gateway runs only for its turn, sealed by the current operator).
            baton_paths = [("direct", False), ("gw", True)] + ([("gwbase", True)] if args.baseline is not None
                                                               and "gw" in wanted else [])
            # The handshake-era client (issue 42): its own runtime (sessions: Rebind, the default, said),
            # whose tools keep MCP sessions; with --baseline, again through the baseline's gateway.
            baton_paths += [(n, True) for n in ["session"] + (["sessbase"] if args.baseline is not None else [])
                            if "session" in wanted]
            session_files: dict[str, Path] = {}
            for name, gateway in baton_paths:
                port = free_port()
                custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, runtime(
                    name, port=port, gateway=gateway, sessions="Rebind" if name in ("session", "sessbase") else None))
                if name in ("session", "sessbase"):
                    session_files[name] = work / f"tool-sessions-{name}.json"
                tools.append(PodTools(core, NS, f"baton.dev/runtime={name}", port, max_seconds=7200, log=work / "tools.log",
                                      sessions_file=session_files.get(name)))
            for name, strategy in (("recreate", "Recreate"), ("rolling", "RollingUpdate")):
                port = free_port()
                apps.create_namespaced_deployment(NS, deployment(name, port=port, strategy=strategy))
                core.create_namespaced_service(NS, service(name))
                tools.append(PodTools(core, NS, f"app={name}", port, max_seconds=7200, log=work / "tools.log"))
            for name, _ in baton_paths:
                wait_for(lambda: rt_ready(name, 1), timeout=180, what=f"{name} g1 Ready", interval=0.2)
            for name in ("recreate", "rolling"):
                wait_for(lambda: deploy_done(name, 1), timeout=180, what=f"{name} available", interval=0.2)
            wait_for(lambda: (metric(gw.metrics_port, "baton_gateway_forwarding") == 1), timeout=60, what="gateway forwarding")

            def via_service(name: str) -> Callable[[], tuple[str, int, str]]:
                eps = ServiceEndpoints(core, NS, name)

                def dial() -> tuple[str, int, str]:
                    ip, port = eps.pick()
                    return ip, port, eps.host
                return dial

            paths = [
                ("direct Service (Baton, gateway off)", "direct", baton_change("direct"), via_service("direct")),
                ("gateway (Baton, gateway on)", "gw", baton_change("gw"), lambda: ("127.0.0.1", gw.port, f"gw.{NS}")),
                ("Deployment Recreate", "recreate", deploy_change("recreate"), via_service("recreate")),
                ("Deployment RollingUpdate (2 pods)", "rolling", deploy_change("rolling"), via_service("rolling")),
            ]
            base_gw: dict[str, Any] = {}
            if any(name == "gwbase" for name, _ in baton_paths):
                paths.insert(2, ("baseline gateway (Baton, gateway on)", "gwbase", baton_change("gwbase"),
                                 lambda: ("127.0.0.1", base_gw["gw"].port, f"gwbase.{NS}")))
                wanted.add("gwbase")
            at = max(i for i, p in enumerate(paths) if p[1] in ("gw", "gwbase")) + 1
            for name, label in SESSION_LABELS.items():
                if any(n == name for n, _ in baton_paths):
                    paths.insert(at, (label, name, baton_change(name), lambda: ("127.0.0.1", 0, "")))  # dialled by SessionClient
                    wanted.add(name)
                    at += 1
            for label, name, change, dial in paths:
                if name not in wanted:
                    continue
                if name in ("gwbase", "sessbase"):
                    path = os.pathsep.join([str(args.baseline / "operator"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
                    handoff_base = GatewayProcess(plane, work, identity=f"bench-gw-base-{name}", namespaces=[NS],
                                                  system_namespace=NS, env={"BATON_LOG_LEVEL": args.gateway_log_level,
                                                                            **GATEWAY_DEFAULTS, "PYTHONPATH": path})
                    children.append(handoff_base)
                    handoff_base.start()
                    base_gw["gw"] = handoff_base
                    wait_for(lambda: metric(handoff_base.metrics_port, "baton_gateway_forwarding") == 1, timeout=60,
                             what="the baseline gateway forwarding")
                    # The session tool answers a call without a session 400: it reached the tool.
                    reached = 200 if name == "gwbase" else 400
                    wait_for(lambda: post("127.0.0.1", handoff_base.port, f"{name}.{NS}", rpc(0), 5)[0] == reached,
                             timeout=60, what=f"the baseline gateway forwards to {name}", interval=0.2, ignore=(OSError,))
                if name in ("session", "sessbase"):
                    srun = session_run(ip="127.0.0.1", port=gw.port if name == "session" else base_gw["gw"].port,
                                       host=f"{name}.{NS}", change=change, handoffs=args.handoffs, pause=args.pause,
                                       interval=1 / args.rate, call_timeout=args.call_timeout)
                    session_runs[name] = srun
                    report_session_run(label, srun)
                    if name == "sessbase":
                        base_gw["gw"].signal(signal.SIGTERM)
                        base_gw["gw"].wait_exit(30)
                    if srun.opened:
                        continue
                    t = gwstats.tally(srun.all_calls(), srun.windows)
                    durations = [b - a for a, b in srun.windows]
                    rows.append((label, t, durations, [c.seconds for c in srun.main + srun.probe if c.ok] or [0.0]))
                    if name == "session":
                        session_counts.update({k: metric(gw.metrics_port, "baton_gateway_sessions_rebound_total", outcome=k)
                                               for k in ("rebound", "failed")})
                        print("  the gateway's re-binds: " + ", ".join(f"{k} {int(v)}" for k, v in session_counts.items()),
                              flush=True)
                    continue
                stop = threading.Event()
                calls: list[gwstats.Call] = []
                bound = args.handoffs * 60 + 60
                loop = threading.Thread(target=lambda: calls.extend(paced(
                    lambda i: timed(i, dial, args.call_timeout), rate=args.rate, max_calls=int(args.rate * bound),
                    max_seconds=bound, stop=stop, workers=max(8, int(args.rate * args.call_timeout) + 8))), daemon=True)
                loop.start()
                time.sleep(1.0)
                windows: list[tuple[float, float]] = []
                for i in range(args.handoffs):
                    t0 = time.monotonic()
                    change(i)
                    windows.append((t0, time.monotonic()))
                    time.sleep(args.pause)
                time.sleep(1.0)
                stop.set()
                loop.join(args.call_timeout + 60)
                t = gwstats.tally(calls, windows)
                durations = [b - a for a, b in windows]
                rows.append((label, t, durations, [c.seconds for c in calls if c.ok] or [0.0]))
                for c in sorted((c for c in calls if not c.ok), key=lambda c: c.at)[:8]:
                    k = max((j for j, (a, _) in enumerate(windows) if a <= c.at), default=-1)
                    where = f"{c.at - windows[k][0]:+.2f}s after handoff {k + 1} began" if k >= 0 else "before the first handoff"
                    print(f"    failed: {where} (took {c.seconds:.2f}s): {c.cause}", flush=True)
                ok = [c.seconds for c in calls if c.ok] or [0.0]
                print(f"  {label}: {t.calls} calls, {t.failed} failed ({gwstats.causes_text(t.causes)}), "
                      f"handoff p50 {gwstats.percentile(durations, 50):.2f}s; answered calls took p50 "
                      f"{gwstats.percentile(ok, 50):.3f}s p99 {gwstats.percentile(ok, 99):.3f}s max {max(ok):.3f}s", flush=True)
                if name == "gwbase":
                    base_counts = {k: metric(base_gw["gw"].metrics_port, "baton_gateway_calls_total", outcome=k)
                                   for k in ("forwarded", "held_then_forwarded", "refused")}
                    print("  the baseline gateway's own counts: " + ", ".join(f"{k} {int(v)}" for k, v in base_counts.items()),
                          flush=True)
                    base_gw["gw"].signal(signal.SIGTERM)
                    base_gw["gw"].wait_exit(30)
            for pt in tools:
                pt.stop()
                if pt.sessions_file is not None and pt.sessions_file.exists():
                    tool_sessions[pt.sessions_file.stem.rsplit("-", 1)[1]] = json.loads(pt.sessions_file.read_text())
            tools.clear()
            gw_counts = {k: metric(gw.metrics_port, "baton_gateway_calls_total", outcome=k)
                         for k in ("forwarded", "held_then_forwarded", "refused")}
            gw_counts.update({f"upstream {k}": metric(gw.metrics_port, "baton_gateway_upstream_errors_total", kind=k)
                              for k in ("connect", "request", "stream")})

        # ------------------------------------------------------------ the fast tool (parts 2-4)
        fast_port = free_port()
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, runtime("fast", port=fast_port, gateway=True))

        def fast_pod() -> Any:
            pods = core.list_namespaced_pod(NS, label_selector="baton.dev/runtime=fast").items
            return pods[0] if len(pods) == 1 and pods[0].status and pods[0].status.pod_ip else None

        wait_for(fast_pod, timeout=180, what="the fast runtime's pod has an IP", interval=0.2)
        pod = fast_pod()
        fast_ip = loopback(pod.status.pod_ip)
        tool = subprocess.Popen(taskset_prefix(0) + [py, "-m", "bench.gateway", "--tool-host", str(fast_port), "3600"],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=open(work / "tool.log", "wb"))
        assert tool.stdin is not None
        tool.stdin.write(f"start {fast_ip}\n".encode())
        tool.stdin.flush()
        subprocs.append(tool)

        def tool_listens() -> bool:
            try:
                return post(fast_ip, fast_port, "probe", rpc(0), 2)[0] == 200
            except OSError:
                return False
        wait_for(tool_listens, timeout=60, what="the fast tool listening", interval=0.2)
        core.patch_namespaced_pod(pod.metadata.name, NS, {"metadata": {"annotations": {NEVER_READY: None}}})
        wait_for(lambda: rt_ready("fast", 1), timeout=120, what="fast g1 Ready", interval=0.2)
        wait_for(lambda: post("127.0.0.1", gw.port, f"fast.{NS}", rpc(0), 5)[0] == 200, timeout=60,
                 what="the gateway forwards to fast", interval=0.2, ignore=(OSError,))

        def baseline_gateway(identity: str) -> Any:
            """The baseline tree's gateway (`--baseline DIR`): the same harness and settings, its
            package first on the path. It ignores the variables it does not know (the admin key)."""
            path = os.pathsep.join([str(args.baseline / "operator"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            base = GatewayProcess(plane, work, identity=identity, namespaces=[NS], system_namespace=NS,
                                  env={"BATON_LOG_LEVEL": "WARNING", **GATEWAY_DEFAULTS, "PYTHONPATH": path})
            children.append(base)
            base.start()
            wait_for(lambda: post("127.0.0.1", base.port, f"fast.{NS}", rpc(0), 5)[0] == 200, timeout=60,
                     what=f"the baseline gateway {identity} forwards to fast", interval=0.2, ignore=(OSError,))
            return base

        gwb = baseline_gateway("bench-gw-base") if args.baseline is not None and "latency" not in skip else None

        # ------------------------------------------------------------ part 2: latency
        lat: dict[str, list[float]] = {"gateway": [], "direct": []}
        lat_failed: dict[str, collections.Counter[str]] = {"gateway": collections.Counter(), "direct": collections.Counter()}
        if "latency" not in skip:
            ends = {"gateway": ("127.0.0.1", gw.port, f"fast.{NS}"), "direct": (fast_ip, fast_port, f"fast.{NS}")}
            if gwb is not None:
                ends["baseline"] = ("127.0.0.1", gwb.port, f"fast.{NS}")
                lat["baseline"], lat_failed["baseline"] = [], collections.Counter()
            conns: dict[str, http.client.HTTPConnection] = {}

            def one(path: str, rid: int) -> None:
                ip, port, host = ends[path]
                if path not in conns:
                    conns[path] = http.client.HTTPConnection(ip, port, timeout=5)
                c = conns[path]
                t0 = time.perf_counter()
                try:
                    c.request("POST", "/mcp", body=rpc(rid), headers={"Host": host, "Content-Type": "application/json"})
                    r = c.getresponse()
                    r.read()
                    cause = gwstats.cause_of_status(r.status, r.getheader("Baton-Reason"))
                except Exception as exc:  # counted, then a new connection
                    cause = gwstats.cause_of_exception(exc)
                    c.close()
                    del conns[path]
                if cause:
                    lat_failed[path][cause] += 1
                else:
                    lat[path].append(time.perf_counter() - t0)

            lat_pinned = False
            client_cores = os.sched_getaffinity(0)
            if args.lat_pin and gw.proc is not None and pin(gw.proc.pid, 1) \
                    and (gwb is None or gwb.proc is None or pin(gwb.proc.pid, 1)):
                os.sched_setaffinity(0, {0})
                lat_pinned = True
            for path in ends:  # warm both connections
                for k in range(20):
                    one(path, k)
            lat = {path: [] for path in ends}
            t0 = time.monotonic()
            deadline = t0 + args.lat_calls / args.lat_rate * 3 + 30
            for i in range(args.lat_calls):
                due = t0 + i / args.lat_rate
                if time.monotonic() > deadline:
                    break
                time.sleep(max(0.0, due - time.monotonic()))
                for path in gwbaseline.call_order(tuple(ends), i):
                    one(path, i)
            lat_seconds = time.monotonic() - t0
            for c in conns.values():
                c.close()
            if lat_pinned:
                os.sched_setaffinity(0, client_cores)
                for pinned_gw in (gw, gwb):
                    if pinned_gw is not None and pinned_gw.proc is not None:
                        subprocess.run(["taskset", "-a", "-p", "-c", f"0-{(os.cpu_count() or 2) - 1}", str(pinned_gw.proc.pid)],
                                       stdout=subprocess.DEVNULL)
            if gwb is not None:
                gwb.signal(signal.SIGTERM)
                gwb.wait_exit(30)

        # ------------------------------------------------------------ part 3: throughput
        tput: dict[str, Any] = {}
        if "throughput" not in skip:
            def load(ip: str, port: int, host: str) -> dict[str, Any]:
                out = subprocess.run(taskset_prefix(0) + [py, "-m", "bench.gateway", "--load", ip, str(port), host,
                                                          str(args.tput_seconds), str(args.concurrency), "10000000"],
                                     cwd=ROOT, capture_output=True, text=True, timeout=args.tput_seconds + 120, check=True)
                return dict(json.loads(out.stdout.strip().splitlines()[-1]))

            # The same load straight to the tool: what the client and the tool reach without the gateway.
            tput["direct"] = load(fast_ip, fast_port, f"fast.{NS}")
            gwt = GatewayProcess(plane, work, identity="bench-gw-tput", namespaces=[NS], system_namespace=NS,
                                 env={"BATON_LOG_LEVEL": "WARNING", **GATEWAY_DEFAULTS})
            children.append(gwt)
            gwt.start()
            tput["pinned"] = pin(gwt.proc.pid, 1) if gwt.proc else False
            wait_for(lambda: post("127.0.0.1", gwt.port, f"fast.{NS}", rpc(0), 5)[0] == 200, timeout=60,
                     what="the throughput gateway forwards", interval=0.2, ignore=(OSError,))
            # With --baseline, the baseline's gateway beside it on the same core, idle while the
            # other is loaded; the rounds alternate (gwbaseline.round_order).
            tput_gateways = {"gateway": gwt}
            if args.baseline is not None:
                gwbt = baseline_gateway("bench-gw-base-tput")
                tput["pinned"] = tput["pinned"] and (pin(gwbt.proc.pid, 1) if gwbt.proc else False)
                tput_gateways["baseline"] = gwbt
            order = gwbaseline.round_order(("gateway", "baseline"), args.tput_rounds) if args.baseline is not None \
                else ["gateway"]
            profiled: set[str] = set()
            tput["rounds"] = []
            for which in order:
                loaded = tput_gateways[which]
                gproc = Proc(loaded.proc.pid if loaded.proc else 0)
                spy: subprocess.Popen[bytes] | None = None
                if args.profile and which not in profiled:  # each gateway's first round; the baseline's to FILE.baseline
                    profiled.add(which)
                    out_file = args.profile if which == "gateway" else f"{args.profile}.baseline"
                    spy = subprocess.Popen([str(Path(py).parent / "py-spy"), "record", "--format", "raw", "--rate", "100",
                                            "--nonblocking", "--pid", str(gproc.pid), "--output", out_file,
                                            "--duration", str(int(args.tput_seconds) + 5)], stdout=subprocess.DEVNULL)
                cpu0 = gproc.cpu()
                res = load("127.0.0.1", loaded.port, f"fast.{NS}")
                res["cpu"] = gproc.cpu() - cpu0
                res["rss"] = gproc.status_mib("VmHWM")
                tput["rounds"].append((which, res))
                print(f"  throughput round {len(tput['rounds'])} ({which}): {res['calls']} calls, {res['failed']} failed, "
                      f"CPU {res['cpu']:.2f}s = {res['calls'] / res['cpu'] if res['cpu'] else float('nan'):.0f} "
                      "calls per CPU-second", flush=True)
                if spy is not None:
                    spy.wait(timeout=60)
            for which in tput_gateways:  # every round of one gateway summed: calls over CPU-seconds
                mine = [r for w, r in tput["rounds"] if w == which]
                tput[which] = {"calls": sum(r["calls"] for r in mine), "failed": sum(r["failed"] for r in mine),
                               "seconds": sum(r["seconds"] for r in mine), "cpu": sum(r["cpu"] for r in mine),
                               "rss": max(r["rss"] for r in mine), "rounds": len(mine),
                               "causes": sum((collections.Counter(r["causes"]) for r in mine), collections.Counter())}
            for loaded in tput_gateways.values():
                loaded.signal(signal.SIGTERM)
                loaded.wait_exit(30)

        # ------------------------------------------------------------ part 4: RSS with N runtimes
        rss: dict[str, Any] = {}
        if "rss" not in skip:
            proto = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "fast")
            proto_pod = fast_pod()
            pod_doc = api.sanitize_for_serialization(proto_pod)
            n = args.rss_runtimes
            status_errors: list[str] = []

            def clone(i: int) -> None:
                name = f"rt-{i:04d}"
                custom.create_namespaced_custom_object(GROUP, VERSION, NS_RSS, PLURAL, {
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntime", "metadata": {"name": name},
                    "spec": proto["spec"]})
                meta = pod_doc["metadata"]
                labels = dict(meta.get("labels") or {}, **{"baton.dev/runtime": name, "app": name})
                spec = {k: v for k, v in pod_doc["spec"].items() if k not in ("nodeName", "nodeSelector", "tolerations")}
                # The token volume ServiceAccount admission added: it adds its own again.
                spec["volumes"] = [v for v in spec.get("volumes") or [] if not v["name"].startswith("kube-api-access")]
                spec["containers"] = [dict(c, volumeMounts=[m for m in c.get("volumeMounts") or []
                                                            if not m["name"].startswith("kube-api-access")])
                                      for c in spec["containers"]]
                made = core.create_namespaced_pod(NS_RSS, {
                    "metadata": {"name": f"{name}-g1", "labels": labels, "annotations": meta.get("annotations") or {}},
                    "spec": spec})
                st = json.loads(json.dumps(proto.get("status") or {}))
                st.pop("transition", None)
                cur = st.get("current") or {}
                cur.update({"uid": made.metadata.uid, "pod": made.metadata.name})
                try:
                    custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS_RSS, PLURAL, name, {"status": st})
                except Exception as exc:  # said in the output: the views then hold runtimes without status
                    status_errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                list(pool.map(clone, range(n)))
            rss["create_seconds"] = time.monotonic() - t0
            rss["status_errors"] = status_errors
            gwr = GatewayProcess(plane, work, identity="bench-gw-rss", namespaces=[NS, NS_RSS], system_namespace=NS,
                                 env={"BATON_LOG_LEVEL": "WARNING", **GATEWAY_DEFAULTS})
            children.append(gwr)
            gwr.start(timeout=300)
            wait_for(lambda: metric(gwr.metrics_port, "baton_cache_objects", kind="ToolRuntime") >= n
                     and metric(gwr.metrics_port, "baton_cache_objects", kind="Pod") >= n,
                     timeout=300, what="the RSS gateway's views full", interval=0.5)
            rproc = Proc(gwr.proc.pid if gwr.proc else 0)
            rss["views"] = (metric(gwr.metrics_port, "baton_cache_objects", kind="ToolRuntime"),
                            metric(gwr.metrics_port, "baton_cache_objects", kind="Pod"))
            rss["after_list"] = rproc.status_mib("VmHWM")
            served = subprocess.run(taskset_prefix(0) + [py, "-m", "bench.gateway", "--load", "127.0.0.1", str(gwr.port),
                                                         f"fast.{NS}", "5", str(args.concurrency), "1000000"],
                                    cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
            rss["served"] = json.loads(served.stdout.strip().splitlines()[-1])
            time.sleep(5)
            rss["peak"] = rproc.status_mib("VmHWM")
            rss["now"] = rproc.status_mib("VmRSS")

        load_after = os.getloadavg()

        # ------------------------------------------------------------ the table
        say("")
        say(f"make bench-gateway: handoffs={args.handoffs} rate={args.rate}/s lat-rate={args.lat_rate}/s "
            f"lat-calls={args.lat_calls} tput={args.tput_seconds:g}s x {args.concurrency} rss-runtimes={args.rss_runtimes}")
        say(f"machine: {os.cpu_count()} cores; load average (1, 5, 15 min) before {load_before[0]:.2f} "
            f"{load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} "
            f"{load_after[2]:.2f}: every figure below was taken under that load")
        if rows:
            say("")
            say(f"{args.handoffs} handoffs per path, {args.rate:g} calls/s (stateless JSON-RPC, new connection each, "
                f"timeout {args.call_timeout:g}s" + ("; the handshake-era sessions: below)" if session_runs else ")"))
            say(f"{'path':36} {'calls':>6} {'failed':>6} {'hit':>4} {'outage s':>8} {'handoff p50 s':>13} "
                f"{'answered p50/p99/max s':>22}  causes")
            for label, t, durations, ok in rows:
                say(f"{label:36} {t.calls:6d} {t.failed:6d} {t.handoffs_hit:4d} {t.longest_outage:8.2f} "
                    f"{gwstats.percentile(durations, 50):13.2f} {gwstats.percentile(ok, 50):8.3f}/{gwstats.percentile(ok, 99):6.3f}/"
                    f"{max(ok):6.3f}  {gwstats.causes_text(t.causes)}")
            if "gw" in {p.strip() for p in args.paths.split(",")}:
                say("  the gateway's own counts: " + ", ".join(f"{k} {int(v)}" for k, v in gw_counts.items()))
            say("  (hit: handoffs during which, or within 1 s after which, a call failed; outage: the longest "
                "run of consecutive failed calls)")
            for name, srun in session_runs.items():
                say("")
                say(f"handshake-era client (2025-11-25, issue 42) via {'the gateway' if name == 'session' else 'the baseline gateway'}: "
                    f"two sessions, each initialized once and kept for the whole run, kept-alive connection; the main "
                    f"one calls every {1000 / args.rate:.0f} ms one call after the other, the probe only between handoffs")
                for line in session_lines(srun):
                    say(line)
                if name == "session" and session_counts:
                    say("  the gateway's re-binds (baton_gateway_sessions_rebound_total): "
                        + ", ".join(f"{k} {int(v)}" for k, v in session_counts.items()))
                seen = tool_sessions.get(name)
                if seen is not None:
                    say(f"  the tools saw: {', '.join(f'{k} {v}' for k, v in sorted(seen.items()))} (once per session and "
                        f"generation: {2 * (1 + args.handoffs)} initialize)")
        if lat["gateway"] and lat["direct"]:
            g, d = lat["gateway"], lat["direct"]
            say("")
            say(f"latency: {len(d)} calls each path, interleaved, {args.lat_rate:g} calls/s each "
                f"({len(lat) * args.lat_calls / lat_seconds:.0f} calls/s in all), kept-alive connections, same tool"
                + (f"; beside it the baseline gateway ({args.baseline}), the order among the three paths "
                   "rotated through every permutation" if "baseline" in lat else "")
                + ("; the gateway pinned to core 1, the client and the tool to core 0" if lat_pinned else
                   "; the tool pinned to core 0, the gateway and the client where the scheduler puts them"))
            say(f"{'':24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}  failed")
            for label, xs, failed in (("client -> tool", d, lat_failed["direct"]),
                                      ("client -> gateway -> tool", g, lat_failed["gateway"])):
                say(f"{label:24} {1000 * gwstats.percentile(xs, 50):8.3f} {1000 * gwstats.percentile(xs, 99):8.3f} "
                    f"{1000 * sum(xs) / len(xs):8.3f}  {gwstats.causes_text(failed)}")
            say(f"{'added by the gateway':24} {1000 * gwstats.added(g, d, 50):8.3f} {1000 * gwstats.added(g, d, 99):8.3f} "
                f"{1000 * (sum(g) / len(g) - sum(d) / len(d)):8.3f}  (ratio p50 {gwstats.percentile(g, 50) / gwstats.percentile(d, 50):.2f}, "
                f"p99 {gwstats.percentile(g, 99) / gwstats.percentile(d, 99):.2f})")
            b = lat.get("baseline")
            if b:
                say(f"{'via the baseline gateway':24} {1000 * gwstats.percentile(b, 50):8.3f} "
                    f"{1000 * gwstats.percentile(b, 99):8.3f} {1000 * sum(b) / len(b):8.3f}  "
                    f"{gwstats.causes_text(lat_failed['baseline'])}")
                say(f"{'added by the baseline':24} {1000 * gwstats.added(b, d, 50):8.3f} {1000 * gwstats.added(b, d, 99):8.3f} "
                    f"{1000 * (sum(b) / len(b) - sum(d) / len(d)):8.3f}")
        if tput.get("gateway"):
            r = tput["gateway"]
            rate = r["calls"] / r["seconds"]
            per_cpu = r["calls"] / r["cpu"] if r["cpu"] else float("nan")
            say("")
            say(f"throughput: one gateway process ({'pinned to core 1' if tput['pinned'] else 'not pinned'}), "
                f"{args.concurrency} closed-loop clients in another process, {r['seconds']:.1f}s")
            say(f"  {r['calls']} calls ({r['failed']} failed {gwstats.causes_text(collections.Counter(r['causes']))}): "
                f"{rate:.0f} calls/s; gateway CPU {r['cpu']:.2f}s = {1000 * r['cpu'] / max(1, r['calls']):.3f} ms per call "
                f"= {per_cpu:.0f} calls per CPU-second (per core); gateway peak RSS {r['rss']:.1f} MiB")
            br = tput.get("baseline")
            if br:
                say(f"  the baseline gateway ({args.baseline}), same core, same load, rounds alternating "
                    f"({' '.join(w for w, _ in tput['rounds'])}): {br['calls']} calls ({br['failed']} failed "
                    f"{gwstats.causes_text(br['causes'])}): {br['calls'] / br['seconds']:.0f} calls/s; CPU {br['cpu']:.2f}s = "
                    f"{1000 * br['cpu'] / max(1, br['calls']):.3f} ms per call = "
                    f"{br['calls'] / br['cpu'] if br['cpu'] else float('nan'):.0f} calls per CPU-second")
                say("  by round (calls per CPU-second): " + ", ".join(
                    f"{w} {r['calls'] / r['cpu'] if r['cpu'] else float('nan'):.0f}" for w, r in tput["rounds"]))
            dr = tput.get("direct")
            if dr:
                say(f"  the same load straight to the tool: {dr['calls'] / dr['seconds']:.0f} calls/s ({dr['failed']} failed): "
                    f"through the gateway {rate / (dr['calls'] / dr['seconds']):.2f} x that")
        if rss:
            views = rss["views"]
            say("")
            say(f"RSS: a gateway watching {int(views[0])} ToolRuntimes and {int(views[1])} pods (copies of an "
                f"operator-written runtime and pod{'' if not rss['status_errors'] else ', WITHOUT status: ' + rss['status_errors'][0]}), "
                f"created in {rss['create_seconds']:.0f}s")
            s = rss["served"]
            say(f"  peak RSS (VmHWM) after its views listed: {rss['after_list']:.1f} MiB; after serving {s['calls']} calls "
                f"({s['failed']} failed): peak {rss['peak']:.1f} MiB, now {rss['now']:.1f} MiB")
        say("")
        say("targets (issue 24)                                    measured            met")
        gwrow = next((t for label, t, _, _ in rows if label.startswith("gateway")), None)
        if gwrow is not None:
            say(f"{'0 failed calls across the handoffs via the gateway':52} {gwrow.failed:>8d} of {gwrow.calls:<6d}    "
                f"{'yes' if gwrow.failed == 0 else 'no'}")
        sess = session_runs.get("session")
        if sess is not None and not sess.opened:
            srow = next(t for label, t, _, _ in rows if label == SESSION_LABELS["session"])
            say(f"{'0 failed calls, handshake-era session (issue 42)':52} {srow.failed:>8d} of {srow.calls:<6d}    "
                f"{'yes' if srow.failed == 0 else 'no'}")
            sa = gwsession.added(sess.probe, first_generation=sess.probe_first_generation)
            if sa is not None:
                say(f"{'re-bound call adds p50 <= 5 ms (issue 42)':52} {1000 * sa.added_p50:8.3f} ms           "
                    f"{'yes' if sa.added_p50 <= 0.005 else 'no'}")
            else:
                say(f"{'re-bound call adds p50 <= 5 ms (issue 42)':52} {'none':>8}              no")
        if lat["gateway"] and lat["direct"]:
            a50, a99 = 1000 * gwstats.added(lat["gateway"], lat["direct"], 50), 1000 * gwstats.added(lat["gateway"], lat["direct"], 99)
            say(f"{'added latency p50 <= 1 ms':52} {a50:8.3f} ms           {'yes' if a50 <= 1 else 'no'}")
            say(f"{'added latency p99 <= 5 ms':52} {a99:8.3f} ms           {'yes' if a99 <= 5 else 'no'}")
        if tput.get("gateway"):
            say(f"{'>= 1500 calls/s per gateway core (calls per CPU-s)':52} {per_cpu:8.0f}              "
                f"{'yes' if per_cpu >= 1500 else 'no'}")
        if rss:
            say(f"{'gateway RSS <= 150 MiB with ' + str(args.rss_runtimes) + ' runtimes':52} {rss['peak']:8.1f} MiB          "
                f"{'yes' if rss['peak'] <= 150 else 'no'}")
        if args.baseline is not None:
            say("")
            say(f"against the baseline ({args.baseline}), same run (issue 41: within 10 %, counting only the worse side)")
            say(f"{'figure':40} {'current':>10} {'baseline':>10} {'ratio':>6}  within 10 %")
            figures: list[tuple[str, float, float, gwbaseline.Better]] = []
            if lat.get("baseline") and lat["gateway"] and lat["direct"]:
                for q in (50, 99):
                    figures.append((f"added latency p{q} ms", 1000 * gwstats.added(lat["gateway"], lat["direct"], q),
                                    1000 * gwstats.added(lat["baseline"], lat["direct"], q), gwbaseline.Better.LOWER))
            if tput.get("baseline") and tput.get("gateway"):
                cur, base = tput["gateway"], tput["baseline"]
                figures.append(("calls per CPU-second (one core)",
                                cur["calls"] / cur["cpu"] if cur["cpu"] else float("nan"),
                                base["calls"] / base["cpu"] if base["cpu"] else float("nan"), gwbaseline.Better.HIGHER))
            for label, current, baseline_value, better in figures:
                v = gwbaseline.verdict(current=current, baseline=baseline_value, better=better)
                say(f"{label:40} {v.current:10.3f} {v.baseline:10.3f} {v.ratio:6.2f}  {'yes' if v.within else 'NO'}")
            if gwrow is not None:
                basecalls = next((t for label, t, _, _ in rows if label.startswith("baseline gateway")), None)
                say(f"{'failed calls across the handoffs (current)':40} {gwrow.failed:>10d} of {gwrow.calls}: "
                    f"{'yes' if gwrow.failed == 0 else 'NO'}" + (
                        f"; the baseline's in this run: {basecalls.failed} of {basecalls.calls}" if basecalls is not None
                        else " (the baseline's: 0 of 2040, docs/performance.md)"))
            srow_cur = next((t for label, t, _, _ in rows if label == SESSION_LABELS["session"]), None)
            srow_base = next((t for label, t, _, _ in rows if label == SESSION_LABELS["sessbase"]), None)
            if srow_cur is not None:
                say(f"{'failed calls, handshake-era session':40} {srow_cur.failed:>10d} of {srow_cur.calls}: "
                    f"{'yes' if srow_cur.failed == 0 else 'NO'}" + (
                        f"; the baseline's in this run: {srow_base.failed} of {srow_base.calls}" if srow_base is not None
                        else ""))
        say(f"(whole run {time.monotonic() - started:.0f}s)")
        return 0
    finally:
        for pt in tools:
            pt.stop()
        for proc in subprocs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for child in children:
            child.kill()
        process.plane(py, "down", "--dir", work / "plane", stdout=subprocess.DEVNULL)



if __name__ == "__main__":
    sys.exit(main())
