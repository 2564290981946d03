"""The gateway in tests: ``GatewayProcess`` (``python -m baton gateway`` with its own loopback
ports, killed by pid), ``call`` (one HTTP call to it with a chosen Host header), and
``ToolFleet``: each generation's tool played by a small HTTP server bound on its kwok-loop pod IP.

The tool (``ToolServer``) answers every POST with a JSON-RPC result naming the generation it
plays ({"gen": g}); the JSON-RPC method ``slow`` sleeps ``params.seconds`` first; ``initialize``
issues an ``Mcp-Session-Id``; ``GET /sse`` streams ``count`` server-sent events ``gap`` seconds
apart. Every request is recorded. Loopback only, bounded (threads are daemons, each request at
most 60 s, ``stop()`` closes everything).

Opt-in (``McpSessions``, passed to ToolServer or ToolFleet): the tool keeps MCP sessions in its
memory as a handshake-era (2025-11-25) server does, so a new pod knows none of N's
(``ToolServer`` docstring: what it answers).
"""
from __future__ import annotations

import enum
import http.client
import json
import os
import select
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
from harness import watchlog
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


class InitializeFailure(str, enum.Enum):
    """How a session-keeping tool fails an `initialize` (McpSessions.fail_initialize)."""

    HTTP_500 = "http-500"  # 500 with a JSON-RPC error body
    JSONRPC_ERROR = "jsonrpc-error"  # 200 with a JSON-RPC error (no session issued)


@dataclass
class McpSessions:
    """The opt-in session mode of ToolServer: one object a test shares with every server of a
    fleet and may change while they run (read at each request).

    `sse`: answer `initialize` as `text/event-stream` (one `event: message` with the JSON-RPC
    answer, CRLF line ends, then the stream ends), as the official Python SDK's server does by
    default. `fail_initialize`: every `initialize` fails that way (no session issued)."""

    sse: bool = False
    fail_initialize: InitializeFailure | None = None


SESSION_NOT_FOUND = -32001  # the JSON-RPC error code of the 404 for an unknown session


@dataclass
class Stateless:
    """The opt-in 2026-07-28 mode of ToolServer (set `ToolServer.stateless` or `ToolFleet.stateless`;
    read at each request). `tools/list` answers a result with `ttlMs` = `ttl_ms` (as JSON, or as
    one SSE event with `list_sse`). `subscriptions/listen` answers an SSE stream as the official
    Python SDK's server does: the acknowledgement first (stamped with the listen id), then a
    `: ping` comment every `ping_seconds` until the client leaves (recorded "listen_end":
    "client") or `listen_seconds` pass (then the listen's result, the graceful end: "server")."""

    ttl_ms: int = 3_600_000
    list_sse: bool = False
    ping_seconds: float = 0.5
    listen_seconds: float = 60.0


SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def sse_event(doc: Any) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(doc).encode() + b"\r\n\r\n"


