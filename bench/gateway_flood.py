"""The gateway under a flood, on the local plane (a benchmark, not a test; issue 41).

One run, one plane (hack/cluster.py), one operator (so the runtimes are real) and one gateway
process with the chart's settings and defaults (tests/harness: OperatorProcess, GatewayProcess),
started as bench/gateway.py starts them (its helpers are imported, not copied). Two ToolRuntimes
with `spec.service.gateway: true`:

- `victim`: well behaved, served by a fast tool (an aiohttp server in its own process on the pod's
  kwok-loop IP, 127.0.100.x) that counts every JSON-RPC id it is asked: a call lost or run twice
  shows there.
- `hog`: its pod is never Ready (baton.dev/test-never-ready stays; connectSeconds 600), so every
  call to it is held, for admissionSeconds (60), then refused.

Then:
1. The victim unloaded: LAT_CALLS calls paced at LAT_RATE/s on one kept-alive connection from
   127.0.0.1; p50/p99.
2. The flood, all at once, bounded in count and time, from a process of its own: CONNECTIONS
   connections in all, over loopback source addresses (local_addr): HELD held calls to `hog` with
   1 MiB bodies sent in full, SLOW_BODIES slow bodies (the head of a 1 MiB call to `hog`, then a
   byte a second), SLOWLORIS heads (a blank line, then a byte a second of a request line), those
   three spread over 127.0.0.10-.17; and the rest from the single address 127.0.0.9, small held
   calls to `hog`, more than the per-client bound (BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT).
   Every answer the flood gets is recorded by status and Baton-Reason. Meanwhile the victim's
   latency again, same pacing; the gateway's RSS and gauges sampled every half second.
3. What it printed: the gateway's peak RSS (VmHWM) against the chart's memory limit
   (charts/baton/values.yaml, gateway.resources.limits.memory), refusals by reason, the gateway's
   own counts (/metrics), the victim's p50/p99 unloaded and under flood, whether a victim call
   failed, was lost or ran twice; the targets met or not (printed, never asserted).

With --rounds N the flood (and the victim's calls under it) is repeated on the same gateway:
whether memory a flood took is kept, and whether a second one climbs on top of it.

Usage: .venv/bin/python -m bench.gateway_flood [--connections 2000] [--held 400] [--rounds 1] ...
(`make bench-gateway-flood`). Starts its own plane in a temp dir and stops it, also on Ctrl-C or
SIGTERM; all traffic goes to 127.0.0.0/8; every loop is bounded in count and time.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import enum
import http.client
import ipaddress
import json
import os
import re
import resource
import shutil
import signal
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
    raise SystemExit("run it from the repository root as a module: python -m bench.gateway_flood ...")

from bench import gateway as gwbench  # noqa: E402  (also puts tests/ on sys.path: the harness)
from bench import gwstats  # noqa: E402

ROOT = gwbench.ROOT
NS = "bench-flood"
MIB = 1024 * 1024
# The chart's gateway settings (charts/baton/values.yaml and the gateway's defaults, which the
# chart does not override): passed explicitly so the run says what it ran with. Where the
# harness sets short test values (a 6 s Lease, a 10 s shutdown grace), the chart's are restored.
CHART_SETTINGS = {
    "BATON_GATEWAY_LEASE_SECONDS": "15",
    "BATON_GATEWAY_HEADER_SECONDS": "10",
    "BATON_SHUTDOWN_GRACE_SECONDS": "25",
    "BATON_GATEWAY_MAX_HELD": "1000",
    "BATON_GATEWAY_MAX_HELD_TOTAL": "4000",
    "BATON_GATEWAY_MAX_BUFFERED_BYTES": str(64 * MIB),
    "BATON_GATEWAY_MAX_CONNECTIONS": "4096",
    "BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT": "1024",
    "BATON_GATEWAY_BODY_SECONDS": "30",
    "BATON_GATEWAY_MAX_HELD_BODY_BYTES": str(MIB),
}
SPREAD_ADDRESSES = [f"127.0.0.{i}" for i in range(10, 18)]
BURST_ADDRESS = "127.0.0.9"   # the one address with more connections than the per-client bound
VICTIM_ADDRESS = "127.0.0.1"  # the victim's client: no flood connection comes from it
HOG_ADMISSION_SECONDS = 60
# "With margin": the peak at most this share of the limit (a container also holds what the
# process does not count: the page cache of its files, the runtime's own).
RSS_MARGIN_SHARE = 0.8
P99_FACTOR = 2.0


# ---------------------------------------------------------------- pure parts (tests/unit/bench)

class Kind(str, enum.Enum):
    """What one flood connection does."""

    HELD = "held 1 MiB"            # a held call to hog, its 1 MiB body sent in full
    SLOW_BODY = "slow body"        # the head of a 1 MiB call to hog, then a byte a second
    SLOWLORIS = "slowloris head"   # a blank line, then a byte a second of a request line
    BURST = "one address"          # small held calls to hog, all from BURST_ADDRESS


@dataclasses.dataclass(frozen=True)
class Conn:
    kind: Kind
    local: str  # the source address (loopback)


def plan(*, connections: int, held: int, slow_bodies: int, slowloris: int, per_client_bound: int,
         spread: list[str], burst_address: str) -> list[Conn]:
    """The flood's connections: `held`, `slow_bodies` and `slowloris` round-robin over `spread`
    (each address under the per-client bound), the rest all from `burst_address` (more than the
    bound, so the bound is reached). In that order: the held bodies arrive first, so that the
    body-memory bound is what they meet rather than the per-runtime held count."""
    for name, value in (("connections", connections), ("held", held), ("slow_bodies", slow_bodies),
                        ("slowloris", slowloris)):
        if value < 0:
            raise ValueError(f"{name}={value} is negative")
    if not spread:
        raise ValueError("spread names no source address")
    for address in [*spread, burst_address]:
        if not ipaddress.ip_address(address).is_loopback:
            raise ValueError(f"source address {address} is not loopback: the flood stays on 127.0.0.0/8")
    if burst_address in spread:
        raise ValueError(f"burst_address {burst_address} is one of the spread addresses")
    spread_count = held + slow_bodies + slowloris
    burst = connections - spread_count
    if burst <= per_client_bound:
        raise ValueError(f"connections={connections} leaves {burst} for {burst_address}, not more than the "
                         f"per-client bound {per_client_bound}: lower held, slow_bodies or slowloris")
    per_address = -(-spread_count // len(spread))
    if per_address > per_client_bound:
        raise ValueError(f"{per_address} connections per spread address reach the per-client bound {per_client_bound}: "
                         "add addresses to the spread")
    kinds = [Kind.HELD] * held + [Kind.SLOW_BODY] * slow_bodies + [Kind.SLOWLORIS] * slowloris
    return [Conn(k, spread[i % len(spread)]) for i, k in enumerate(kinds)] + [Conn(Kind.BURST, burst_address)] * burst


def call_body(rid: str, size: int | None = None) -> bytes:
    """A JSON-RPC tools/call with id `rid`; padded (its text argument filled with 'x') to exactly
    `size` bytes when given."""
    def doc(pad: str) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": pad}}}, separators=(",", ":")).encode()
    base = doc("")
    if size is None:
        return base
    if size < len(base):
        raise ValueError(f"size={size} is below the {len(base)} bytes of the call itself")
    return doc("x" * (size - len(base)))


def request_head(host: str, content_length: int) -> bytes:
    return (f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {content_length}\r\n\r\n").encode()


def answer_of(head: bytes) -> str:
    """'<status> <Baton-Reason>' (or '<status>' without one) of a response head; 'no answer' when
    no status line arrived."""
    text = head.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    lines = text.split("\r\n")
    m = re.match(r"HTTP/\d\.\d (\d{3})", lines[0]) if lines else None
    if not m:
        return "no answer"
    reason = next((line.split(":", 1)[1].strip() for line in lines[1:]
                   if line.lower().startswith("baton-reason:")), "")
    return f"{m.group(1)} {reason}" if reason else m.group(1)


def message_of(raw: bytes) -> str:
    """The refusal's message from a response's JSON body (`error`, or a JSON-RPC error's
    `message`), so that one reason met at different bounds is told apart; '' when there is none
    or the body is not all there."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if not sep or not m or len(body) < int(m.group(1)):
        return ""
    try:
        doc = json.loads(body[:int(m.group(1))])
    except ValueError:
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return str(error)[:120] if isinstance(error, str) else ""


