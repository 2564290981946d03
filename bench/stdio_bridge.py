"""baton-bridge beside the same stdio server driven directly (a benchmark, not a test; issue 44).

One run, one machine, loopback only. The server is `mcp-server-time` from PyPI, unmodified, two
processes of it: one a child of baton-bridge (`--listen 127.0.0.1:PORT`), one a child of the
client itself over stdio. Three parts, each side by side so that the machine's noise falls on both:

1. Latency, the official MCP Python SDK client (`mcp.Client`, handshake mode) on both sides: over
   stdio to its own child, and over streamable HTTP through the bridge. CALLS `tools/call
   get_current_time` each, one at a time, interleaved call by call (the order swapped every pair).
   Printed: p50/p95 of each side, the added p50/p95 (bridge minus direct) and the median of the
   pair-by-pair differences (robust to a drift of the machine's speed during the run). The same
   again with the bridge's client in the stateless era (`mode="2026-07-28"`: no session, the
   envelope on every request, translated by the bridge onto the child's one session).
2. The bridge's own hop, no SDK on either side: raw JSON-RPC lines on a third child's stdin/stdout
   against raw POSTs on one kept-alive HTTP/1.1 connection to the bridge (Accept JSON). The SDK's
   HTTP transport costs the client more than its stdio one; this figure is what the bridge adds.
3. Throughput: ROUNDS rounds of each side, alternating (A B, B A, ...), each CONCURRENCY SDK calls
   in flight for ROUND_SECONDS on one session; calls per second per side, and the ratio pair by
   pair. Meanwhile the bridge's VmRSS is sampled from /proc every 50 ms; its VmHWM and
   CPU-seconds per call are read at the end.

Usage: .venv/bin/python -m bench.stdio_bridge [--calls 2000] [--rounds 3] [--round-seconds 5]
[--concurrency 8] [--max-seconds 600] (`make bench-bridge`). Every loop is bounded in count and
time; everything started is stopped.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m bench.stdio_bridge ...")

from bench import gwbaseline, gwstats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the bridge's build, shared with its tests

SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
TOOL = "get_current_time"
ARGUMENTS = {"timezone": "UTC"}
PROTOCOL_VERSION = "2025-11-25"
TARGET_ADDED_P50_MS = 1.0
STATELESS = "2026-07-28"  # the SDK Client's mode that adopts the stateless era without a probe
TARGET_RSS_MIB = 20.0


@dataclasses.dataclass(frozen=True)
class Added:
    """One side against the other, in milliseconds."""

    direct_p50: float
    direct_p95: float
    bridge_p50: float
    bridge_p95: float
    added_p50: float          # p50(bridge) - p50(direct)
    added_p95: float
    paired_median: float      # median of (bridge_i - direct_i), pair by pair


def added(*, direct: list[float], bridge: list[float]) -> Added:
    """The added latency of the bridge from interleaved calls (seconds in, milliseconds out)."""
    if not direct or len(direct) != len(bridge):
        raise ValueError(f"direct and bridge: one timing each per pair, got {len(direct)} and {len(bridge)}")
    ms = 1000.0
    d50, d95 = gwstats.percentile(direct, 50) * ms, gwstats.percentile(direct, 95) * ms
    b50, b95 = gwstats.percentile(bridge, 50) * ms, gwstats.percentile(bridge, 95) * ms
    paired = statistics.median(b - d for b, d in zip(bridge, direct)) * ms
    return Added(d50, d95, b50, b95, b50 - d50, b95 - d95, paired)


def status_kib(pid: int, field: str) -> int:
    """A `VmRSS`/`VmHWM` line of /proc/<pid>/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(f"{field} not in /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class BridgeProcess:
    """baton-bridge with mcp-server-time as its child, on 127.0.0.1."""

    def __init__(self, *, binary: Path, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [str(binary), "--listen", f"127.0.0.1:{self.port}", "--termination-log", "", "--init-seconds", "60",
             "--eof-seconds", "2", "--term-seconds", "2", "--drain-seconds", "2", "--", *SERVER],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_ready(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"baton-bridge exited ({self.process.returncode}): {self.log.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/baton/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"baton-bridge not ready within {timeout}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log_file.close()


class RssSampler:
    """VmRSS of one process every `interval` seconds while running; the largest seen."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval, self.peak_kib, self.samples = pid, interval, 0, 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak_kib = max(self.peak_kib, status_kib(self.pid, "VmRSS"))
            self.samples += 1
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


async def one_call(client: Any) -> float:
    t0 = time.perf_counter()
    result = await client.call_tool(TOOL, ARGUMENTS)
    took = time.perf_counter() - t0
    if result.is_error or "UTC" not in result.content[0].text:
        raise RuntimeError(f"{TOOL} answered wrongly: {result}")
    return took


async def sdk_latency(*, direct: Any, bridge: Any, calls: int) -> tuple[list[float], list[float]]:
    for _ in range(min(50, calls)):  # warm-up, not counted
        await one_call(direct)
        await one_call(bridge)
    d: list[float] = []
    b: list[float] = []
    sides = {"direct": (direct, d), "bridge": (bridge, b)}
    for i in range(calls):
        for side in gwbaseline.call_order(("direct", "bridge"), i):
            client, out = sides[side]
            out.append(await one_call(client))
    return d, b


async def closed_loop(client: Any, *, concurrency: int, seconds: float) -> int:
    """CONCURRENCY calls in flight on one session for `seconds`; the count of calls answered."""
    done = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await one_call(client)
            done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


class RawStdio:
    """JSON-RPC lines on a child's stdin/stdout, one request at a time: no SDK, no framing
    beyond the newline."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        self._id = 0
        self.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                    "clientInfo": {"name": "baton-bench-raw", "version": "1"}})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(msg).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdout is not None
        self._id += 1
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        while True:  # bounded by the child: it answers or exits (EOF: an empty line)
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the raw stdio child exited")
            msg: dict[str, Any] = json.loads(line)
            if msg.get("id") == self._id:
                return msg

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


class RawHttp:
    """JSON-RPC POSTs on one kept-alive HTTP/1.1 connection to the bridge, answers as JSON."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self._id = 0
        self.session = ""
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                           "clientInfo": {"name": "baton-bench-raw", "version": "1"}}}
        self._post(init)
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _post(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        self.conn.request("POST", "/mcp", body=json.dumps(msg).encode(), headers=headers)
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"the bridge answered {resp.status}: {body[:300]!r}")
        self.session = resp.getheader("Mcp-Session-Id") or self.session
        answer: dict[str, Any] | None = json.loads(body) if body.strip() else None
        return answer

    def drain_probe(self) -> None:
        """GET /baton/drain on the same connection: an HTTP round trip that does not reach the child."""
        self.conn.request("GET", "/baton/drain")
        resp = self.conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/baton/drain answered {resp.status}")

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._id += 1
        answer = self._post({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        if answer is None or answer.get("id") != self._id:
            raise RuntimeError(f"the bridge's answer is not to request {self._id}: {answer}")
        return answer


def raw_latency(*, port: int, calls: int) -> tuple[list[float], list[float], list[float]]:
    """Interleaved (every order of the three in turn): raw stdio calls, raw calls through the
    bridge, and bare HTTP round trips to the bridge (GET /baton/drain: the HTTP part of the hop,
    the client's http.client included, without the child)."""
    stdio, hop = RawStdio(), RawHttp(port)
    try:
        params = {"name": TOOL, "arguments": ARGUMENTS}
        for _ in range(min(50, calls)):
            stdio.request("tools/call", params)
            hop.request("tools/call", params)
        d: list[float] = []
        b: list[float] = []
        h: list[float] = []
        for i in range(calls):
            for side in gwbaseline.call_order(("direct", "bridge", "http"), i):
                t0 = time.perf_counter()
                if side == "http":
                    hop.drain_probe()
                    h.append(time.perf_counter() - t0)
                    continue
                answer = (stdio if side == "direct" else hop).request("tools/call", params)
                (d if side == "direct" else b).append(time.perf_counter() - t0)
                if "result" not in answer:
                    raise RuntimeError(f"{TOOL} over the {side} path answered {answer}")
        return d, b, h
    finally:
        hop.conn.close()
        stdio.stop()


def added_lines(label: str, a: Added) -> list[str]:
    return [f"{label}: direct p50 {a.direct_p50:.3f} ms p95 {a.direct_p95:.3f} ms; "
            f"bridge p50 {a.bridge_p50:.3f} ms p95 {a.bridge_p95:.3f} ms",
            f"  added p50 {a.added_p50:+.3f} ms, p95 {a.added_p95:+.3f} ms; "
            f"median of pair-by-pair differences {a.paired_median:+.3f} ms"]


async def run(args: argparse.Namespace, say: Any) -> dict[str, Any]:
    from mcp import StdioServerParameters
    from mcp.client.client import Client
    from unit.bridge import conftest as bridge_build

    binary = bridge_build.build_bridge()
    say(f"baton-bridge: {binary} ({binary.stat().st_size // 1024} KiB); server: {' '.join(SERVER[1:])}; "
        f"load average {os.getloadavg()[0]:.2f} (2 cores shared: figures are noisy)")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="baton-bench-bridge-") as tmp:
        bridge = BridgeProcess(binary=binary, log=Path(tmp) / "bridge.log")
        try:
            bridge.wait_ready(timeout=60)
            pid = bridge.process.pid
            say(f"bridge ready on 127.0.0.1:{bridge.port}, pid {pid}, VmRSS {status_kib(pid, 'VmRSS') / 1024:.1f} MiB idle")
            params = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
            async with Client(params, mode="legacy") as direct, \
                    Client(f"http://127.0.0.1:{bridge.port}/mcp", mode="legacy") as via, \
                    Client(f"http://127.0.0.1:{bridge.port}/mcp", mode=STATELESS) as via_stateless:
                sampler = RssSampler(pid)
                sampler.start()
                cpu0, calls0 = cpu_seconds(pid), 0
                # The handshake era, then the stateless one (2026-07-28: no session, the envelope on
                # every request, translated by the bridge onto the child's one session).
                sdk_added: dict[str, Added] = {}
                for key, client, label in (("sdk", via, "SDK client"),
                                           ("sdk_stateless", via_stateless, f"SDK client in the {STATELESS} era")):
                    d, b = await sdk_latency(direct=direct, bridge=client, calls=args.calls)
                    calls0 += len(b) + min(50, args.calls)
                    sdk_added[key] = added(direct=d, bridge=b)
                    out[key] = dataclasses.asdict(sdk_added[key])
                    for line in added_lines(f"{label}, {args.calls} calls each, interleaved", sdk_added[key]):
                        say(line)
                sdk, stateless = sdk_added["sdk"], sdk_added["sdk_stateless"]

                d, b, h = await asyncio.to_thread(raw_latency, port=bridge.port, calls=args.calls)
                calls0 += len(b) + min(50, args.calls)
                raw = added(direct=d, bridge=b)
                out["raw"] = dataclasses.asdict(raw)
                out["http_p50_ms"] = gwstats.percentile(h, 50) * 1000
                for line in added_lines(f"raw JSON-RPC (the bridge's own hop), {args.calls} calls each", raw):
                    say(line)
                say(f"  of which HTTP alone (GET /baton/drain on the same connection, interleaved): "
                    f"p50 {out['http_p50_ms']:.3f} ms, p95 {gwstats.percentile(h, 95) * 1000:.3f} ms")

                rates: dict[str, list[float]] = {"direct": [], "bridge": []}
                # The client's own CPU a call on each side (this process: the SDK and its transport).
                client_cpu: dict[str, list[float]] = {"direct": [], "bridge": []}
                for side in gwbaseline.round_order(("direct", "bridge"), args.rounds):
                    c0 = time.process_time()
                    n = await closed_loop(direct if side == "direct" else via,
                                          concurrency=args.concurrency, seconds=args.round_seconds)
                    client_cpu[side].append((time.process_time() - c0) / max(n, 1) * 1e6)
                    rates[side].append(n / args.round_seconds)
                    if side == "bridge":
                        calls0 += n
                await sampler.stop()
                ratios = [b_ / d_ for b_, d_ in zip(rates["bridge"], rates["direct"])]
                out["rates"] = rates
                say(f"throughput, {args.concurrency} in flight, {args.rounds} rounds of {args.round_seconds:g} s each, "
                    f"alternating: direct {' '.join(f'{r:.0f}' for r in rates['direct'])} calls/s, "
                    f"bridge {' '.join(f'{r:.0f}' for r in rates['bridge'])} calls/s; "
                    f"bridge/direct median {statistics.median(ratios):.2f}")
                out["client_cpu_us"] = {k: statistics.median(v) for k, v in client_cpu.items()}
                say(f"  the SDK client's own CPU a call (median of rounds): over stdio {out['client_cpu_us']['direct']:.0f} us, "
                    f"over streamable HTTP {out['client_cpu_us']['bridge']:.0f} us")
            cpu = cpu_seconds(pid) - cpu0
            rss_peak, hwm = sampler.peak_kib / 1024, status_kib(pid, "VmHWM") / 1024
            out.update(rss_peak_mib=rss_peak, hwm_mib=hwm, bridge_cpu_us_per_call=cpu / max(calls0, 1) * 1e6)
            say(f"bridge RSS under load: peak VmRSS {rss_peak:.1f} MiB ({sampler.samples} samples), VmHWM {hwm:.1f} MiB; "
                f"CPU {cpu:.2f} s for {calls0} calls ({out['bridge_cpu_us_per_call']:.0f} us a call)")
            say(f"targets: added p50 <= {TARGET_ADDED_P50_MS:g} ms (SDK {sdk.added_p50:+.3f}, SDK {STATELESS} "
                f"{stateless.added_p50:+.3f}, raw {raw.added_p50:+.3f}); "
                f"RSS <= {TARGET_RSS_MIB:g} MiB (VmHWM {hwm:.1f})")
        finally:
            bridge.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stdio_bridge", description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=2000, help="latency calls of each side (1..100000)")
    p.add_argument("--rounds", type=int, default=3, help="throughput rounds of each side (1..20)")
    p.add_argument("--round-seconds", type=float, default=5.0, help="one throughput round (0.1..60)")
    p.add_argument("--concurrency", type=int, default=8, help="SDK calls in flight in a throughput round (1..256)")
    p.add_argument("--max-seconds", type=float, default=600.0, help="the whole run's bound (10..3600)")
    args = p.parse_args(argv)
    for name, value, lo, hi in (("--calls", args.calls, 1, 100000), ("--rounds", args.rounds, 1, 20),
                                ("--round-seconds", args.round_seconds, 0.1, 60),
                                ("--concurrency", args.concurrency, 1, 256), ("--max-seconds", args.max_seconds, 10, 3600)):
        if not lo <= value <= hi:
            p.error(f"{name} must be in {lo}..{hi}, got {value}")

    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {text}", flush=True)

    async def bounded() -> dict[str, Any]:
        async with asyncio.timeout(args.max_seconds):
            return await run(args, say)

    asyncio.run(bounded())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