class ToolServer:
    """One generation's tool on `ip`:`port` (loopback only). `stateless` (Stateless): opt-in.

    With `sessions` (McpSessions) it keeps MCP sessions as a 2025-11-25 server does, in this
    server's memory only (a new pod knows none of another's): POST `initialize` answers a result
    (protocolVersion, capabilities, serverInfo) with a new `Mcp-Session-Id` ("g<gen>-<hex>");
    every other POST, GET and DELETE must carry a live one: none -> 400, unknown -> 404 (both
    with a JSON-RPC error body); a notification (no `id`) -> 202; DELETE ends the session (200)
    and records it in `ended`; other answers echo the session id and carry it in the result
    ({"gen", "ip", "session"}). Each recorded request also has "session" (the id it carried),
    "rpc" (the JSON-RPC method), "status" and "issued" (the id an initialize issued)."""

    stateless: Stateless | None = None

    def __init__(self, ip: str, port: int, generation: int, *, uid: str = "",
                 sessions: McpSessions | None = None) -> None:
        self.ip, self.port, self.generation, self.uid = assert_loopback(ip), port, generation, uid
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.sessions = sessions
        self.live: set[str] = set()  # the sessions this process remembers
        self.issued: list[str] = []  # every session id it issued, in order
        self.ended: list[str] = []  # the sessions a DELETE ended, in order
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
                if tool.sessions is not None:
                    try:
                        msg = json.loads(body) if body else {}
                    except ValueError:
                        msg = {}
                    entry.update(session=self.headers.get("Mcp-Session-Id"),
                                 rpc=msg.get("method") if isinstance(msg, dict) else None, status=None, issued=None)
                with tool.lock:
                    tool.requests.append(entry)
                return entry

            def _answer(self, entry: dict[str, Any], status: int, doc: Any, *, session: str | None = None,
                        sse: bool = False) -> None:
                """One whole answer (JSON, or one SSE event on a chunked stream that then ends);
                `doc` None: no body."""
                with tool.lock:
                    entry["status"] = status
                self.send_response(status)
                if session is not None:
                    self.send_header("Mcp-Session-Id", session)
                if doc is None:
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if sse:
                    event = b"event: message\r\ndata: " + json.dumps(doc).encode() + b"\r\n\r\n"
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
                    return
                out = json.dumps(doc).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def _session_of(self, entry: dict[str, Any], rid: Any) -> str | None:
                """The live session the request carries, or None once it was answered 400/404."""
                sid = self.headers.get("Mcp-Session-Id")
                if not sid:
                    self._answer(entry, 400, {"jsonrpc": "2.0", "id": rid, "error": {
                        "code": -32600, "message": "Bad Request: Mcp-Session-Id header is required"}})
                    return None
                with tool.lock:
                    known = sid in tool.live
                if not known:
                    self._answer(entry, 404, {"jsonrpc": "2.0", "id": rid, "error": {
                        "code": SESSION_NOT_FOUND, "message": "Session not found"}})
                    return None
                return sid

            def _session_post(self, entry: dict[str, Any], msg: Any, mode: McpSessions) -> None:
                msg = msg if isinstance(msg, dict) else {}
                rid, gen = msg.get("id"), tool.generation
                if msg.get("method") == "initialize":
                    failure = mode.fail_initialize
                    if failure is InitializeFailure.HTTP_500:
                        self._answer(entry, 500, {"jsonrpc": "2.0", "id": rid, "error": {
                            "code": -32603, "message": f"initialize failed on generation {gen} (test tool)"}})
                        return
                    if failure is InitializeFailure.JSONRPC_ERROR:
                        self._answer(entry, 200, {"jsonrpc": "2.0", "id": rid, "error": {
                            "code": -32602, "message": f"unsupported protocol version (generation {gen}, test tool)"}},
                            sse=mode.sse)
                        return
                    new_sid = f"g{gen}-{uuid.uuid4().hex}"
                    with tool.lock:
                        tool.live.add(new_sid)
                        tool.issued.append(new_sid)
                        entry["issued"] = new_sid
                    params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
                    result = {"protocolVersion": params.get("protocolVersion") or "2025-11-25",
                              "capabilities": {"tools": {"listChanged": False}},
                              "serverInfo": {"name": "baton-test-tool", "version": str(gen)}}
                    self._answer(entry, 200, {"jsonrpc": "2.0", "id": rid, "result": result}, session=new_sid, sse=mode.sse)
                    return
                sid = self._session_of(entry, rid)
                if sid is None:
                    return
                if "id" not in msg:  # a notification (notifications/initialized among them) or a response
                    self._answer(entry, 202, None, session=sid)
                    return
                if msg.get("method") == "slow":
                    time.sleep(min(30.0, float((msg.get("params") or {}).get("seconds", 1))))
                self._answer(entry, 200, {"jsonrpc": "2.0", "id": rid, "result": {"gen": gen, "ip": tool.ip, "session": sid}},
                             session=sid)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _stateless_post(self, entry: dict[str, Any], msg: Any, mode: Stateless) -> bool:
                """A `tools/list` or `subscriptions/listen` answered (True), else False."""
                msg = msg if isinstance(msg, dict) else {}
                rid, method = msg.get("id"), msg.get("method")
                if method == "tools/list":
                    doc = {"jsonrpc": "2.0", "id": rid, "result": {
                        "ttlMs": mode.ttl_ms, "cacheScope": "private", "resultType": "complete",
                        "tools": [{"name": f"g{tool.generation}", "inputSchema": {"type": "object"}}]}}
                    if mode.list_sse:
                        self.send_response(200)
                        self.send_header("Content-Type", "text/event-stream")
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        self._chunk(sse_event(doc))
                        self.wfile.write(b"0\r\n\r\n")
                        return True
                    out = json.dumps(doc).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    return True
                if method != "subscriptions/listen":
                    return False
                meta = {SUBSCRIPTION_ID: rid}
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                notifications = (msg.get("params") or {}).get("notifications") or {}
                deadline = time.monotonic() + min(60.0, mode.listen_seconds)
                try:
                    self._chunk(sse_event({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                                           "params": {"notifications": notifications, "_meta": meta}}))
                    while time.monotonic() < deadline:
                        time.sleep(mode.ping_seconds)
                        self._chunk(b": ping\r\n\r\n")
                    self._chunk(sse_event({"jsonrpc": "2.0", "id": rid, "result": {"_meta": meta, "resultType": "complete"}}))
                    self.wfile.write(b"0\r\n\r\n")
                    end = "server"
                except OSError:
                    end = "client"
                    self.close_connection = True
                with tool.lock:
                    entry.update(listen_end=end, ended_at=time.monotonic())
                return True

            def do_POST(self) -> None:
                body = self._body()
                entry = self._record(body)
                try:
                    msg = json.loads(body)
                except ValueError:
                    msg = {}
                stateless = tool.stateless
                if stateless is not None and self._stateless_post(entry, msg, stateless):
                    return
                mode = tool.sessions
                if mode is not None:
                    self._session_post(entry, msg, mode)
                    return
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

            def do_DELETE(self) -> None:
                if tool.sessions is None:
                    self.send_error(501, "Unsupported method ('DELETE')")  # as without this method
                    return
                entry = self._record(self._body())
                sid = self._session_of(entry, None)
                if sid is None:
                    return
                with tool.lock:
                    tool.live.discard(sid)
                    tool.ended.append(sid)
                self._answer(entry, 200, None)

            def do_GET(self) -> None:
                entry = self._record(b"")
                if tool.sessions is not None and self._session_of(entry, None) is None:
                    return
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
                    if self._closed_by_peer(gap):
                        return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _closed_by_peer(self, seconds: float) -> bool:
                """Wait `seconds`, or less if the client closes the connection (True then): a
                stream whose reader went ends at once, not at its next write (up to two gaps
                later: the first write after the close still succeeds), which tests wait for."""
                deadline = time.monotonic() + seconds
                poller = select.poll()  # not select(): a test may hold more than 1024 descriptors
                poller.register(self.connection, select.POLLIN)
                if poller.poll(seconds * 1000):
                    try:
                        if self.connection.recv(1, socket.MSG_PEEK) == b"":
                            return True
                    except OSError:
                        return True
                    time.sleep(max(0.0, deadline - time.monotonic()))  # bytes, not an end: the gap stands
                return False

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

    def seen(self, *, rpc: str | None = None, method: str | None = None) -> list[dict[str, Any]]:
        """The requests recorded so far (a copy), those of JSON-RPC method `rpc` / HTTP `method` only when given."""
        with self.lock:
            return [dict(e) for e in self.requests
                    if (rpc is None or e.get("rpc") == rpc) and (method is None or e["method"] == method)]

    def forget(self, session: str) -> None:
        """Forget a session, as a server that lost it would (its next request gets 404)."""
        with self.lock:
            self.live.discard(session)

    def stop(self) -> None:
        """Stop accepting (idempotent); requests already in, on their threads, finish."""
        if self.stopped:
            return
        self.stopped = True
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