def body_complete(raw: bytes) -> bool:
    """Whether `raw` holds a whole response head and, by its Content-Length, its whole body."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return m is None or len(body) >= int(m.group(1))


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments skipped)."""
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', rest))
        out.append(Sample(name, labels, float(value)))
    return out


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def by_labels(samples: list[Sample], name: str, *keys: str) -> dict[str, float]:
    """The non-zero samples of `name`, keyed by their `keys` labels joined with ' '."""
    out: dict[str, float] = collections.defaultdict(float)
    for s in samples:
        if s.name == name and s.value:
            label = " ".join(s.labels.get(k, "") for k in keys).strip() or "-"
            out[label] += s.value
    return dict(out)


_UNITS = {"": 1, "k": 1000, "M": 1000 ** 2, "G": 1000 ** 3, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3}


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity ('256Mi', '1G', '134217728') in bytes."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|k|M|G)?", quantity.strip())
    if not m:
        raise ValueError(f"memory quantity {quantity!r} is not <digits>[Ki|Mi|Gi|k|M|G]")
    return int(m.group(1)) * _UNITS[m.group(2) or ""]


def chart_memory_limit(values_yaml: Path) -> str:
    """gateway.resources.limits.memory of the chart's values."""
    import yaml

    values = yaml.safe_load(values_yaml.read_text())
    try:
        return str(values["gateway"]["resources"]["limits"]["memory"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{values_yaml}: gateway.resources.limits.memory is not set") from exc


@dataclasses.dataclass(frozen=True)
class Accounting:
    """The victim's calls as the client and the tool saw them."""

    sent: int
    failed: int       # no 200 at the client
    lost: int         # a 200 at the client, the tool never saw the id
    twice: int        # ids the tool ran more than once
    unknown: int      # ids the tool ran that were never sent

    @property
    def clean(self) -> bool:
        return self.failed == 0 and self.lost == 0 and self.twice == 0 and self.unknown == 0


def account(*, sent: list[str], ok: list[str], tool_counts: dict[str, int]) -> Accounting:
    sent_set, ok_set = set(sent), set(ok)
    return Accounting(sent=len(sent), failed=len(sent_set - ok_set),
                      lost=sum(1 for rid in ok_set if tool_counts.get(rid, 0) == 0),
                      twice=sum(1 for rid, n in tool_counts.items() if n > 1),
                      unknown=sum(1 for rid in tool_counts if rid not in sent_set))


def yes_no(met: bool) -> str:
    return "met" if met else "NOT met"


# ---------------------------------------------------------------- subprocess modes (tool, flood)

def counting_tool_main(ip: str, port: int, max_seconds: float) -> None:
    """The victim's tool on ip:port (loopback): answers every POST with a JSON-RPC result and
    counts the ids it ran; GET /__counts answers them ({id: times}). Exits after max_seconds,
    at EOF on stdin, or when its parent is gone."""
    from aiohttp import web

    parent = os.getppid()
    counts: collections.Counter[str] = collections.Counter()

    async def call(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            rid = json.loads(body).get("id")
        except ValueError:
            rid = None
        if rid is not None:
            counts[str(rid)] += 1
        return web.json_response({"jsonrpc": "2.0", "id": rid,
                                  "result": {"content": [{"type": "text", "text": "hello"}]}})

    async def report(_: web.Request) -> web.Response:
        return web.json_response(dict(counts))

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/__counts", report)
        app.router.add_post("/{tail:.*}", call)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5)
        await runner.setup()
        await web.TCPSite(runner, gwbench.loopback(ip), port, backlog=1024, reuse_address=True).start()
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)), daemon=True).start()
        deadline = time.monotonic() + max_seconds
        while not done.is_set() and time.monotonic() < deadline and os.getppid() == parent:
            try:
                await asyncio.wait_for(done.wait(), 1)
            except asyncio.TimeoutError:
                pass
        await runner.cleanup()

    asyncio.run(run())


