"""The stateless era (MCP 2026-07-28) served by baton-bridge over the child's one handshake-era
session: server/discover, per-request envelopes, cancellation by closing the stream, progress,
subscriptions/listen, and the official SDK client pinned to that era (bridge/modern.go)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import signal
import sys
from typing import Any

import pytest

from dev import wait

from .conftest import Answer, Bridge, BridgeFactory, tool_text

pytestmark = pytest.mark.unit

MODERN = "2026-07-28"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
INFO_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"


def envelope(**extra: Any) -> dict[str, Any]:
    return {VERSION_KEY: MODERN, CAPS_KEY: {}, INFO_KEY: {"name": "test", "version": "1"}, **extra}


def stateless(bridge: Bridge, request_id: object, method: str, params: dict[str, Any] | None = None, *,
              meta: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
              accept: str = "application/json, text/event-stream") -> Answer:
    body_params = {**(params or {}), "_meta": envelope(**(meta or {}))}
    hdrs = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        hdrs["Mcp-Name"] = str(body_params["name"])
    return bridge.post({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body_params},
                       headers={**hdrs, **(headers or {})}, accept=accept)


def received(bridge: Bridge, method: str) -> list[dict[str, Any]]:
    return [e for e in bridge.child_events() if e["event"] == "received" and e["method"] == method]


def test_discover_is_answered_from_the_childs_one_initialize(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    answer = stateless(bridge, 1, "server/discover")
    assert answer.status == 200, answer.body
    result = answer.messages[0]["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"] == {"tools": {"listChanged": True}}  # stdio_child.py's
    assert result["_meta"][SERVER_INFO_KEY] == {"name": "baton-test-child", "version": "1"}
    assert (result["resultType"], result["cacheScope"], result["ttlMs"]) == ("complete", "private", 0)
    # The child saw the bridge's initialize only: no session of its own per stateless client.
    assert len(received(bridge, "initialize")) == 1
    assert received(bridge, "server/discover") == []


@pytest.mark.parametrize(("change", "code", "status"), [
    ("no-meta", -32602, 400),
    ("no-capabilities", -32602, 400),
    ("version-header-differs", -32020, 400),
    ("method-header-differs", -32020, 400),
    ("name-header-differs", -32020, 400),
    ("unserved-version", -32022, 400),
    ("handshake-only-method", -32601, 404),
])
def test_a_bad_envelope_is_refused_the_way_the_sdk_server_refuses_it(bridges: BridgeFactory, change: str, code: int,
                                                                      status: int) -> None:
    bridge = bridges.start()
    method = "tools/call"
    params: dict[str, Any] = {"name": "echo", "arguments": {}, "_meta": envelope()}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Mcp-Name": "echo"}
    if change == "no-meta":
        params["_meta"] = "not an object"
    elif change == "no-capabilities":
        del params["_meta"][CAPS_KEY]
    elif change == "version-header-differs":
        headers["MCP-Protocol-Version"] = "2026-01-01"
    elif change == "method-header-differs":
        headers["Mcp-Method"] = "tools/list"
    elif change == "name-header-differs":
        headers["Mcp-Name"] = "slow"
    elif change == "unserved-version":
        params["_meta"][VERSION_KEY] = headers["MCP-Protocol-Version"] = "2027-01-01"
    elif change == "handshake-only-method":
        method, params = "ping", {"_meta": envelope()}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "ping"}
    answer = bridge.post({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, headers=headers)
    assert answer.status == status, answer.body
    error = answer.messages[0]["error"]
    assert (answer.messages[0]["id"], error["code"]) == (7, code), error
    if change == "unserved-version":
        assert error["data"] == {"supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN],
                                 "requested": "2027-01-01"}
    assert received(bridge, "tools/call") == [] and received(bridge, "ping") == []


def test_a_stateless_call_reaches_the_child_without_the_envelope_and_comes_back_in_its_era(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    listed = stateless(bridge, "l", "tools/list")
    assert listed.status == 200, listed.body
    tools = listed.messages[0]["result"]
    assert {t["name"] for t in tools["tools"]} == {"echo", "slow", "die"}
    assert (tools["resultType"], tools["cacheScope"], tools["ttlMs"]) == ("complete", "private", 0)
    called = stateless(bridge, "c", "tools/call", {"name": "echo", "arguments": {"x": 1}}, meta={"custom/key": "kept"})
    assert called.status == 200, called.body
    result = called.messages[0]["result"]
    assert called.messages[0]["id"] == "c"
    assert result["resultType"] == "complete" and "cacheScope" not in result  # tools/call is not cacheable
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "baton-test-child"
    assert json.loads(tool_text(called))["arguments"] == {"x": 1}
    forwarded = received(bridge, "tools/call")[0]["params"]
    assert forwarded["_meta"] == {"custom/key": "kept"}  # the era's own keys taken out, the rest kept
    assert isinstance(received(bridge, "tools/call")[0]["id"], int)  # under a bridge id
    # The child's own error keeps its code, and the era's table picks the HTTP status.
    unknown = stateless(bridge, "u", "tools/call", {"name": "nope", "arguments": {}})
    assert (unknown.status, unknown.messages[0]["error"]["code"]) == (400, -32602)
    missing = stateless(bridge, "m", "prompts/list")
    assert (missing.status, missing.messages[0]["error"]["code"]) == (404, -32601)


def test_stateless_clients_sharing_ids_never_see_each_others_answers(bridges: BridgeFactory) -> None:
    bridge = bridges.start()

    def client(name: str) -> list[tuple[object, dict[str, Any]]]:
        out = []
        for request_id in range(1, 16):
            answer = stateless(bridge, request_id, "tools/call", {"name": "echo", "arguments": {"client": name}})
            assert answer.status == 200, answer.body
            out.append((answer.messages[-1]["id"], json.loads(tool_text(answer))))
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(("a", "b"), pool.map(client, ("a", "b"))))
    for name, answers in results.items():
        assert [a[0] for a in answers] == list(range(1, 16))
        assert all(a[1]["arguments"] == {"client": name} for a in answers)
    assert len({a[1]["received_id"] for answers in results.values() for a in answers}) == 30


def test_closing_the_stream_cancels_the_call_at_the_child(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    conn = bridge.connection(timeout=10)
    body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 30}, "_meta": envelope()}}
    conn.request("POST", "/mcp", body=json.dumps(body), headers={
        "Content-Type": "application/json", "Accept": "application/json", "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call", "Mcp-Name": "slow"})
    wait.wait_for(lambda: received(bridge, "tools/call"), timeout=10, interval=0.05, what="the call at the child")
    assert bridge.get("/baton/drain") == (503, b'{"inflight":1}\n')  # the drain counts it
    bridge_id = received(bridge, "tools/call")[0]["id"]
    conn.close()
    cancels = wait.wait_for(lambda: received(bridge, "notifications/cancelled"), timeout=10, interval=0.05,
                            what="notifications/cancelled at the child")
    assert cancels[0]["params"]["requestId"] == bridge_id
    assert wait.wait_for(lambda: [e for e in bridge.child_events() if e["event"] == "slow-cancelled"], timeout=10,
                         interval=0.05, what="the child's call cancelled")[0]["id"] == bridge_id
    assert bridge.get("/baton/drain") == (200, b'{"inflight":0}\n')


def test_progress_comes_on_the_calls_stream_with_the_clients_token(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    answer = stateless(bridge, 9, "tools/call", {"name": "slow", "arguments": {"seconds": 0.2}},
                       meta={"progressToken": "mine"})
    assert answer.status == 200 and answer.headers["content-type"].startswith("text/event-stream"), answer.body
    progress, final = answer.messages
    assert progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == "mine"
    assert final["id"] == 9 and final["result"]["resultType"] == "complete"
    child_token = received(bridge, "tools/call")[0]["params"]["_meta"]["progressToken"]
    assert child_token != "mine" and child_token.startswith("baton-")


def read_event(resp: http.client.HTTPResponse) -> dict[str, Any]:
    """The next SSE `data:` line's message (the bridge writes one line of data per event)."""
    while True:
        line = resp.fp.readline()
        if not line:
            raise EOFError("the stream ended")
        if line.startswith(b"data:"):
            return dict(json.loads(line[len(b"data:"):]))