BRIDGE_IN_POD = "/baton/baton-bridge"  # the stdio container's command[0] (baton.lifecycle.manifests)
NEVER_READY = "baton.dev/test-never-ready"  # hack/kwok/pod-never-ready.yaml


@dataclass
class StdioBridges:
    """The opt-in stdio mode of ToolFleet: a stdio runtime's pod runs the REAL baton-bridge
    (`binary`, built by tests/unit/bridge/conftest.build_bridge) as its container would, with the
    command the operator put in the pod. Files per generation g in `work_dir`: g<g>-bridge.log
    (its stdout and stderr), g<g>-termination.log, g<g>-child.jsonl (BATON_TEST_CHILD_RECORD, what
    tests/unit/bridge/stdio_child.py records)."""

    binary: Path
    work_dir: Path


class BridgePod:
    """One pod's bridge, played as a kubelet would: started with the container's command and
    args (`--listen` on the pod's IP and its port, `--termination-log` a file here) and the
    container's `env` values; Ready (the pod's NEVER_READY annotation removed, kwok then marks it
    Ready) once GET /baton/ready answers 200; on the pod's deletion SIGTERM to the bridge only, then
    waited for at most the pod's grace, SIGKILL to its process group past it (`killed_at_grace`).
    Times are time.monotonic() (the same clock the test child records)."""

    def __init__(self, mode: StdioBridges, core: client.CoreV1Api, pod: Any, ip: str) -> None:
        self.core, self.namespace, self.name = core, pod.metadata.namespace, pod.metadata.name
        self.uid, self.ip = pod.metadata.uid, assert_loopback(ip)
        self.generation = int(pod.metadata.labels["baton.dev/generation"])
        [c] = [c for c in pod.spec.containers if (c.command or [None])[0] == BRIDGE_IN_POD]
        argv = [str(mode.binary), *c.command[1:], *(c.args or [])]
        flags_end = argv.index("--")
        g = self.generation
        self.log_path = mode.work_dir / f"g{g}-bridge.log"
        self.termination_log = mode.work_dir / f"g{g}-termination.log"
        self.record_path = mode.work_dir / f"g{g}-child.jsonl"
        for i in range(1, flags_end - 1):
            if argv[i] == "--listen":
                self.port = int(argv[i + 1].rsplit(":", 1)[1])
                argv[i + 1] = f"{self.ip}:{self.port}"  # the pod's own address, not 0.0.0.0 on the host
            elif argv[i] == "--termination-log":
                argv[i + 1] = str(self.termination_log)
        self.argv, self.grace = argv, float(pod.spec.termination_grace_period_seconds or 30)
        env = {**os.environ, **{e.name: e.value or "" for e in c.env or []},
               "BATON_TEST_CHILD_RECORD": str(self.record_path)}
        self.ready_at: float | None = None
        self.sigterm_at: float | None = None
        self.exited_at: float | None = None
        self.killed_at_grace = False
        with self.log_path.open("ab") as log:
            # A session of its own: the bridge and its child are one process group, ended together
            # if a test stops early; SIGTERM goes to the bridge alone, as a kubelet's does.
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        threading.Thread(target=self._until_ready, args=(bool((pod.metadata.annotations or {}).get(NEVER_READY)),),
                         daemon=True).start()

    def _until_ready(self, annotated: bool) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None and self.sigterm_at is None:
            try:
                if self.get("/baton/ready")[0] == 200:
                    self.ready_at = time.monotonic()
                    if annotated:
                        self.core.patch_namespaced_pod(self.name, self.namespace,
                                                       {"metadata": {"annotations": {NEVER_READY: None}}})
                    return
            except OSError:
                pass
            time.sleep(0.05)

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.ip, self.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def terminate(self) -> None:
        """The pod is being deleted: SIGTERM, then wait within the grace (once; in a thread)."""
        if self.sigterm_at is not None:
            return
        self.sigterm_at = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        threading.Thread(target=self._wait_grace, daemon=True).start()

    def _wait_grace(self) -> None:
        try:
            self.proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            self.killed_at_grace = True
            self.kill()
        self.exited_at = time.monotonic()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def stop(self) -> None:
        """End the bridge and its child (whatever the test did), and the child if it outlived it."""
        self.kill()
        for event in self.child_events():
            if event.get("event") == "started":
                try:
                    os.kill(int(event["pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def child_events(self) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        return [json.loads(line) for line in self.record_path.read_text().splitlines() if line.strip()]

    def log_records(self) -> list[dict[str, Any]]:
        """The bridge's own JSON log lines (the child's stderr passes through the same file)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [json.loads(line) for line in text.splitlines()
                if line.startswith("{") and '"logger":"baton-bridge"' in line]


class ToolFleet:
    """Follows a runtime's pods (a watch in a thread) and keeps a ToolServer on each pod's IP
    playing its generation; it stops accepting once the pod is being deleted. `servers`: every
    one started. `stateless` (set before the pods start): each server's Stateless mode.

    Opt-in `stdio` (StdioBridges): a pod whose container runs the bridge gets a BridgePod (the
    real bridge on the pod's IP, `bridges`) instead of a ToolServer."""

    stateless: Stateless | None = None

    def __init__(self, api: client.ApiClient, namespace: str, runtime: str, port: int = 8080, *,
                 sessions: McpSessions | None = None, stdio: StdioBridges | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.runtime, self.port = namespace, runtime, port
        self.sessions = sessions  # every server's session mode (one object: a test may change it)
        self.stdio = stdio
        self.bridges: dict[str, BridgePod] = {}  # by pod UID
        self.by_ip: dict[str, ToolServer] = {}
        self.servers: list[ToolServer] = []
        self.lock = threading.Lock()
        self._stop = watchlog.Stopper()  # stop() ends the open watch at once, not at its timeout
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
        if self.stdio is not None and any((c.command or [None])[0] == BRIDGE_IN_POD for c in pod.spec.containers):
            self._apply_bridge(kind, pod, ip)
            return
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
            server = ToolServer(ip, self.port, int(gen_text), uid=uid, sessions=self.sessions)
            server.stateless = self.stateless
            self.by_ip[ip] = server
            self.servers.append(server)

    def _apply_bridge(self, kind: str, pod: Any, ip: str) -> None:
        """The stdio mode: one BridgePod per pod UID; the pod's deletion terminates it."""
        assert self.stdio is not None
        uid = pod.metadata.uid
        with self.lock:
            bridge = self.bridges.get(uid)
            if kind == "DELETED" or pod.metadata.deletion_timestamp:
                if bridge is not None:
                    bridge.terminate()
                return
            if bridge is None:
                self.bridges[uid] = BridgePod(self.stdio, self.core, pod, ip)

    def bridge(self, generation: int) -> BridgePod | None:
        with self.lock:
            return next((b for b in self.bridges.values() if b.generation == generation), None)

    def _run(self) -> None:
        deadline = time.monotonic() + 600  # bounded: no test here runs longer
        watched = self._stop.opening(self.core.list_namespaced_pod)
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                w = watch.Watch()
                for ev in w.stream(watched, self.namespace,
                                   label_selector=f"baton.dev/runtime={self.runtime}", timeout_seconds=5):
                    self._apply(ev["type"], ev["object"])
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception:  # a dropped watch: list and watch again
                self._stop.wait(0.2)

    def of(self, generation: int) -> ToolServer | None:
        with self.lock:
            return next((s for s in self.servers if s.generation == generation), None)

    def stop(self) -> None:
        self._stop.stop()
        self._thread.join(15)
        with self.lock:
            for s in self.servers:
                s.stop()
            self.by_ip.clear()
            for b in self.bridges.values():
                b.stop()