def flood_main(config: dict[str, Any]) -> None:
    """The flood (see the module doc), from this process: prints 'started <n>' once every
    connection was tried, then one JSON line: per kind, the answers and how long they took."""
    port, host, hold_host = int(config["port"]), str(config["host"]), str(config["hog_host"])
    conns = [Conn(Kind(k), a) for k, a in config["conns"]]
    max_seconds = float(config["max_seconds"])
    big = call_body("flood-held", MIB)
    small = call_body("flood-burst")
    slowloris_text = request_head(host, 0)

    async def one(c: Conn, note: Callable[[], None]) -> tuple[str, str, float]:
        t0 = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, local_addr=(gwbench.loopback(c.local), 0), limit=MIB),
                10)
        except (OSError, asyncio.TimeoutError) as exc:
            note()
            return c.kind.value, f"connect failed: {gwstats.cause_of_exception(exc)}", time.monotonic() - t0
        note()
        got = b""

        async def read() -> None:
            nonlocal got
            while not body_complete(got) and len(got) < 65536:
                chunk = await reader.read(4096)
                if not chunk:
                    return
                got += chunk

        async def write() -> None:
            if c.kind in (Kind.HELD, Kind.BURST):
                body = big if c.kind is Kind.HELD else small
                writer.write(request_head(hold_host, len(body)) + body)
                await writer.drain()
                return
            if c.kind is Kind.SLOW_BODY:
                writer.write(request_head(hold_host, MIB))
                trickle = b"{" + b" " * (MIB - 1)
            else:
                trickle = b"\r\n" + slowloris_text
            for i in range(len(trickle)):  # bounded: the reader's end or max_seconds cancels it first
                writer.write(trickle[i:i + 1])
                await writer.drain()
                await asyncio.sleep(1)

        reading = asyncio.ensure_future(read())
        writing = asyncio.ensure_future(write())
        outcome = ""
        try:
            await asyncio.wait_for(asyncio.shield(reading), max_seconds - (time.monotonic() - t0))
        except asyncio.TimeoutError:
            outcome = "still open at the bench's bound"
        except (ConnectionError, OSError) as exc:
            outcome = gwstats.cause_of_exception(exc)
        finally:
            writing.cancel()
            reading.cancel()
            await asyncio.gather(writing, reading, return_exceptions=True)
            writer.transport.abort()
        answer = answer_of(got)
        if answer == "no answer":
            answer = f"no answer ({outcome or 'closed'})"
        elif message_of(got):
            answer = f"{answer}: {message_of(got)}"
        return c.kind.value, answer, time.monotonic() - t0

    async def run() -> list[tuple[str, str, float]]:
        count = 0

        def note() -> None:
            nonlocal count
            count += 1
            if count == len(conns):
                print(f"started {len(conns)}", flush=True)
        return list(await asyncio.gather(*(one(c, note) for c in conns)))

    results = asyncio.run(run())
    out: dict[str, Any] = {}
    for kind, answer, seconds in results:
        entry = out.setdefault(kind, {"answers": {}, "seconds": {}})
        entry["answers"][answer] = entry["answers"].get(answer, 0) + 1
        entry["seconds"].setdefault(answer, []).append(round(seconds, 3))
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------- the run

