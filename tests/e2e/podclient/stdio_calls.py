"""The official MCP Python SDK's `Client` calling stdio runtimes through the gateway, in a pod of
tests/e2e/test_gateway_mcp.py (run by the MCP image's Python, this file mounted from a ConfigMap).

    python3 stdio_calls.py --time URL --memory URL --everything URL --final-generation 2

For each server and each of two `Client` modes ("auto", the SDK's default: its `server/discover`
probe is answered by the bridge, so it speaks the stateless 2026-07-28 era; "legacy": the
initialize handshake, one Mcp-Session-Id), ONE `Client` for the whole run (no reconnect of ours),
calling a tool every --interval seconds:
- time (`mcp-server-time`, PyPI): `get_current_time` in UTC;
- memory (`@modelcontextprotocol/server-memory`, npm): `create_entities` of one entity, then
  `read_graph` (how many entities the graph holds: the file lives on an emptyDir, so a new
  generation starts with an empty graph);
- everything (`@modelcontextprotocol/server-everything`, npm): `echo`; and, on each of its two
  Clients, once every loop has --warm answers, one `trigger-long-running-operation` of --long
  seconds with a progress callback (the long call across the handoff, in each era).
Every answer's `Baton-Generation` (the gateway's header) is recorded per loop. It stops once
every loop has --after answers from generation --final-generation or later and the long call
ended, or after --max-seconds. One JSON line per event; the last is {"ev": "summary", ...}.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# The SDK's Client modes: "auto" (its default: a `server/discover` probe, which the bridge answers
# from the child's InitializeResult: the stateless era, no session) and "legacy" (the initialize
# handshake: a session). The stdio child speaks one handshake-era session whatever the client's era
# (bridge/README.md).
MODES = ("auto", "legacy")


def describe(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"[:300]


def emit(**kw: Any) -> None:
    print(json.dumps({"t": round(time.time(), 3), **kw}), flush=True)


@dataclass
class Loop:
    server: str
    era: str
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    http: dict[str, int] = field(default_factory=dict)        # "POST 503 Idle" -> count
    session_ids: set[str] = field(default_factory=set)
    generations: dict[str, int] = field(default_factory=dict)  # Baton-Generation -> answers
    last_generation: int = 0
    late: int = 0                                             # answers from --final-generation on
    max_call_seconds: float = 0.0
    entities: list[int] = field(default_factory=list)         # memory: read_graph's count per call
    warm: asyncio.Event = field(default_factory=asyncio.Event)


def http_client(loop: Loop) -> httpx2.AsyncClient:
    hc = create_mcp_http_client()

    async def on_response(resp: httpx2.Response) -> None:
        sid = resp.headers.get("mcp-session-id")
        if sid:
            loop.session_ids.add(sid)
        gen = resp.headers.get("baton-generation")
        if gen and resp.request.method == "POST" and resp.status_code < 300:
            loop.last_generation = max(loop.last_generation, int(gen))
        if resp.status_code >= 300:
            key = f"{resp.request.method} {resp.status_code} {resp.headers.get('baton-reason', '-')}"
            loop.http[key] = loop.http.get(key, 0) + 1
            emit(ev="http", server=loop.server, era=loop.era, status=resp.status_code,
                 reason=resp.headers.get("baton-reason"), generation=gen)

    hc.event_hooks = {"request": [], "response": [on_response]}
    return hc


def text_of(result: Any) -> str:
    if getattr(result, "is_error", False):
        raise RuntimeError(f"tool error: {result.content!r}"[:300])
    return str(result.content[0].text)


async def one_call(loop: Loop, c: Client, n: int, timeout: float) -> str:
    if loop.server == "time":
        return text_of(await asyncio.wait_for(c.call_tool("get_current_time", {"timezone": "UTC"}), timeout))
    if loop.server == "memory":
        text_of(await asyncio.wait_for(c.call_tool("create_entities", {"entities": [{
            "name": f"{loop.era}-{n}", "entityType": "e2e", "observations": [f"call {n}"]}]}), timeout))
        graph = json.loads(text_of(await asyncio.wait_for(c.call_tool("read_graph", {}), timeout)))
        loop.entities.append(len(graph.get("entities", [])))
        return f"{len(graph.get('entities', []))} entities"
    return text_of(await asyncio.wait_for(c.call_tool("echo", {"message": f"{loop.era} {n}"}), timeout))


async def call_loop(a: argparse.Namespace, loop: Loop, c: Client, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        t0 = time.time()
        try:
            answer = await one_call(loop, c, n, a.call_timeout)
        except Exception as e:  # noqa: BLE001 - counted and shown; the same session goes on
            loop.failed += 1
            loop.errors.append(describe(e))
            emit(ev="call", server=loop.server, era=loop.era, ok=False, n=n, error=loop.errors[-1])
            await asyncio.sleep(a.interval)
            continue
        dt = time.time() - t0
        loop.ok += 1
        loop.max_call_seconds = max(loop.max_call_seconds, dt)
        gen = str(loop.last_generation)
        loop.generations[gen] = loop.generations.get(gen, 0) + 1
        if loop.last_generation >= a.final_generation:
            loop.late += 1
        if loop.ok >= a.warm:
            loop.warm.set()
        emit(ev="call", server=loop.server, era=loop.era, ok=True, n=n, generation=loop.last_generation,
             seconds=round(dt, 3), answer=answer[:80])
        await asyncio.sleep(a.interval)


async def long_call(a: argparse.Namespace, era: str, c: Client, start: asyncio.Event,
                    long_out: dict[str, dict[str, Any]]) -> None:
    await start.wait()
    seen: list[float] = []
    out: dict[str, Any] = {}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        emit(ev="progress", era=era, value=progress, total=total)

    t0 = time.time()
    emit(ev="long-start", era=era)
    try:
        answer = text_of(await asyncio.wait_for(c.call_tool(
            "trigger-long-running-operation", {"duration": a.long, "steps": 5},
            progress_callback=on_progress), a.long + a.call_timeout))
        out.update(ok=True, answer=answer)
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error=describe(e))
    out.update(t0=round(t0, 3), t1=round(time.time(), 3), progress=seen)
    long_out[era] = out
    emit(ev="long-end", era=era, **out)


async def run_loop(a: argparse.Namespace, loop: Loop, url: str, stop: asyncio.Event,
                   start_long: asyncio.Event | None, long_out: dict[str, dict[str, Any]]) -> None:
    try:
        async with http_client(loop) as hc, Client(streamable_http_client(url, http_client=hc),
                                                   mode=loop.era) as c:
            await asyncio.wait_for(c.list_tools(), a.call_timeout)
            emit(ev="session", server=loop.server, era=loop.era)
            tasks = [call_loop(a, loop, c, stop)]
            if start_long is not None:
                tasks.append(long_call(a, loop.era, c, start_long, long_out))
            await asyncio.gather(*tasks)
    except Exception as e:  # noqa: BLE001 - the session itself failed
        loop.failed += 1
        loop.errors.append(describe(e))
        emit(ev="session-error", server=loop.server, era=loop.era, error=loop.errors[-1])
        loop.warm.set()


async def main(a: argparse.Namespace) -> None:
    urls = {"time": a.time, "memory": a.memory, "everything": a.everything}
    loops = [Loop(server, era) for server in urls for era in MODES]
    stop, start_long = asyncio.Event(), asyncio.Event()
    long_out: dict[str, dict[str, Any]] = {}  # era -> the long call's outcome
    t_start = time.time()

    async def supervise() -> None:
        await asyncio.gather(*(lp.warm.wait() for lp in loops))
        start_long.set()
        while time.time() - t_start < a.max_seconds:
            if len(long_out) == len(MODES) and all(lp.late >= a.after for lp in loops):
                break
            await asyncio.sleep(0.2)
        stop.set()

    runs = [run_loop(a, lp, urls[lp.server], stop,
                     start_long if lp.server == "everything" else None, long_out)
            for lp in loops]
    await asyncio.gather(supervise(), *runs)
    emit(ev="summary", timed_out=time.time() - t_start >= a.max_seconds, long=long_out, loops=[{
        "server": lp.server, "era": lp.era, "ok": lp.ok, "failed": lp.failed, "errors": lp.errors[:5],
        "http": lp.http, "session_ids": sorted(hashlib.sha256(s.encode()).hexdigest()[:8] for s in lp.session_ids),
        "generations": lp.generations, "late": lp.late, "max_call_seconds": round(lp.max_call_seconds, 3),
        "entities": lp.entities} for lp in loops])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", required=True)
    ap.add_argument("--memory", required=True)
    ap.add_argument("--everything", required=True)
    ap.add_argument("--final-generation", type=int, required=True)
    ap.add_argument("--interval", type=float, default=0.3)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--long", type=float, default=10.0)
    ap.add_argument("--after", type=int, default=3)
    ap.add_argument("--call-timeout", type=float, default=120.0)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    asyncio.run(main(ap.parse_args()))
