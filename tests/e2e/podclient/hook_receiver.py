"""A tool container that receives Baton's hooks, for tests/e2e/test_gateway_mcp.py (run by the MCP
image's Python, this file mounted from a ConfigMap): standard library only.

    python3 hook_receiver.py          serve on :8080

At start it logs what the downward API gave it: {"ev": "start", "env": {BATON_GENERATION,
BATON_FENCING_TOKEN, BATON_RUNTIME...}}. GET /healthz answers 200 (readiness). A POST to any
path is logged as {"ev": "hook", "path", "headers" (the Baton-* ones), "body", "env"} and
answered 200. One JSON line per event on stdout.
"""
from __future__ import annotations

import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENV = {k: v for k, v in os.environ.items() if k.startswith("BATON_")}


def emit(**kw: object) -> None:
    print(json.dumps({"t": round(time.time(), 3), **kw}), flush=True)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: object) -> None:  # events are logged as JSON instead
        pass

    def answer(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.answer(200 if self.path == "/healthz" else 404, "ok")

    def do_POST(self) -> None:  # noqa: N802
        length = min(int(self.headers.get("Content-Length") or 0), 65536)
        raw = self.rfile.read(length)
        try:
            body: object = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        emit(ev="hook", path=self.path, body=body, env=ENV,
             headers={k: v for k, v in self.headers.items() if k.lower().startswith("baton-")})
        self.answer(200, "released")


if __name__ == "__main__":
    emit(ev="start", env=ENV)
    ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
