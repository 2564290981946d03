"""A real stdio server from PyPI (mcp-server-time, unmodified) through baton-bridge, called by
the official MCP Python SDK client in the handshake era (mode "legacy": the initialize handshake;
the stateless era's calls of the same server: test_bridge_stateless.py)."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from .conftest import BridgeFactory

pytestmark = pytest.mark.unit


def test_mcp_server_time_answers_through_the_bridge(bridges: BridgeFactory) -> None:
    mcp_client = pytest.importorskip("mcp.client.client", reason="the test extras install mcp (with mcp-server-time)")
    bridge = bridges.start("--init-seconds", "60", command=[sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"])

    async def calls() -> tuple[str, str, str]:
        async with asyncio.timeout(60):
            async with mcp_client.Client(f"http://127.0.0.1:{bridge.port}/mcp", mode="legacy") as client:
                tools = await client.list_tools()
                result = await client.call_tool("get_current_time", {"timezone": "UTC"})
                init = client.session.initialize_result
                assert init is not None
                return ",".join(sorted(t.name for t in tools.tools)), result.content[0].text, init.server_info.name

    names, text, server_name = asyncio.run(calls())
    assert "get_current_time" in names.split(",")
    assert json.loads(text)["timezone"] == "UTC"
    assert server_name == "mcp-time"
    assert [e for e in bridge.child_events()] == []  # not our test child: nothing recorded
