"""The MCP client of the kind e2e gateway test (tests/e2e/test_gateway_mcp.py): the official MCP
Python SDK's `Client` over streamable HTTP, in a pod, calling a runtime through its Service name.

    python3 /srv/client.py --url http://<runtime>.<ns>.svc/mcp --ws ws://<runtime>.<ns>.svc/ws

Both protocol eras the SDK speaks, chosen as its `Client(mode=...)` documents: "2026-07-28"
adopts the stateless per-request revision (no handshake, no session); "legacy" runs the
initialize handshake (2025-11-25 against this server, an `Mcp-Session-Id` kept by the server).
For each era, at once:
- a loop of `fast` calls (one after the other, --interval apart) in one session; a handshake-era
  loop whose call fails opens a new session (initialize again), as an agent would;
- every session lists tools first (as agents do);
- once every loop has --warm answered calls: one `slow` call (--slow seconds) in its own session,
  and one WebSocket to /ws held open, echoing a message every 0.5 s, for --slow + --hold
  seconds, then closed normally.
It stops once every fast loop has had --after calls answered by another version than its first
(the next generation), or after --max-seconds. Every event is one JSON line on stdout; the last is
{"ev": "summary", ...}. Exit code 0 whenever the summary is printed: the test judges it.
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


@dataclass
class Era:
    name: str
    ok: int = 0
    failed: int = 0
    sessions: int = 0                      # opened
    first_v: str | None = None
    after: int = 0                         # answered by another version than first_v
    versions: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    http: dict[str, int] = field(default_factory=dict)   # "404 UnknownSession" -> count
    max_call_seconds: float = 0.0
    lost_seconds: float = 0.0              # from a failed call to the next answered one
    slow: dict[str, Any] = field(default_factory=dict)


def http_client(era: Era) -> httpx2.AsyncClient:
    hc = create_mcp_http_client()

    async def on_response(resp: httpx2.Response) -> None:
        if resp.status_code >= 300:
            key = f"{resp.status_code} {resp.headers.get('baton-reason', '-')}"
            era.http[key] = era.http.get(key, 0) + 1
            emit(ev="http", era=era.name, method=resp.request.method, status=resp.status_code,
                 reason=resp.headers.get("baton-reason"), generation=resp.headers.get("baton-generation"))

    hc.event_hooks = {"request": [], "response": [on_response]}
    return hc


def client(url: str, era: Era, hc: httpx2.AsyncClient) -> Client:
    return Client(streamable_http_client(url, http_client=hc), mode=MODES[era.name])


def text_of(result: Any) -> str:
    if getattr(result, "is_error", False):
        raise RuntimeError(f"tool error: {result.content!r}")
    return str(result.content[0].text)


async def list_tools(a: argparse.Namespace, c: Client) -> None:
    """What an agent does first. Also needed: `call_tool` validates a result against the tool's
    output schema and, for a tool this session has not listed, lists tools after the call to get
    it; that second request would carry the session of a generation that may be retiring."""
    await asyncio.wait_for(c.list_tools(), a.call_timeout)


async def fast_loop(a: argparse.Namespace, era: Era, stop: asyncio.Event) -> None:
    failed_at: float | None = None
    in_call: float | None = None  # when the call under way was sent

    def failure(t0: float, e: BaseException) -> None:
        nonlocal failed_at
        era.failed += 1
        era.errors.append(describe(e))
        failed_at = failed_at or t0
        emit(ev="call", era=era.name, tool="fast", ok=False, t0=round(t0, 3),
             seconds=round(time.time() - t0, 3), error=era.errors[-1])

    attempt = 0
    while not stop.is_set():
        attempt += 1
        try:
            async with http_client(era) as hc, client(a.url, era, hc) as c:
                await list_tools(a, c)
                era.sessions += 1  # opened (a handshake-era one: initialize answered)
                emit(ev="session", era=era.name, n=era.sessions)
                while not stop.is_set():
                    t0 = in_call = time.time()
                    try:
                        v = text_of(await asyncio.wait_for(c.call_tool("fast", {}), a.call_timeout))
                    except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                        in_call = None
                        failure(t0, e)
                        if era.name != "2026-07-28":
                            break  # a handshake-era session that failed: a new session
                        await asyncio.sleep(a.interval)
                        continue
                    in_call = None
                    dt = time.time() - t0
                    era.ok += 1
                    era.max_call_seconds = max(era.max_call_seconds, dt)
                    era.versions[v] = era.versions.get(v, 0) + 1
                    era.first_v = era.first_v or v
                    if v != era.first_v:
                        era.after += 1
                    if failed_at is not None:
                        era.lost_seconds += time.time() - failed_at
                        failed_at = None
                    emit(ev="call", era=era.name, tool="fast", ok=True, v=v, t0=round(t0, 3),
                         seconds=round(dt, 3))
                    if era.after >= a.after:
                        return
                    await asyncio.sleep(a.interval)
        except Exception as e:  # noqa: BLE001 - the session failed (the transport's task group)
            if in_call is not None:  # with a call under way: that call failed
                failure(in_call, e)
                in_call = None
            else:
                emit(ev="session-error", era=era.name, attempt=attempt, error=describe(e))
            await asyncio.sleep(a.interval)


async def slow_call(a: argparse.Namespace, era: Era) -> None:
    try:
        async with http_client(era) as hc, client(a.url, era, hc) as c:
            await list_tools(a, c)
            t0 = time.time()
            emit(ev="slow-start", era=era.name)
            v = text_of(await asyncio.wait_for(c.call_tool("slow", {"seconds": a.slow}),
                                               a.slow + a.call_timeout))
            era.slow = {"ok": True, "v": v, "t0": round(t0, 3), "t1": round(time.time(), 3)}
    except Exception as e:  # noqa: BLE001
        era.slow = {"ok": False, "error": describe(e), "t1": round(time.time(), 3)}
    emit(ev="slow-end", era=era.name, **era.slow)


async def hold_ws(a: argparse.Namespace, out: dict[str, Any]) -> None:
    """Open beside the slow calls, closed --hold seconds after they end on the server (--slow
    after it opened): on its own clock, so that nothing it waits for depends on the handoff."""
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
    loops = [asyncio.create_task(fast_loop(a, e, stop)) for e in eras]
    ws: dict[str, Any] = {}
    t_end = time.monotonic() + a.max_seconds
    timed_out = False
    while min(e.ok for e in eras) < a.warm:
        if time.monotonic() > t_end:
            timed_out = True
            break
        await asyncio.sleep(0.1)
    extra: list[asyncio.Task[None]] = []
    if not timed_out:
        extra = [*(asyncio.create_task(slow_call(a, e)) for e in eras), asyncio.create_task(hold_ws(a, ws))]
    _, pending = await asyncio.wait([*loops, *extra], timeout=max(1.0, t_end - time.monotonic()))
    if pending:
        timed_out = True
        stop.set()
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=10)
    emit(ev="summary", timed_out=timed_out, ws=ws, eras={e.name: {
        "ok": e.ok, "failed": e.failed, "sessions": e.sessions, "versions": e.versions,
        "errors": e.errors, "http": e.http, "max_call_seconds": round(e.max_call_seconds, 3),
        "lost_seconds": round(e.lost_seconds, 3), "slow": e.slow} for e in eras})


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--ws", required=True)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--slow", type=float, default=10.0)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--after", type=int, default=10)
    ap.add_argument("--call-timeout", type=float, default=180.0)
    ap.add_argument("--max-seconds", type=float, default=400.0)
    asyncio.run(main(ap.parse_args()))
