"""The handshake-era MCP client of bench/gateway.py (issue 42), its pure parts (no I/O, unit-tested
in tests/unit/bench): the messages a 2025-11-25 client sends, how one answer is judged, the tool's
sessions as a handshake-era server keeps them (in the pod's memory: an unknown id is a 404), and
which calls of a session were re-bound (the first one answered by each new generation).

The client initializes once through the gateway and keeps that one session (the id the gateway
gives) for the whole run, as the official SDKs do: no re-initialize after an error.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import uuid
from typing import Any, Callable

from bench import gwstats

PROTOCOL_VERSION = "2025-11-25"
SESSION_HEADER = "Mcp-Session-Id"
# Sessions one pod's tool keeps at most (the bench makes two per pod): a bound, not a limit it meets.
SESSIONS_PER_POD = 1024
# JSON-RPC codes the tool answers with (the MCP SDKs' own): bad request, unknown session.
INVALID_REQUEST = -32600
SESSION_NOT_FOUND = -32001


def initialize(rid: Any) -> bytes:
    """The client's `initialize` (2025-11-25): the gateway keeps it to replay on the next generation."""
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize",
                       "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                  "clientInfo": {"name": "baton-bench-session", "version": "1"}}}).encode()


def initialized() -> bytes:
    """The notification that ends the handshake (no id: the answer is 202, no body)."""
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()


def tool_call(rid: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "hello"}}}).encode()


def cause_of_answer(status: int, reason: str | None, body: bytes) -> str:
    """'' for a good answer; else why not: a non-2xx status (with its Baton-Reason), or a 2xx whose
    body is a JSON-RPC error (the server refused the call inside a 200) or not JSON-RPC at all.
    A 202 with no body is the answer to a notification."""
    cause = gwstats.cause_of_status(status, reason)
    if cause:
        return cause
    if status == 202 and not body.strip():
        return ""
    try:
        msg = json.loads(body)
    except ValueError:
        return "not JSON-RPC"
    if not isinstance(msg, dict):
        return "not JSON-RPC"
    error = msg.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
        return f"JSON-RPC error {code}: {message[:60]}"
    return "" if "result" in msg else "not JSON-RPC"


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the tool answers: a status, a body, and the session id to set (on an initialize)."""

    status: int
    body: bytes
    session: str | None = None


def _error(status: int, rid: Any, code: int, message: str) -> Answer:
    return Answer(status, json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}).encode())


class SessionTool:
    """A handshake-era (2025-11-25) MCP server's sessions: kept in the memory of each pod (one map
    per pod IP, dropped when that pod's tool stops, as a process's memory is at exit), so a session
    id another pod issued is unknown here. `initialize` without a session issues one (Mcp-Session-Id
    on the answer); `notifications/initialized` on a known session: 202; a request on a session
    whose handshake has not ended: a JSON-RPC error (as the official Python SDK's server refuses
    it), so a gateway that replays `initialize` without `notifications/initialized` is seen; an
    unknown id: 404; no id: 400; DELETE ends a session. Counts what it saw (`counts`)."""

    def __init__(self, *, new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self.new_id = new_id
        self.sessions: dict[str, collections.OrderedDict[str, bool]] = {}  # pod IP -> id -> initialized
        self.counts: collections.Counter[str] = collections.Counter()

    def forget(self, ip: str) -> None:
        """The pod's tool stopped: its sessions are gone with it."""
        self.sessions.pop(ip, None)

    def post(self, *, ip: str, session: str | None, body: bytes) -> Answer:
        try:
            msg = json.loads(body)
        except ValueError:
            msg = None
        if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
            self.counts["not JSON-RPC"] += 1
            return _error(400, None, INVALID_REQUEST, "Bad Request: not a JSON-RPC message")
        method, rid = msg["method"], msg.get("id")
        mine = self.sessions.setdefault(ip, collections.OrderedDict())
        if method == "initialize" and not session:
            sid = self.new_id()
            mine[sid] = False
            while len(mine) > SESSIONS_PER_POD:
                mine.popitem(last=False)
            self.counts["initialize"] += 1
            result = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}},
                      "serverInfo": {"name": "bench-tool", "version": "1"}}
            return Answer(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode(), sid)
        if not session:
            self.counts["no session"] += 1
            return _error(400, rid, INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required")
        if session not in mine:
            self.counts["unknown session"] += 1
            return _error(404, rid, SESSION_NOT_FOUND, "Session not found")
        if method == "notifications/initialized":
            mine[session] = True
            self.counts["initialized"] += 1
            return Answer(202, b"")
        if "id" not in msg:  # another notification
            self.counts["notification"] += 1
            return Answer(202, b"")
        if not mine[session]:
            self.counts["before initialized"] += 1
            return _error(200, rid, INVALID_REQUEST, "Received request before initialization was complete")
        self.counts["call"] += 1
        return Answer(200, json.dumps({"jsonrpc": "2.0", "id": rid,
                                       "result": {"content": [{"type": "text", "text": "hello"}]}}).encode())

    def delete(self, *, ip: str, session: str | None) -> Answer:
        mine = self.sessions.get(ip, collections.OrderedDict())
        if not session or session not in mine:
            self.counts["delete unknown"] += 1
            return Answer(404 if session else 400, b"")
        del mine[session]
        self.counts["delete"] += 1
        return Answer(200, b"")


@dataclasses.dataclass(frozen=True)
class SessionCall:
    """One call of the session: when it started (monotonic seconds), how long it took, why it
    failed ('' = ok), and the generation that answered (Baton-Generation; None when absent)."""

    at: float
    seconds: float
    cause: str = ""
    generation: int | None = None

    @property
    def ok(self) -> bool:
        return not self.cause


def rebound(calls: list[SessionCall], *, first_generation: int | None) -> list[int]:
    """The indices of the re-bound calls: each answered call (in order) whose generation differs
    from that of the answer before it (the initialize's, `first_generation`, for the first). The
    gateway replays the handshake on the new generation for exactly that call (or for a call held
    with it), so it carries the added latency of the re-bind."""
    out: list[int] = []
    last = first_generation
    for i, c in enumerate(calls):
        if not c.ok or c.generation is None:
            continue
        if c.generation != last:
            out.append(i)
        last = c.generation
    return out


@dataclasses.dataclass(frozen=True)
class Added:
    """The re-bound calls' latency against the session's ordinary calls (seconds)."""

    rebound: int
    ordinary: int
    rebound_p50: float
    rebound_p95: float
    ordinary_p50: float
    ordinary_p95: float

    @property
    def added_p50(self) -> float:
        return self.rebound_p50 - self.ordinary_p50

    @property
    def added_p95(self) -> float:
        return self.rebound_p95 - self.ordinary_p95


def added(calls: list[SessionCall], *, first_generation: int | None) -> Added | None:
    """p50 and p95 of the re-bound calls against the ordinary ones (the other answered calls);
    None when either kind is missing (nothing to compare)."""
    idx = set(rebound(calls, first_generation=first_generation))
    re = [c.seconds for i, c in enumerate(calls) if i in idx]
    ordinary = [c.seconds for i, c in enumerate(calls) if c.ok and i not in idx]
    if not re or not ordinary:
        return None
    return Added(len(re), len(ordinary), gwstats.percentile(re, 50), gwstats.percentile(re, 95),
                 gwstats.percentile(ordinary, 50), gwstats.percentile(ordinary, 95))
