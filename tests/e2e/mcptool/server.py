"""The MCP tool of the kind e2e gateway test (tests/e2e/test_gateway_mcp.py): a streamable-HTTP
server built on the official MCP Python SDK (`mcp`, pinned in requirements.lock), as a new user
would write one, plus a WebSocket echo endpoint (the SDK has no WebSocket server transport).

    python3 /srv/server.py            # listens on 0.0.0.0:8080 (BIND_HOST=127.0.0.1 beside a pod)

- POST /mcp: the SDK's streamable-HTTP app in its default (stateful) mode, so it answers both
  protocol eras: handshake-era clients (2025-11-25) get an `Mcp-Session-Id` kept in this
  process's memory; 2026-07-28 requests (MCP-Protocol-Version header) take the stateless path.
  Tools: `fast` (answers at once) and `slow` (sleeps `seconds`, at most 120), both return
  "v<VERSION>" so that a client sees which generation answered.
- GET /ws: a WebSocket that sends "v<VERSION>" once, then echoes every text message.
- GET /healthz: 200 (the readiness probe).
Logs one line per slow call and per WebSocket, to stdout.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

VERSION = os.environ.get("VERSION", "0")
server = MCPServer("baton-e2e-tool")


def log(msg: str) -> None:
    print(f"{time.time():.3f} v{VERSION} {msg}", flush=True)


@server.tool()
async def fast() -> str:
    """Answers at once with this generation's version."""
    return f"v{VERSION}"


@server.tool()
async def slow(seconds: float = 10.0) -> str:
    """Sleeps `seconds` (at most 120), then answers with this generation's version."""
    log(f"slow {seconds}s start")
    await asyncio.sleep(max(0.0, min(seconds, 120.0)))
    log("slow done")
    return f"v{VERSION}"


async def healthz(_: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def ws_echo(ws: WebSocket) -> None:
    await ws.accept()
    log("ws open")
    await ws.send_text(f"v{VERSION}")
    try:
        while True:
            await ws.send_text(await ws.receive_text())
    except WebSocketDisconnect as e:
        log(f"ws closed {e.code}")


def main() -> None:
    # The Host is the runtime's Service name (through the gateway): DNS-rebinding protection
    # would refuse it, so it is off, as for any server behind a Service.
    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host="0.0.0.0")
    app.router.routes.extend([Route("/healthz", healthz), WebSocketRoute("/ws", ws_echo)])
    host = os.environ.get("BIND_HOST", "0.0.0.0")  # the pod's addresses; 127.0.0.1 beside it
    log(f"listening on {host}:8080 (python {sys.version.split()[0]})")
    uvicorn.run(app, host=host, port=8080, ws="websockets-sansio", log_level="warning",
                timeout_graceful_shutdown=5)
    log("exit")


if __name__ == "__main__":
    main()
