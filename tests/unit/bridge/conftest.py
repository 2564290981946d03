"""The bridge's Python tests: build baton-bridge once per session (static, CGO_ENABLED=0) into a
cache keyed by a digest of bridge/'s sources, then drive it as a real process on 127.0.0.1 with
a real child. `go test` for bridge/ runs in hack/test.sh (make test), not here."""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dev import wait

ROOT = pathlib.Path(__file__).resolve().parents[3]
BRIDGE_SRC = ROOT / "bridge"
CHILD = pathlib.Path(__file__).with_name("stdio_child.py")


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(BRIDGE_SRC.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")) and not path.name.endswith("_test.go"):
            digest.update(str(path.relative_to(BRIDGE_SRC)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_bridge() -> pathlib.Path:
    """The static binary, built once per digest of bridge/'s sources (also used by
    tests/integration/test_stdio_handoff.py, whose pods run it)."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("go not on PATH: the bridge's tests build bridge/ (Go 1.26, the project's pinned toolchain)")
    out = pathlib.Path.home() / ".cache" / "baton" / "bridge" / _sources_digest() / "baton-bridge"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"baton-bridge.{os.getpid()}.tmp")
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"}
        subprocess.run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."],
                       cwd=BRIDGE_SRC, env=env, check=True, timeout=300)
        tmp.replace(out)
    return out


@pytest.fixture(scope="session")
def bridge_binary() -> pathlib.Path:
    return build_bridge()


@dataclasses.dataclass
class Answer:
    status: int
    headers: dict[str, str]
    messages: list[dict[str, Any]]
    body: bytes


@dataclasses.dataclass
class Bridge:
    process: subprocess.Popen[bytes]
    port: int
    log_path: pathlib.Path
    termination_log: pathlib.Path
    record_path: pathlib.Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            if line.startswith("{") and '"logger":"baton-bridge"' in line:
                out.append(json.loads(line))
        return out

    def child_events(self) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        return [json.loads(line) for line in self.record_path.read_text().splitlines() if line]

    def connection(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path: str) -> tuple[int, bytes]:
        conn = self.connection(timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post(self, body: dict[str, Any], *, session: str | None = None, accept: str = "application/json, text/event-stream",
             headers: dict[str, str] | None = None, timeout: float = 30) -> Answer:
        conn = self.connection(timeout=timeout)
        try:
            hdrs = {"Content-Type": "application/json", "Accept": accept, **(headers or {})}
            if session is not None:
                hdrs["Mcp-Session-Id"] = session
            conn.request("POST", "/mcp", body=json.dumps(body), headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, parse_messages(resp.getheader("Content-Type", ""), raw), raw)
        finally:
            conn.close()

    def initialize(self, *, version: str = "2025-11-25") -> str:
        answer = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        assert answer.status == 200, answer.body
        assert answer.messages[0]["result"]["protocolVersion"] == version
        session = answer.headers["mcp-session-id"]
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session).status == 202
        return session

    def call(self, session: str, request_id: object, tool: str, arguments: dict[str, Any] | None = None, *,
             meta: dict[str, Any] | None = None, accept: str = "application/json, text/event-stream", timeout: float = 30) -> Answer:
        params: dict[str, Any] = {"name": tool, "arguments": arguments or {}}
        if meta is not None:
            params["_meta"] = meta
        return self.post({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
                         session=session, accept=accept, timeout=timeout)

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)


def parse_messages(content_type: str, raw: bytes) -> list[dict[str, Any]]:
    if content_type.startswith("application/json"):
        return [json.loads(raw)]
    if content_type.startswith("text/event-stream"):
        return [json.loads(line[len("data:"):]) for line in raw.decode().splitlines() if line.startswith("data:")]
    return []


def tool_text(answer: Answer) -> str:
    return str(answer.messages[-1]["result"]["content"][0]["text"])


class BridgeFactory:
    def __init__(self, binary: pathlib.Path, tmp_path: pathlib.Path) -> None:
        self.binary = binary
        self.tmp_path = tmp_path
        self.started: list[Bridge] = []

    def start(self, *flags: str, mode: str = "", command: list[str] | None = None, wait_ready: bool = True) -> Bridge:
        n = len(self.started)
        log_path = self.tmp_path / f"bridge-{n}.log"
        termination_log = self.tmp_path / f"termination-{n}.log"
        record_path = self.tmp_path / f"child-{n}.jsonl"
        env = {**os.environ, "BATON_TEST_CHILD_RECORD": str(record_path), "BATON_TEST_CHILD_MODE": mode}
        argv = [str(self.binary), "--listen", "127.0.0.1:0", "--termination-log", str(termination_log), *flags,
                "--", *(command or [sys.executable, str(CHILD)])]
        with log_path.open("wb") as log:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)

        def listening() -> int | None:
            for line in log_path.read_text(errors="replace").splitlines():
                if '"msg":"listening"' in line:
                    return int(json.loads(line)["listen"].rsplit(":", 1)[1])
            return None

        bridge = Bridge(process, 0, log_path, termination_log, record_path)
        self.started.append(bridge)
        bridge.port = wait.wait_for(listening, timeout=15, interval=0.02, what="the bridge's listening log line")
        if wait_ready:
            wait.wait_for(lambda: bridge.get("/baton/ready")[0] == 200, timeout=20, interval=0.05, what="/baton/ready 200")
        return bridge

    def stop_all(self) -> None:
        for bridge in self.started:
            if bridge.process.poll() is None:
                bridge.process.send_signal(signal.SIGKILL)
                bridge.process.wait(timeout=10)
                # The bridge was killed before it ended its child: end that too.
                for event in bridge.child_events():
                    if event["event"] == "started":
                        try:
                            os.kill(int(event["pid"]), signal.SIGKILL)
                        except ProcessLookupError:
                            pass


@pytest.fixture
def bridges(bridge_binary: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[BridgeFactory]:
    factory = BridgeFactory(bridge_binary, tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()
