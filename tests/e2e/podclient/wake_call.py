"""One call of the official MCP Python SDK's `Client` (its default mode) to an idle runtime through
the gateway, in a pod of tests/e2e/test_gateway_mcp.py (run by the MCP image's Python, this file
mounted from a ConfigMap).

    python3 wake_call.py --url http://<runtime>.<ns>.svc/mcp

The Client's first request wakes the runtime and is held until the woken generation serves.
Prints one JSON line per HTTP answer (status, Baton-Held-Ms, Baton-Generation, Baton-Reason) and
then {"ev": "result", ...}: the tool's answer and the seconds from the Client's start to it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(**kw: Any) -> None:
    print(json.dumps({"t": round(time.time(), 3), **kw}), flush=True)


def describe(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"[:300]


async def main(a: argparse.Namespace) -> None:
    hc = create_mcp_http_client()

    async def on_response(resp: httpx2.Response) -> None:
        emit(ev="http", method=resp.request.method, status=resp.status_code,
             held_ms=resp.headers.get("baton-held-ms"), generation=resp.headers.get("baton-generation"),
             reason=resp.headers.get("baton-reason"))

    hc.event_hooks = {"request": [], "response": [on_response]}
    t0 = time.time()
    try:
        async with hc, Client(streamable_http_client(a.url, http_client=hc)) as c:
            result = await asyncio.wait_for(c.call_tool(a.tool, {}), a.timeout)
            answer = str(getattr(result.content[0], "text", ""))
            emit(ev="result", ok=not result.is_error, answer=answer, seconds=round(time.time() - t0, 3))
    except Exception as e:  # noqa: BLE001 - the test judges it
        emit(ev="result", ok=False, error=describe(e), seconds=round(time.time() - t0, 3))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--tool", default="fast")
    ap.add_argument("--timeout", type=float, default=120.0)
    asyncio.run(main(ap.parse_args()))
