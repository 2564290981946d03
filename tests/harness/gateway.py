"""The gateway in tests: ``GatewayProcess`` (``python -m baton gateway`` with its own loopback
ports, killed by pid), ``call`` (one HTTP call to it with a chosen Host header), and
``ToolFleet``: each generation's tool played by a small HTTP server bound on its kwok-loop pod IP.

The tool (``ToolServer``) answers every POST with a JSON-RPC result naming the generation it
plays ({"gen": g}); the JSON-RPC method ``slow`` sleeps ``params.seconds`` first; ``initialize``
issues an ``Mcp-Session-Id``; ``GET /sse`` streams ``count`` server-sent events ``gap`` seconds
apart. Every request is recorded. Loopback only, bounded (threads are daemons, each request at
most 60 s, ``stop()`` closes everything).
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client, watch

from dev.digestkey import ensure as ensure_key
from dev.ports import free_port
from dev.wait import wait_for
from harness.kwok import assert_loopback
from harness.operator import ChildProcess

ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess(ChildProcess):
    """One gateway replica; its Lease lives in `system_namespace` (the test's namespace)."""

    def __init__(self, cluster: Any, log_dir: Path, *, identity: str, namespaces: list[str], system_namespace: str,
                 env: dict[str, str] | None = None) -> None:
        self.identity = identity
        self.port, self.admin_port = free_port(), free_port()
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log_path = log_dir / f"gateway-{identity}.log"
        self.env = dict(cluster.env)
        self.env.update({
            "KUBECONFIG": cluster.kubeconfig,
            "BATON_INSTANCE_ID": identity,
            "BATON_NAMESPACES": ",".join(namespaces),
            "BATON_SYSTEM_NAMESPACE": system_namespace,
            "BATON_GATEWAY_BIND": f"127.0.0.1:{self.port}",
            "BATON_GATEWAY_ADMIN_BIND": f"127.0.0.1:{self.admin_port}",
            "BATON_METRICS_BIND": f"127.0.0.1:{self.metrics_port}",
            "BATON_HEALTH_BIND": f"127.0.0.1:{self.health_port}",
            "BATON_GATEWAY_LEASE_SECONDS": "6",
            "BATON_SHUTDOWN_GRACE_SECONDS": "10",
            # Tests only dial loopback (kwok-loop pods are 127.0.100.x).
            "BATON_GATEWAY_ALLOWED_CIDRS": "127.0.0.0/8",
            "PYTHONUNBUFFERED": "1",
            # The admin key, shared with the test's operators (harness.operator: same file).
            "BATON_GATEWAY_ADMIN_KEY_FILE": ensure_key(log_dir / "gateway-admin.key"),
        })
        self.env.update(env or {})
        self.cluster, self.system_namespace = cluster, system_namespace
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> "GatewayProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "baton", "gateway"], env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_for(self.ready, timeout=timeout, what=f"gateway {self.identity} /readyz", ignore=(OSError,))
        return self

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"gateway {self.identity} exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return r.status == 200
        except urllib.error.HTTPError:
            return False

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            head, _, value = line.rpartition(" ")
            if line.startswith("#") or head.split("{", 1)[0] != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def admin_key(self) -> str:
        return Path(self.env["BATON_GATEWAY_ADMIN_KEY_FILE"]).read_text().strip()

    def admin(self, method: str, path: str, body: Any = None, *, key: str | None = "") -> tuple[int, Any]:
        """One admin call as the operator makes it: with the admin key (`key` "": this gateway's;
        None: no Authorization header), a seal addressed to this replica's Lease unless `body`
        names one."""
        if method == "POST" and path == "/v1/seal" and isinstance(body, dict) and "lease" not in body:
            lease = client.CoordinationV1Api(self.cluster.api_client).read_namespaced_lease(
                f"baton-gateway.{self.identity}", self.system_namespace)
            meta = lease.metadata
            assert meta is not None
            body = {**body, "lease": {"name": meta.name, "uid": meta.uid}}
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key or self.admin_key()}"
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=10)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def log_tail(self, n: int = 60) -> str:
        return super().log_tail(n)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def generation(self) -> int | None:
        g = self.headers.get("baton-generation")
        return int(g) if g is not None else None


