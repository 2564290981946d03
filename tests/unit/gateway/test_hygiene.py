"""The gateway's header hygiene (baton.gateway.hygiene): hop-by-hop headers dropped, request
smuggling refused."""

from __future__ import annotations

import pytest

from baton.gateway import hygiene


def test_hop_by_hop_headers_are_dropped() -> None:
    headers = [("Connection", "keep-alive, X-Custom"), ("Keep-Alive", "timeout=5"), ("X-Custom", "1"),
               ("TE", "trailers"), ("Trailer", "X-T"), ("Transfer-Encoding", "chunked"), ("Upgrade", "h2c"),
               ("Proxy-Authorization", "secret"), ("Proxy-Foo", "x"), ("Content-Type", "application/json"),
               ("Accept", "text/event-stream"), ("Mcp-Session-Id", "abc")]
    kept = hygiene.end_to_end(headers)
    assert kept == [("Content-Type", "application/json"), ("Accept", "text/event-stream"), ("Mcp-Session-Id", "abc")]


def test_websocket_keeps_upgrade() -> None:
    kept = hygiene.end_to_end([("Connection", "Upgrade"), ("Upgrade", "websocket")], keep_upgrade=True)
    assert kept == [("Upgrade", "websocket")]


@pytest.mark.parametrize("headers,bad", [
    ([("Content-Length", "5")], False),
    ([("Transfer-Encoding", "chunked")], False),
    ([], False),
    ([("Content-Length", "5"), ("Transfer-Encoding", "chunked")], True),
    ([("Content-Length", "5"), ("Content-Length", "6")], True),
    ([("Content-Length", "5, 6")], True),
    ([("Content-Length", "5"), ("Content-Length", "5")], False),
    ([("Content-Length", "-1")], True),
    ([("Transfer-Encoding", "gzip, chunked")], True),
    ([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], True),
    ([("transfer-encoding", "identity")], True),
])
def test_smuggling(headers: list[tuple[str, str]], bad: bool) -> None:
    assert (hygiene.smuggling(headers) is not None) == bad
