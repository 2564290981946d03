"""The session mode of the harness's tool (harness.gateway.ToolServer with McpSessions), on
127.0.0.1 without a cluster: what the session tests of the gateway rely on it to answer."""
from __future__ import annotations

import json
from typing import Iterator

import pytest

from dev import ports
from harness import gateway


@pytest.fixture
def mode() -> gateway.McpSessions:
    return gateway.McpSessions()


@pytest.fixture
def tool(mode: gateway.McpSessions) -> Iterator[gateway.ToolServer]:
    server = gateway.ToolServer("127.0.0.1", ports.free_port(), 3, sessions=mode)
    yield server
    server.stop()


def _post(tool: gateway.ToolServer, body: bytes, session: str | None = None) -> gateway.Reply:
    headers = {"Accept": "application/json, text/event-stream"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return gateway.call(tool.port, "tool", body=body, headers=headers, timeout=10)


def _sse_data(body: bytes) -> object:
    """The JSON of the one `event: message` of an SSE body."""
    events = [e for e in body.decode().split("\r\n\r\n") if e.strip()]
    assert len(events) == 1, body
    lines = events[0].split("\r\n")
    assert lines[0] == "event: message", body
    assert lines[1].startswith("data: "), body
    return json.loads(lines[1][len("data: "):])


def test_a_session_lives_in_the_servers_memory_until_deleted(tool: gateway.ToolServer) -> None:
    init = _post(tool, gateway.rpc("initialize", rid=0, protocolVersion="2025-11-25", capabilities={},
                                   clientInfo={"name": "t", "version": "1"}))
    sid = init.headers["mcp-session-id"]
    assert init.status == 200 and sid.startswith("g3-")
    assert init.json()["result"]["protocolVersion"] == "2025-11-25"
    assert init.json()["result"]["serverInfo"]["version"] == "3"
    notified = _post(tool, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), sid)
    assert notified.status == 202 and notified.body == b""
    answered = _post(tool, gateway.rpc(rid=5), sid)
    assert answered.status == 200 and answered.headers["mcp-session-id"] == sid
    assert answered.json() == {"jsonrpc": "2.0", "id": 5, "result": {"gen": 3, "ip": "127.0.0.1", "session": sid}}
    missing = _post(tool, gateway.rpc(rid=6))
    assert missing.status == 400 and missing.json()["error"]["code"] == -32600
    unknown = _post(tool, gateway.rpc(rid=7), "g2-not-mine")
    assert unknown.status == 404 and unknown.json()["error"]["code"] == gateway.SESSION_NOT_FOUND
    assert gateway.call(tool.port, "tool", method="GET", path="/sse?count=1&gap=0",
                        headers={"Mcp-Session-Id": "g2-not-mine"}, timeout=10).status == 404
    streamed = gateway.call(tool.port, "tool", method="GET", path="/sse?count=1&gap=0",
                            headers={"Mcp-Session-Id": sid}, timeout=10)
    assert streamed.status == 200 and b"data: " in streamed.body
    ended = gateway.call(tool.port, "tool", method="DELETE", headers={"Mcp-Session-Id": sid}, timeout=10)
    assert ended.status == 200 and tool.ended == [sid]
    assert _post(tool, gateway.rpc(rid=8), sid).status == 404
    seen = [(e["method"], e["rpc"], e["session"], e["status"]) for e in tool.seen()]
    assert seen == [("POST", "initialize", None, 200), ("POST", "notifications/initialized", sid, 202),
                    ("POST", "tools/call", sid, 200), ("POST", "tools/call", None, 400),
                    ("POST", "tools/call", "g2-not-mine", 404), ("GET", None, "g2-not-mine", 404),
                    ("GET", None, sid, None), ("DELETE", None, sid, 200), ("POST", "tools/call", sid, 404)]
    assert tool.seen(rpc="initialize")[0]["issued"] == sid == tool.issued[0]
    assert all(e["gen"] == 3 for e in tool.seen())


def test_forget_makes_the_next_call_a_404(tool: gateway.ToolServer) -> None:
    sid = _post(tool, gateway.rpc("initialize", rid=0)).headers["mcp-session-id"]
    tool.forget(sid)
    assert _post(tool, gateway.rpc(rid=1), sid).status == 404
    assert tool.ended == []


def test_initialize_as_sse_and_the_failure_switch(tool: gateway.ToolServer, mode: gateway.McpSessions) -> None:
    mode.sse = True
    init = _post(tool, gateway.rpc("initialize", rid="a"))
    assert init.status == 200 and init.headers["content-type"] == "text/event-stream"
    doc = _sse_data(init.body)
    assert isinstance(doc, dict) and doc["id"] == "a" and doc["result"]["serverInfo"]["name"] == "baton-test-tool"
    assert init.headers["mcp-session-id"] in tool.live
    mode.fail_initialize = gateway.InitializeFailure.JSONRPC_ERROR
    refused = _post(tool, gateway.rpc("initialize", rid="b"))
    assert refused.status == 200 and "mcp-session-id" not in refused.headers
    doc = _sse_data(refused.body)
    assert isinstance(doc, dict) and doc["error"]["code"] == -32602
    mode.sse, mode.fail_initialize = False, gateway.InitializeFailure.HTTP_500
    failed = _post(tool, gateway.rpc("initialize", rid="c"))
    assert failed.status == 500 and "mcp-session-id" not in failed.headers
    assert failed.json()["error"]["code"] == -32603
    assert len(tool.issued) == 1


def test_without_sessions_the_tool_answers_as_before() -> None:
    plain = gateway.ToolServer("127.0.0.1", ports.free_port(), 1)
    try:
        answered = _post(plain, gateway.rpc(rid=1), "anything")
        assert answered.status == 200 and answered.json()["result"] == {"gen": 1, "ip": "127.0.0.1"}
        init = _post(plain, gateway.rpc("initialize", rid=2))
        assert init.headers["mcp-session-id"].startswith("g1-")
        assert gateway.call(plain.port, "tool", method="DELETE", timeout=10).status == 501
        assert "rpc" not in plain.seen()[0] and plain.count() == 2
    finally:
        plain.stop()