def test_listen_acknowledges_what_the_child_can_send_delivers_it_and_ends_at_the_drain(bridges: BridgeFactory) -> None:
    bridge = bridges.start("--drain-seconds", "5")
    conn = bridge.connection(timeout=20)
    body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": True, "promptsListChanged": True,
                          "resourceSubscriptions": ["file:///a"]}, "_meta": envelope()}}
    conn.request("POST", "/mcp", body=json.dumps(body), headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream")
    ack = read_event(resp)
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    # The child declares tools.listChanged only: prompts and resource subscriptions not honoured.
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    assert ack["params"]["_meta"] == {SUBSCRIPTION_KEY: "listen-1"}
    assert bridge.get("/baton/drain") == (200, b'{"inflight":0}\n')  # a listen stream is no call
    # Another client (the handshake era) makes the child announce a new tool list.
    session = bridge.initialize()
    assert tool_text(bridge.call(session, 1, "notify")) == "notified"
    changed = read_event(resp)
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"] == {SUBSCRIPTION_KEY: "listen-1"}
    bridge.process.send_signal(signal.SIGTERM)
    end = read_event(resp)
    assert end == {"jsonrpc": "2.0", "id": "listen-1", "result": {"resultType": "complete",
                                                                  "_meta": {SUBSCRIPTION_KEY: "listen-1"}}}
    conn.close()
    assert bridge.wait_exit(timeout=20) == 0


def test_the_sdk_client_pinned_to_the_stateless_era_calls_a_stdio_child(bridges: BridgeFactory) -> None:
    mcp_client = pytest.importorskip("mcp.client.client", reason="the test extras install mcp")
    bridge = bridges.start()

    async def calls() -> list[tuple[str, str, str]]:
        out = []
        async with asyncio.timeout(60):
            for mode in (MODERN, "auto", "legacy"):
                async with mcp_client.Client(f"http://127.0.0.1:{bridge.port}/mcp", mode=mode) as client:
                    tools = await client.list_tools()
                    result = await client.call_tool("echo", {"mode": mode})
                    text = result.content[0].text  # type: ignore[union-attr]
                    assert json.loads(text)["arguments"] == {"mode": mode}
                    out.append((mode, str(client.session.protocol_version), ",".join(sorted(t.name for t in tools.tools))))
        return out

    assert asyncio.run(calls()) == [
        (MODERN, MODERN, "die,echo,slow"),
        ("auto", MODERN, "die,echo,slow"),  # discover answered: the SDK's default adopts the era
        ("legacy", "2025-11-25", "die,echo,slow"),
    ]
    assert len(received(bridge, "initialize")) == 1


def test_mcp_server_time_from_pypi_in_the_stateless_era(bridges: BridgeFactory) -> None:
    mcp_client = pytest.importorskip("mcp.client.client", reason="the test extras install mcp (with mcp-server-time)")
    bridge = bridges.start("--init-seconds", "60",
                           command=[sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"])

    async def calls() -> tuple[str, str, str | None]:
        async with asyncio.timeout(60):
            async with mcp_client.Client(f"http://127.0.0.1:{bridge.port}/mcp", mode=MODERN) as client:
                result = await client.call_tool("get_current_time", {"timezone": "UTC"})
                text = result.content[0].text  # type: ignore[union-attr]
                discovered = await client.session.send_discover(MODERN)
                return str(client.session.protocol_version), text, discovered["_meta"][SERVER_INFO_KEY]["name"]

    version, text, server = asyncio.run(calls())
    assert version == MODERN
    assert json.loads(text)["timezone"] == "UTC"
    assert server == "mcp-time"
