"""The Python MCP client of the kind e2e gateway test (tests/e2e/test_gateway_mcp.py): the official
MCP Python SDK's `Client` over streamable HTTP, in a pod, calling a runtime through its Service name.

    python3 /srv/client.py --url http://<runtime>.<ns>.svc/mcp --ws ws://<runtime>.<ns>.svc/ws \
        --final v6

Both protocol eras the SDK speaks, chosen as its `Client(mode=...)` documents: "2026-07-28"
adopts the stateless per-request revision (no handshake, no session); "legacy" runs the
initialize handshake (2025-11-25 against this server, an `Mcp-Session-Id`).
For each era, at once, in ONE `Client` kept for the whole run, as a long-lived agent keeps it:
no reconnect and no new session of our own (a failed call is counted, and the next call goes on
the same session: what the SDK does after a failure is what an agent gets);
- the session lists tools first (as agents do), then calls `fast` every --interval seconds;
- once every era has --warm answered calls: one `slow` call (--slow seconds) on the same session,
  and one WebSocket to /ws held open, echoing a message every 0.5 s, for --slow + --hold
  seconds, then closed normally.
It stops once every era has had --after calls answered by the version --final (the last
generation the test makes) and its slow call ended, or after --max-seconds. Every event is one JSON
line on stdout; the last is {"ev": "summary", ...}. Exit code 0 whenever the summary is printed:
the test judges it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
import websockets
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

MODES = {"2026-07-28": "2026-07-28", "2025-11-25": "legacy"}


def describe(e: BaseException) -> str:
    """The innermost error: the SDK's transport raises through anyio task groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"[:200]


def emit(**kw: Any) -> None:
    print(json.dumps({"t": round(time.time(), 3), **kw}), flush=True)


def version_number(v: str) -> int:
    """"v3" -> 3: the order of the generations that answered."""
    return int(v.removeprefix("v"))


@dataclass
class Era:
    name: str
    ok: int = 0
    failed: int = 0
    sessions: int = 0                      # Clients opened: 1 for the whole run
    session_ids: set[str] = field(default_factory=set)    # Mcp-Session-Id values answered
    final: int = 0                         # answered by the --final version
    versions: dict[str, int] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)       # versions in the order answered (runs)
    monotonic: bool = True                 # no answer from an older version than one before it
    errors: list[str] = field(default_factory=list)
    http: dict[str, int] = field(default_factory=dict)   # "GET 404 UnknownSession" -> count
    max_call_seconds: float = 0.0
    lost_seconds: float = 0.0              # from a failed call to the next answered one
    slow: dict[str, Any] = field(default_factory=dict)
    warm: asyncio.Event = field(default_factory=asyncio.Event)

    def answered(self, v: str) -> None:
        self.ok += 1
        self.versions[v] = self.versions.get(v, 0) + 1
        if self.order and version_number(v) < version_number(self.order[-1]):
            self.monotonic = False
        if not self.order or self.order[-1] != v:
            self.order.append(v)


def http_client(era: Era) -> httpx2.AsyncClient:
    hc = create_mcp_http_client()

    async def on_response(resp: httpx2.Response) -> None:
        sid = resp.headers.get("mcp-session-id")
        if sid:
            era.session_ids.add(sid)
        if resp.status_code >= 300:
            key = f"{resp.request.method} {resp.status_code} {resp.headers.get('baton-reason', '-')}"
            era.http[key] = era.http.get(key, 0) + 1
            emit(ev="http", era=era.name, method=resp.request.method, status=resp.status_code,
                 reason=resp.headers.get("baton-reason"), generation=resp.headers.get("baton-generation"))

    hc.event_hooks = {"request": [], "response": [on_response]}
    return hc


def text_of(result: Any) -> str:
    if getattr(result, "is_error", False):
        raise RuntimeError(f"tool error: {result.content!r}")
    return str(result.content[0].text)


async def fast_loop(a: argparse.Namespace, era: Era, c: Client, stop: asyncio.Event) -> None:
    failed_at: float | None = None
    while not stop.is_set():
        t0 = time.time()
        try:
            v = text_of(await asyncio.wait_for(c.call_tool("fast", {}), a.call_timeout))
        except Exception as e:  # noqa: BLE001 - every failure is counted and shown; same session on
            era.failed += 1
            era.errors.append(describe(e))
            failed_at = failed_at or t0
            emit(ev="call", era=era.name, tool="fast", ok=False, t0=round(t0, 3),
                 seconds=round(time.time() - t0, 3), error=era.errors[-1])
            await asyncio.sleep(a.interval)
            continue
        dt = time.time() - t0
        era.answered(v)
        era.max_call_seconds = max(era.max_call_seconds, dt)
        if era.ok >= a.warm:
            era.warm.set()
        if v == a.final:
            era.final += 1
        if failed_at is not None:
            era.lost_seconds += time.time() - failed_at
            failed_at = None
        emit(ev="call", era=era.name, tool="fast", ok=True, v=v, t0=round(t0, 3), seconds=round(dt, 3))
        if era.final >= a.after:
            return
        await asyncio.sleep(a.interval)