class Sampler:
    """The gateway's RSS and gauges every `interval` seconds, in a thread, until stop()."""

    def __init__(self, pid: int, metrics_port: int, interval: float = 0.5) -> None:
        self.proc, self.metrics_port, self.interval = gwbench.Proc(pid), metrics_port, interval
        self.peak: dict[str, float] = collections.defaultdict(float)
        self.scrape_errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for _ in range(int(3600 / self.interval)):  # bounded: the run ends far sooner
            if self._stop.wait(self.interval):
                return
            try:
                self.peak["VmRSS"] = max(self.peak["VmRSS"], self.proc.status_mib("VmRSS"))
                samples = scrape(self.metrics_port)
            except OSError:
                self.scrape_errors += 1
                continue
            for name in ("baton_gateway_held", "baton_gateway_buffered_bytes", "baton_gateway_connections"):
                self.peak[name] = max(self.peak[name], metric_sum(samples, name))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode())


class Victim:
    """Paced calls to the victim through the gateway on one kept-alive connection (a new one after
    a failure); each call's id is unique, so the tool's counts show a call lost or run twice."""

    def __init__(self, port: int, host: str) -> None:
        self.port, self.host = port, host
        self.conn: http.client.HTTPConnection | None = None
        self.sent: list[str] = []
        self.ok: list[str] = []

    def one(self, rid: str) -> tuple[float | None, str]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(gwbench.loopback(VICTIM_ADDRESS), self.port, timeout=10)
        self.sent.append(rid)
        t0 = time.perf_counter()
        try:
            self.conn.request("POST", "/mcp", body=call_body(rid),
                              headers={"Host": self.host, "Content-Type": "application/json"})
            r = self.conn.getresponse()
            r.read()
            cause = gwstats.cause_of_status(r.status, r.getheader("Baton-Reason"))
        except Exception as exc:  # counted, then a new connection
            cause = gwstats.cause_of_exception(exc)
            self.conn.close()
            self.conn = None
        if cause:
            return None, cause
        self.ok.append(rid)
        return time.perf_counter() - t0, ""

    def paced(self, prefix: str, *, calls: int, rate: float) -> tuple[list[float], collections.Counter[str], float]:
        """`calls` calls at `rate`/s (a late call goes at once); latencies of the answered ones,
        failures by cause, the seconds taken."""
        lat: list[float] = []
        failed: collections.Counter[str] = collections.Counter()
        t0 = time.monotonic()
        deadline = t0 + calls / rate * 3 + 30
        for i in range(calls):
            if time.monotonic() > deadline:
                failed["not sent: the bench's time bound"] += calls - i
                break
            time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            seconds, cause = self.one(f"{prefix}-{i}")
            if seconds is None:
                failed[cause] += 1
            else:
                lat.append(seconds)
        return lat, failed, time.monotonic() - t0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def raise_fd_limit(need: int) -> tuple[int, int]:
    """The soft descriptor limit raised to the hard one (children, the gateway among them,
    inherit it); an error naming the need when the hard limit is below it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if target < need:
        raise SystemExit(f"RLIMIT_NOFILE: the hard limit {hard} is below the {need} descriptors the flood needs "
                         "(raise it: ulimit -Hn, or lower --connections)")
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def fd_limit_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return " ".join(line.split()[3:5])
    return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--connections", type=int, default=2000, help="flood connections in all")
    ap.add_argument("--held", type=int, default=400, help="held calls to hog with 1 MiB bodies sent in full")
    ap.add_argument("--slow-bodies", type=int, default=250, help="1 MiB calls to hog whose body comes a byte a second")
    ap.add_argument("--slowloris", type=int, default=250, help="connections sending a blank line, then a byte a second")
    ap.add_argument("--lat-rate", type=float, default=200, help="victim calls per second")
    ap.add_argument("--lat-calls", type=int, default=2000, help="victim calls, unloaded and again under the flood")
    ap.add_argument("--rounds", type=int, default=1,
                    help="floods one after the other on the same gateway (a second shows whether memory is kept)")
    ap.add_argument("--flood-seconds", type=float, default=HOG_ADMISSION_SECONDS + 30,
                    help="the longest a flood connection stays open (the gateway should end each well before)")
    ap.add_argument("--counting-tool", nargs=3, metavar=("IP", "PORT", "MAX_SECONDS"), help=argparse.SUPPRESS)
    ap.add_argument("--flood", metavar="JSON", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.counting_tool:
        counting_tool_main(args.counting_tool[0], int(args.counting_tool[1]), float(args.counting_tool[2]))
        return 0
    if args.flood:
        flood_main(json.loads(args.flood))
        return 0
    return run(args)


def say(text: str = "") -> None:
    print(text, flush=True)


def run(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    from dev import process
    from dev.crds import wait_established
    from dev.ports import free_port
    from dev.wait import wait_for
    from harness.gateway import GatewayProcess
    from harness.operator import OperatorProcess

    per_client = int(CHART_SETTINGS["BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT"])
    conns = plan(connections=args.connections, held=args.held, slow_bodies=args.slow_bodies, slowloris=args.slowloris,
                 per_client_bound=per_client, spread=SPREAD_ADDRESSES, burst_address=BURST_ADDRESS)
    limit_text = chart_memory_limit(ROOT / "charts" / "baton" / "values.yaml")
    limit_mib = memory_bytes(limit_text) / MIB
    fd_soft, fd_hard = raise_fd_limit(2 * args.connections + 2048)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    load_before = os.getloadavg()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="baton-bench-flood-"))
    py = sys.executable
    children: list[Any] = []
    subprocs: list[subprocess.Popen[bytes]] = []
    victim: Victim | None = None
    try:
        process.plane(py, "up", "--dir", work / "plane", check=True, stdout=subprocess.DEVNULL)
        print(f"work directory (logs): {work}", flush=True)
        kubeconfig = str(work / "plane" / "kubeconfig")
        plane = types.SimpleNamespace(env=dict(os.environ, KUBECONFIG=kubeconfig), kubeconfig=kubeconfig)
        config.load_kube_config(kubeconfig)  # type: ignore[no-untyped-call]
        api = client.ApiClient(client.Configuration.get_default_copy())
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        kubectl = [str(Path(py).parent / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)
        wait_established(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        wait_for(lambda: bool(core.list_namespaced_service_account(NS).items), timeout=60, what=f"{NS} default SA")
        op = OperatorProcess(plane, work, identity="flood-op", namespaces=[NS],
                             env={"BATON_SYSTEM_NAMESPACE": NS, "BATON_LOG_LEVEL": "WARNING",
                                  "BATON_LEASE_SECONDS": "15", "BATON_BACKOFF_BASE_SECONDS": "5"})
        children.append(op)
        op.start()
        gw = GatewayProcess(plane, work, identity="flood-gw", namespaces=[NS], system_namespace=NS,
                            env={"BATON_LOG_LEVEL": "WARNING", **CHART_SETTINGS})
        children.append(gw)
        gw.start()
        assert gw.proc is not None
        gproc = gwbench.Proc(gw.proc.pid)

        # ------------------------------------------------------------ the runtimes
        victim_port, hog_port = free_port(), free_port()
        custom.create_namespaced_custom_object(gwbench.GROUP, gwbench.VERSION, NS, gwbench.PLURAL,
                                               gwbench.runtime("victim", port=victim_port, gateway=True))
        hog = gwbench.runtime("hog", port=hog_port, gateway=True)  # never Ready: the annotation stays
        hog["spec"]["budgets"].update({"admissionSeconds": HOG_ADMISSION_SECONDS, "connectSeconds": 600})
        custom.create_namespaced_custom_object(gwbench.GROUP, gwbench.VERSION, NS, gwbench.PLURAL, hog)

        def pod_of(name: str) -> Any:
            pods = core.list_namespaced_pod(NS, label_selector=f"baton.dev/runtime={name}").items
            return pods[0] if len(pods) == 1 and pods[0].status and pods[0].status.pod_ip else None

        wait_for(lambda: pod_of("victim"), timeout=180, what="the victim's pod has an IP", interval=0.2)
        vpod = pod_of("victim")
        victim_ip = gwbench.loopback(vpod.status.pod_ip)
        tool = subprocess.Popen([py, "-m", "bench.gateway_flood", "--counting-tool", victim_ip, str(victim_port), "3600"],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=open(work / "tool.log", "wb"))
        subprocs.append(tool)
        wait_for(lambda: gwbench.post(victim_ip, victim_port, "probe", call_body("probe"), 2)[0] == 200, timeout=60,
                 what="the victim's tool listening", interval=0.2, ignore=(OSError,))
        core.patch_namespaced_pod(vpod.metadata.name, NS, {"metadata": {"annotations": {gwbench.NEVER_READY: None}}})
        victim_host, hog_host = f"victim.{NS}", f"hog.{NS}"
        wait_for(lambda: gwbench.post("127.0.0.1", gw.port, victim_host, call_body("probe"), 5)[0] == 200,
                 timeout=120, what="the gateway forwards to the victim", interval=0.2, ignore=(OSError,))

        def hog_holds() -> bool:
            # Held: no answer within 2 s (the client then leaves; nothing is forwarded).
            try:
                status, reason = gwbench.post("127.0.0.1", gw.port, hog_host, call_body("probe"), 2)
            except TimeoutError:
                return True
            print(f"  (hog answered {status} {reason} so far)", flush=True)
            return False
        wait_for(hog_holds, timeout=120, what="the gateway holds hog's calls", interval=0.5)
        wait_for(lambda: metric_sum(scrape(gw.metrics_port), "baton_gateway_held") == 0, timeout=30,
                 what="the probe's held call let go", interval=0.2)

        # ------------------------------------------------------------ the victim unloaded
        victim = Victim(gw.port, victim_host)
        victim.paced("warm", calls=50, rate=args.lat_rate)
        lat_idle, failed_idle, _ = victim.paced("idle", calls=args.lat_calls, rate=args.lat_rate)
        rss_before = gproc.status_mib("VmRSS")
        hwm_before = gproc.status_mib("VmHWM")
        before = scrape(gw.metrics_port)

        # ------------------------------------------------------------ the flood, ROUNDS times
        kinds = collections.Counter(c.kind.value for c in conns)
        say()
        say(f"make bench-gateway-flood: {len(conns)} connections ({', '.join(f'{n} {k}' for k, n in kinds.items())}), "
            f"{args.rounds} round(s); victim {args.lat_calls} calls at {args.lat_rate:g}/s unloaded and under each flood")
        say(f"machine: {os.cpu_count()} cores; load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} "
            f"{load_before[2]:.2f}")
        say("gateway settings: " + " ".join(f"{k.removeprefix('BATON_GATEWAY_')}={v}" for k, v in CHART_SETTINGS.items())
            + f"; descriptors: bench {fd_soft}/{fd_hard}, gateway {fd_limit_of(gw.proc.pid)}; hog admissionSeconds "
            f"{HOG_ADMISSION_SECONDS}")
        say(f"gateway memory before the flood: VmRSS {rss_before:.1f} MiB (peak so far {hwm_before:.1f})")
        p50i, p99i = 1000 * gwstats.percentile(lat_idle, 50), 1000 * gwstats.percentile(lat_idle, 99)
        say(f"victim ({VICTIM_ADDRESS}, one kept-alive connection, {args.lat_rate:g} calls/s)  p50 ms  p99 ms  max ms  failed")
        say(f"  unloaded          {len(lat_idle):5d} answered  {p50i:6.2f}  {p99i:6.2f}  {1000 * max(lat_idle):6.1f}  "
            f"{gwstats.causes_text(failed_idle)}")
        hwm, worst_p99 = 0.0, 0.0
        for round_no in range(1, args.rounds + 1):
            say()
            say(f"--- flood {round_no} of {args.rounds}: {len(conns)} connections")
            sampler = Sampler(gw.proc.pid, gw.metrics_port)
            flood_config = {"port": gw.port, "host": hog_host, "hog_host": hog_host, "max_seconds": args.flood_seconds,
                            "conns": [(c.kind.value, c.local) for c in conns]}
            flood = subprocess.Popen([py, "-m", "bench.gateway_flood", "--flood", json.dumps(flood_config)], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=open(work / "flood.log", "ab"))
            subprocs.append(flood)
            assert flood.stdout is not None
            t_flood = time.monotonic()
            first = flood.stdout.readline().decode().strip()  # 'started N': bounded by the flood's 10 s connect timeout
            t_started = time.monotonic() - t_flood
            lat_flood, failed_flood, flood_lat_seconds = victim.paced(f"flood{round_no}", calls=args.lat_calls,
                                                                      rate=args.lat_rate)
            victim.close()
            t_victim_done = time.monotonic() - t_flood
            mid = scrape(gw.metrics_port)
            try:
                rest, _ = flood.communicate(timeout=args.flood_seconds + 60)
            except subprocess.TimeoutExpired:
                flood.kill()
                rest, _ = flood.communicate(timeout=10)
            t_flood_done = time.monotonic() - t_flood
            sampler.stop()
            flood_out: dict[str, Any] = json.loads(rest.decode().strip().splitlines()[-1]) if rest.strip() else {}
            round_hwm = gproc.status_mib("VmHWM")
            hwm = max(hwm, round_hwm)
            rss_after = gproc.status_mib("VmRSS")
            after = scrape(gw.metrics_port)
            say(f"timeline: every flood connection tried at {t_started:.1f}s ({first or 'no start line'}), victim under "
                f"flood done at {t_victim_done:.1f}s, flood over at {t_flood_done:.1f}s")
            say(f"gateway memory: peak (VmHWM) {round_hwm:.1f} MiB, sampled VmRSS peak {sampler.peak['VmRSS']:.1f} MiB; "
                f"after the flood {rss_after:.1f} MiB; chart limit {limit_text} = {limit_mib:.0f} MiB: margin "
                f"{limit_mib - round_hwm:.1f} MiB ({100 * (1 - round_hwm / limit_mib):.0f} %)")
            say(f"gauges, sampled peaks: held {sampler.peak['baton_gateway_held']:.0f}, buffered bytes "
                f"{sampler.peak['baton_gateway_buffered_bytes'] / MIB:.1f} MiB, connections "
                f"{sampler.peak['baton_gateway_connections']:.0f} ({sampler.scrape_errors} scrapes failed); at the end: "
                f"held {metric_sum(after, 'baton_gateway_held'):.0f}, buffered {metric_sum(after, 'baton_gateway_buffered_bytes'):.0f} B, "
                f"connections {metric_sum(after, 'baton_gateway_connections'):.0f}")
            say("the flood's answers, by kind (status, Baton-Reason, message; median seconds from connect to answer)")
            for kind, entry in flood_out.items():
                for answer, n in sorted(entry["answers"].items(), key=lambda kv: -kv[1]):
                    say(f"  {kind:15} {n:5d}  {answer} ({gwstats.percentile(entry['seconds'][answer], 50):.1f}s)")

            def delta(name: str, *keys: str) -> dict[str, float]:
                b, a = by_labels(before, name, *keys), by_labels(after, name, *keys)
                return {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0)}
            say("the gateway's counts during the flood (/metrics, after minus before; the victim's calls included):")
            say("  connections refused by bound: " + (", ".join(
                f"{k} {v:.0f}" for k, v in delta("baton_gateway_connections_refused_total", "bound").items()) or "none"))
            say("  calls by outcome and reason: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(
                delta("baton_gateway_calls_total", "outcome", "reason").items(), key=lambda kv: -kv[1])))
            say(f"  header timeouts: {metric_sum(after, 'baton_gateway_header_timeouts_total') - metric_sum(before, 'baton_gateway_header_timeouts_total'):.0f}; "
                f"held when the victim's calls ended: {metric_sum(mid, 'baton_gateway_held'):.0f}")
            p50f, p99f = (1000 * gwstats.percentile(lat_flood, 50), 1000 * gwstats.percentile(lat_flood, 99)) \
                if lat_flood else (float("nan"), float("nan"))
            worst_p99 = max(worst_p99, p99f) if p99f == p99f else float("inf")
            say(f"victim under the flood {len(lat_flood):5d} answered  p50 {p50f:6.2f} ms  p99 {p99f:6.2f} ms  max "
                f"{1000 * max(lat_flood or [float('nan')]):6.1f} ms  failed: {gwstats.causes_text(failed_flood)}  "
                f"({flood_lat_seconds:.1f}s); against unloaded: p50 x{p50f / p50i:.2f}, p99 x{p99f / p99i:.2f}")
            before = after

        with urllib.request.urlopen(f"http://{victim_ip}:{victim_port}/__counts", timeout=10) as r:
            tool_counts = {k: int(v) for k, v in json.loads(r.read()).items() if k.startswith(("idle-", "flood", "warm-"))}
        acc = account(sent=victim.sent, ok=victim.ok, tool_counts=tool_counts)
        load_after = os.getloadavg()
        say()
        say(f"the victim's calls, the tool's count: {acc.sent} sent, {acc.failed} failed at the client, {acc.lost} "
            f"answered 200 but never run, {acc.twice} run twice, {acc.unknown} run but never sent")
        say(f"load average after (1, 5, 15 min): {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
        say()
        say("targets (issue 41), over every round                               measured          met")
        say(f"{f'gateway peak RSS <= {RSS_MARGIN_SHARE:.0%} of the chart limit ({RSS_MARGIN_SHARE * limit_mib:.0f} MiB)':68} "
            f"{hwm:8.1f} MiB      {yes_no(hwm <= RSS_MARGIN_SHARE * limit_mib)}")
        say(f"{f'victim p99 under the flood <= {P99_FACTOR:g} x unloaded p99 ({P99_FACTOR * p99i:.2f} ms)':68} "
            f"{worst_p99:8.2f} ms       {yes_no(worst_p99 <= P99_FACTOR * p99i)}")
        say(f"{'no victim call failed, lost or run twice':68} {acc.failed + acc.lost + acc.twice:8d}          "
            f"{yes_no(acc.clean)}")
        say(f"(whole run {time.monotonic() - started:.0f}s)")
        return 0
    finally:
        if victim is not None:
            victim.close()
        for proc in subprocs:
            if proc.poll() is None:
                if proc.stdin is not None:
                    try:
                        proc.stdin.close()
                    except OSError:
                        pass
                proc.kill()
                proc.wait(10)
        for child in children:
            child.kill()
        process.plane(py, "down", "--dir", work / "plane", stdout=subprocess.DEVNULL)
        shutil.rmtree(work / "plane", ignore_errors=True)  # etcd's data; the logs stay in the work directory


if __name__ == "__main__":
    sys.exit(main())