def rpc(method: str = "tools/call", rid: int | str = 1, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()


def call(port: int, host: str, *, body: bytes | None = None, method: str = "POST", path: str = "/mcp",
         headers: dict[str, str] | None = None, timeout: float = 60, address: str = "127.0.0.1") -> Reply:
    """One call to the gateway on `address` (loopback):`port` with Host `host` (a new connection each time)."""
    assert_loopback(address)
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if body is not None:
            hdrs.setdefault("Content-Length", str(len(body)))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data, time.monotonic() - t0)
    finally:
        conn.close()


def raw_call(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send `request` bytes as they are; what came back until the gateway closed or 2 s of quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        s.settimeout(2)
        out = b""
        try:
            while len(out) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out


class ToolServer:
    """One generation's tool on `ip`:`port` (loopback only)."""

    def __init__(self, ip: str, port: int, generation: int, *, uid: str = "") -> None:
        self.ip, self.port, self.generation, self.uid = assert_loopback(ip), port, generation, uid
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        tool = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while len(out) < 4 * 1024 * 1024:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                    return out
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _record(self, body: bytes) -> dict[str, Any]:
                entry = {"path": self.path, "method": self.command, "gen": tool.generation, "body": body,
                         "headers": dict(self.headers.items()), "at": time.monotonic()}
                with tool.lock:
                    tool.requests.append(entry)
                return entry

            def do_POST(self) -> None:
                body = self._body()
                entry = self._record(body)
                try:
                    msg = json.loads(body)
                except ValueError:
                    msg = {}
                gen = entry["gen"]
                if msg.get("method") == "slow":
                    time.sleep(min(30.0, float((msg.get("params") or {}).get("seconds", 1))))
                out = json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "result": {"gen": gen, "ip": tool.ip}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.send_header("Keep-Alive", "timeout=5")
                if msg.get("method") == "initialize":
                    self.send_header("Mcp-Session-Id", f"g{gen}-{uuid.uuid4().hex}")
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                entry = self._record(b"")
                q = parse_qs(urlparse(self.path).query)
                count, gap = min(20, int(q.get("count", ["3"])[0])), min(5.0, float(q.get("gap", ["0.3"])[0]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(count):
                    data = f"id: {i}\ndata: {json.dumps({'gen': entry['gen'], 'i': i, 't': time.monotonic()})}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    time.sleep(gap)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.stopped = False
        self.server = Server((self.ip, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def count(self) -> int:
        with self.lock:
            return len(self.requests)

    def stop(self) -> None:
        """Stop accepting (idempotent); requests already in, on their threads, finish."""
        if self.stopped:
            return
        self.stopped = True
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class ToolFleet:
    """Follows a runtime's pods (a watch in a thread) and keeps a ToolServer on each pod's IP
    playing its generation; it stops accepting once the pod is being deleted. `servers`: every
    one started."""

    def __init__(self, api: client.ApiClient, namespace: str, runtime: str, port: int = 8080) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.runtime, self.port = namespace, runtime, port
        self.by_ip: dict[str, ToolServer] = {}
        self.servers: list[ToolServer] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _apply(self, kind: str, pod: Any) -> None:
        """One server per pod (by UID) on its IP. A pod being deleted stops accepting (calls in
        flight finish), as a retiring tool would; a new pod on a reused IP gets a new server."""
        ip = pod.status.pod_ip if pod.status else None
        gen_text = (pod.metadata.labels or {}).get("baton.dev/generation")
        if not ip or not gen_text:
            return
        uid = pod.metadata.uid
        with self.lock:
            server = self.by_ip.get(ip)
            if server is not None and (server.uid != uid or kind == "DELETED" or pod.metadata.deletion_timestamp):
                server.stop()
                del self.by_ip[ip]
                server = None
            if kind == "DELETED" or pod.metadata.deletion_timestamp or server is not None:
                return
            if any(s.uid == uid for s in self.servers):
                return  # already retired
            server = ToolServer(ip, self.port, int(gen_text), uid=uid)
            self.by_ip[ip] = server
            self.servers.append(server)

    def _run(self) -> None:
        deadline = time.monotonic() + 600  # bounded: no test here runs longer
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                w = watch.Watch()
                for ev in w.stream(self.core.list_namespaced_pod, self.namespace,
                                   label_selector=f"baton.dev/runtime={self.runtime}", timeout_seconds=5):
                    self._apply(ev["type"], ev["object"])
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception:  # a dropped watch: list and watch again
                time.sleep(0.2)

    def of(self, generation: int) -> ToolServer | None:
        with self.lock:
            return next((s for s in self.servers if s.generation == generation), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        with self.lock:
            for s in self.servers:
                s.stop()
            self.by_ip.clear()
