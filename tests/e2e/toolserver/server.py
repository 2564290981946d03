"""A tool server for the kind e2e tests: a real process whose drain Baton can observe.

    python3 server.py                 serve on :8080
    python3 server.py get URL         one GET, print the status and body, exit 0 on 200 (a client
                                      pod uses it to reach the tool through its Service); it
                                      first waits, bounded, until a TCP connection opens, since
                                      kube-proxy may program a new Service's rules after the pod
                                      starts, and only then sends the request, once

Endpoints: GET /healthz (readiness: 200 until SIGTERM), GET /work?seconds=S (answers after S
seconds, at most 300: the long request a client keeps in flight), GET /idle (the drain probe:
503 while any /work is in flight, 200 when none is).
SIGTERM: stop answering /healthz, finish the requests in flight, exit 0; with
IGNORE_SIGTERM=1 it is ignored (the kubelet's SIGKILL at the end of the grace period ends it).
Python as PID 1 gets no default SIGTERM action, hence the explicit handler. Each event is
logged on stdout as one line with a UTC timestamp.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

GENERATION = os.environ.get("VERSION", "?")
lock = threading.Lock()
in_flight = 0
terminating = threading.Event()


def log(msg: str) -> None:
    print(f"{datetime.now(timezone.utc).isoformat()} {msg}", flush=True)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: object) -> None:  # requests are logged below
        pass

    def answer(self, code: int, body: str) -> None:
        data = (body + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        global in_flight
        url = urlparse(self.path)
        if url.path == "/healthz":
            self.answer(503 if terminating.is_set() else 200, "terminating" if terminating.is_set() else "ok")
        elif url.path == "/idle":
            with lock:
                busy = in_flight
            self.answer(503 if busy else 200, f"in-flight {busy}")
            log(f"idle {503 if busy else 200} in-flight={busy}")
        elif url.path == "/work":
            seconds = min(float(parse_qs(url.query).get("seconds", ["1"])[0]), 300.0)
            with lock:
                in_flight += 1
            log(f"work start seconds={seconds} version={GENERATION}")
            try:
                time.sleep(seconds)
                self.answer(200, f"done version={GENERATION} seconds={seconds}")
                log(f"work done seconds={seconds} version={GENERATION}")
            finally:
                with lock:
                    in_flight -= 1
        else:
            self.answer(404, "not found")


def serve() -> int:
    server = ThreadingHTTPServer(("0.0.0.0", 8080), Handler)
    server.daemon_threads = True
    if os.environ.get("IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, lambda *_: log("SIGTERM ignored"))
    else:
        signal.signal(signal.SIGTERM, lambda *_: terminating.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"serving version={GENERATION}")
    while not terminating.wait(3600):
        pass
    log("SIGTERM: finishing the requests in flight")
    for _ in range(3000):  # bounded: 300 s, the longest /work
        with lock:
            if in_flight == 0:
                break
        time.sleep(0.1)
    server.shutdown()
    log("exit")
    return 0


CONNECT_ATTEMPTS = 120  # half a second apart: at most about a minute for the Service's rules


def reachable(host: str, port: int) -> bool:
    """Open and close a TCP connection until one opens (bounded): a refused or unrouted connect
    means the request was never sent, so waiting here cannot send it twice."""
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            with socket.create_connection((host, port), timeout=2):
                log(f"connect {host}:{port} open after {attempt} attempt(s)")
                return True
        except OSError as e:
            if attempt == 1 or attempt % 10 == 0:
                log(f"connect {host}:{port} attempt {attempt}: {e}")
        time.sleep(0.5)
    return False


def get(url: str) -> int:
    target = urlparse(url)
    if not reachable(target.hostname or "", target.port or 80):
        log(f"failed: {target.netloc} unreachable after {CONNECT_ATTEMPTS} attempts")
        return 1
    log(f"GET {url}")
    try:
        with urllib.request.urlopen(url, timeout=300) as r:
            log(f"answer {r.status} {r.read().decode().strip()}")
            return 0 if r.status == 200 else 1
    except urllib.error.HTTPError as e:
        log(f"answer {e.code}")
    except OSError as e:
        log(f"failed {e}")
    return 1


if __name__ == "__main__":
    sys.exit(get(sys.argv[2]) if sys.argv[1:2] == ["get"] else serve())