async def slow_call(a: argparse.Namespace, era: Era, c: Client, start: asyncio.Event) -> None:
    await start.wait()
    t0 = time.time()
    emit(ev="slow-start", era=era.name)
    try:
        v = text_of(await asyncio.wait_for(c.call_tool("slow", {"seconds": a.slow}),
                                           a.slow + a.call_timeout))
        era.slow = {"ok": True, "v": v, "t0": round(t0, 3), "t1": round(time.time(), 3)}
    except Exception as e:  # noqa: BLE001
        era.slow = {"ok": False, "error": describe(e), "t0": round(t0, 3), "t1": round(time.time(), 3)}
    emit(ev="slow-end", era=era.name, **era.slow)


async def run_era(a: argparse.Namespace, era: Era, start_slow: asyncio.Event, stop: asyncio.Event) -> None:
    """One Client for the era's whole run: its fast loop and its slow call share the session."""
    try:
        async with http_client(era) as hc, Client(streamable_http_client(a.url, http_client=hc),
                                                  mode=MODES[era.name]) as c:
            era.sessions += 1
            # What an agent does first. Also needed: `call_tool` validates a result against the
            # tool's output schema and lists tools after a call to a tool not listed yet.
            await asyncio.wait_for(c.list_tools(), a.call_timeout)
            emit(ev="session", era=era.name, n=era.sessions)
            await asyncio.gather(fast_loop(a, era, c, stop), slow_call(a, era, c, start_slow))
    except Exception as e:  # noqa: BLE001 - the session itself failed (the transport's task group)
        era.failed += 1
        era.errors.append(describe(e))
        emit(ev="session-error", era=era.name, error=era.errors[-1])
        era.warm.set()  # let the others go on


async def hold_ws(a: argparse.Namespace, out: dict[str, Any], start: asyncio.Event) -> None:
    """Open beside the slow calls, closed --hold seconds after they end on the server (--slow
    after it opened): on its own clock, so that nothing it waits for depends on the handoff."""
    await start.wait()
    echoes = 0
    try:
        async with websockets.connect(a.ws, open_timeout=a.call_timeout, max_size=2**16) as ws:
            out["v"] = str(await asyncio.wait_for(ws.recv(), a.call_timeout))
            out["opened"] = round(time.time(), 3)
            emit(ev="ws-open", v=out["v"])
            end = time.time() + a.slow + a.hold
            while time.time() < end:
                await ws.send(str(echoes))
                if await asyncio.wait_for(ws.recv(), 10) != str(echoes):
                    raise RuntimeError("echo mismatch")
                echoes += 1
                await asyncio.sleep(0.5)
            out["closing"] = round(time.time(), 3)
        out.update(ok=True, closed=round(time.time(), 3), echoes=echoes)
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error=describe(e), echoes=echoes, closed=round(time.time(), 3))
    emit(ev="ws-end", **out)


async def main(a: argparse.Namespace) -> None:
    eras = [Era(name) for name in MODES]
    stop = asyncio.Event()
    start_slow = asyncio.Event()
    ws: dict[str, Any] = {}
    tasks = [asyncio.create_task(run_era(a, e, start_slow, stop)) for e in eras]
    tasks.append(asyncio.create_task(hold_ws(a, ws, start_slow)))

    async def warm_then_slow() -> None:
        for e in eras:
            await e.warm.wait()
        start_slow.set()

    warming = asyncio.create_task(warm_then_slow())
    _, pending = await asyncio.wait(tasks, timeout=a.max_seconds)
    warming.cancel()
    timed_out = bool(pending)
    if pending:
        stop.set()
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=10)
    emit(ev="summary", timed_out=timed_out, ws=ws, eras={e.name: {
        "ok": e.ok, "failed": e.failed, "sessions": e.sessions, "session_ids": len(e.session_ids),
        "session_id_prefix": sorted(s[:4] for s in e.session_ids), "versions": e.versions,
        "order": e.order, "monotonic": e.monotonic, "errors": e.errors, "http": e.http,
        "max_call_seconds": round(e.max_call_seconds, 3), "lost_seconds": round(e.lost_seconds, 3),
        "slow": e.slow} for e in eras})


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--ws", required=True)
    ap.add_argument("--final", required=True, help="the version of the last generation (v6)")
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--slow", type=float, default=10.0)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--after", type=int, default=5)
    ap.add_argument("--call-timeout", type=float, default=180.0)
    ap.add_argument("--max-seconds", type=float, default=400.0)
    asyncio.run(main(ap.parse_args()))
