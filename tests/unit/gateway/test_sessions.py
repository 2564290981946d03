"""baton.gateway.sessions: the sealed session id, the reading of an initialize answer, the
re-bindings kept, and the replay against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from baton.gateway import http1, sessions

KEY = sessions.derive_key(b"k" * 40)
INIT = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "c", "version": "1"}}}).encode()


def sealed(**over: Any) -> sessions.Sealed:
    fields: dict[str, Any] = dict(namespace="ns", runtime="rt", pod_uid="uid-1", backend="b-1", initialize=INIT)
    fields.update(over)
    return sessions.Sealed(**fields)


def test_a_sealed_id_reads_back_whole_under_its_key() -> None:
    sid = sessions.seal(sealed(), key=KEY)
    assert sid is not None and sid.startswith(sessions.PREFIX)
    assert all(0x21 <= ord(c) <= 0x7E for c in sid)  # a header value as MCP requires (visible ASCII)
    assert sessions.unseal(sid, keys=(KEY,), namespace="ns", runtime="rt") == sealed()


@pytest.mark.parametrize("mutate", [
    lambda sid: sid[:-2] + ("AA" if not sid.endswith("AA") else "BB"),  # the mac
    lambda sid: sid.replace(".", ".x", 1),  # the payload
    lambda sid: sid + "x",
    lambda sid: "bt1.",
    lambda sid: "bt1.!!!.AAAA",
])
def test_an_altered_id_does_not_read(mutate: Any) -> None:
    sid = sessions.seal(sealed(), key=KEY)
    assert sid is not None
    assert sessions.unseal(mutate(sid), keys=(KEY,), namespace="ns", runtime="rt") is None


def test_an_id_sealed_for_another_runtime_or_key_does_not_read() -> None:
    sid = sessions.seal(sealed(), key=KEY)
    assert sid is not None
    assert sessions.unseal(sid, keys=(KEY,), namespace="ns", runtime="other") is None
    assert sessions.unseal(sid, keys=(KEY,), namespace="other", runtime="rt") is None
    assert sessions.unseal(sid, keys=(sessions.derive_key(b"j" * 40),), namespace="ns", runtime="rt") is None


def test_an_initialize_past_the_bound_is_not_sealed() -> None:
    assert sessions.seal(sealed(initialize=b"x" * (sessions.MAX_INITIALIZE_BYTES + 1)), key=KEY) is None
    # Incompressible bytes that fit MAX_INITIALIZE_BYTES but not MAX_ID_CHARS once encoded.
    noise = json.dumps({"n": __import__("os").urandom(4000).hex()}).encode()
    assert sessions.seal(sealed(initialize=noise), key=KEY) is None


def test_keys_keep_the_one_before_a_rotation() -> None:
    admin = [b"a" * 40]
    keys = sessions.Keys(lambda: admin[0])
    first = keys.current()
    sid = sessions.seal(sealed(), key=first)
    assert sid is not None
    admin[0] = b"b" * 40
    assert keys.current() != first
    assert sessions.unseal(sid, keys=keys.all(), namespace="ns", runtime="rt") is not None
    admin[0] = b"c" * 40
    keys.current()
    assert sessions.unseal(sid, keys=keys.all(), namespace="ns", runtime="rt") is None  # two rotations on


def test_mode_is_rebind_unless_expire_is_asked() -> None:
    assert sessions.mode_of(None) is sessions.Mode.REBIND
    assert sessions.mode_of({"spec": {"service": {}}}) is sessions.Mode.REBIND
    assert sessions.mode_of({"spec": {"service": {"sessions": "Expire"}}}) is sessions.Mode.EXPIRE
    assert sessions.mode_of({"spec": {"service": {"sessions": "Later"}}}) is sessions.Mode.REBIND


@pytest.mark.parametrize("body,content_type", [
    (b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25"}}', "application/json"),
    (b'event: message\r\ndata: {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25"}}\r\n\r\n',
     "text/event-stream"),
    (b': ping\n\nevent: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n'
     b'data: {"jsonrpc":"2.0","id":0,\ndata: "result":{"protocolVersion":"2025-11-25"}}\n\n', "text/event-stream"),
])
def test_the_initialize_result_is_read_from_json_or_an_event_stream(body: bytes, content_type: str) -> None:
    assert sessions.initialize_result(body, content_type=content_type) == {"protocolVersion": "2025-11-25"}


@pytest.mark.parametrize("body,content_type,why", [
    (b'{"jsonrpc":"2.0","id":0,"error":{"code":-32600,"message":"no"}}', "application/json", "error: no"),
    (b"<html>", "text/html", "not JSON"),
    (b"data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n", "text/event-stream", "no JSON-RPC response"),
])
def test_an_initialize_answer_without_a_result_says_why(body: bytes, content_type: str, why: str) -> None:
    with pytest.raises(sessions.ReplayFailed, match=why):
        sessions.initialize_result(body, content_type=content_type)


def test_rebinds_are_per_pod_bounded_and_ended_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "REBINDS_CAP", 2)
    r = sessions.Rebinds()
    r.put(("ns", "rt", "a"), "uid-2", "b-a")
    assert r.get(("ns", "rt", "a"), "uid-2") == "b-a"
    assert r.get(("ns", "rt", "a"), "uid-3") is None  # bound to another generation's pod
    r.put(("ns", "rt", "b"), "uid-2", "b-b")
    r.get(("ns", "rt", "a"), "uid-2")  # a used last: b is the oldest
    r.put(("ns", "rt", "c"), "uid-2", "b-c")
    assert r.get(("ns", "rt", "b"), "uid-2") is None and r.get(("ns", "rt", "a"), "uid-2") == "b-a"
    r.end(("ns", "rt", "a"))
    assert r.is_ended(("ns", "rt", "a")) and r.get(("ns", "rt", "a"), "uid-2") is None


def test_answers_carry_the_clients_id_and_an_initialize_is_sealed() -> None:
    assert sessions.Binding(client_id="bt1.x.y").answer_id("backend", namespace="ns", runtime="rt", uid="u") == "bt1.x.y"
    sid = sessions.Binding(initialize=INIT, key=KEY).answer_id("backend", namespace="ns", runtime="rt", uid="u")
    assert sid is not None
    assert sessions.unseal(sid, keys=(KEY,), namespace="ns", runtime="rt") == sealed(pod_uid="u", backend="backend")
    assert sessions.with_session([("Host", "h"), ("mcp-session-id", "bt1.x.y")], "b") == [("Host", "h"), ("Mcp-Session-Id", "b")]
    assert sessions.with_session([("Mcp-Session-Id", "bt1.x.y")], "") == []


class Pod:
    """A server on loopback that records what the replay sends and answers as told."""

    def __init__(self, *, sse: bool = False, init_status: int = 200) -> None:
        self.sse, self.init_status = sse, init_status
        self.seen: list[tuple[str, dict[str, str], Any]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        doc = json.loads(await request.read())
        self.seen.append((doc.get("method"), dict(request.headers), doc))
        if doc.get("method") == "initialize":
            if self.init_status != 200:
                return web.Response(status=self.init_status, text="no")
            answer = json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": {"protocolVersion": "2025-11-25"}})
            if not self.sse:
                return web.Response(text=answer, content_type="application/json", headers={"Mcp-Session-Id": "new-1"})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Mcp-Session-Id": "new-1"})
            await resp.prepare(request)
            await resp.write(f"event: message\ndata: {answer}\n\n".encode())
            await asyncio.sleep(30)  # a stream left open: the replay must not wait for its end
            return resp
        return web.Response(status=202)


async def _replay(pod: Pod) -> tuple[str, list[Any]]:
    app = web.Application()
    app.router.add_post("/mcp", pod.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    pool = http1.Pool(limit=4)
    try:
        async with asyncio.timeout(5):
            backend = await sessions.replay(pool, pod=("uid-2", "127.0.0.1", port), path="/mcp",
                                            headers=[("Host", "rt.ns"), ("Authorization", "Bearer t"),
                                                     ("Mcp-Session-Id", "bt1.old"), ("MCP-Protocol-Version", "x")],
                                            initialize=INIT, connect_timeout=1)
        return backend, pod.seen
    finally:
        pool.close()
        await runner.cleanup()


@pytest.mark.parametrize("sse", [False, True])
def test_the_replay_initializes_then_notifies_with_the_new_id(sse: bool) -> None:
    backend, seen = asyncio.run(_replay(Pod(sse=sse)))
    assert backend == "new-1"
    assert [m for m, _, _ in seen] == ["initialize", "notifications/initialized"]
    init_headers, notified_headers = seen[0][1], seen[1][1]
    assert seen[0][2] == json.loads(INIT)  # the client's own initialize, verbatim
    assert "Mcp-Session-Id" not in init_headers and init_headers["Authorization"] == "Bearer t"
    assert notified_headers["Mcp-Session-Id"] == "new-1"
    assert notified_headers["MCP-Protocol-Version"] == "2025-11-25"


def test_a_refused_replay_says_why() -> None:
    with pytest.raises(sessions.ReplayFailed, match="HTTP 500"):
        asyncio.run(_replay(Pod(init_status=500)))
