"""The call path with spec.service.sessions: Rebind (baton.gateway.proxy, sessions, forward): real
aiohttp pods on loopback, the views fed directly (no API server: the pure call path)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from baton.gateway import gwmetrics, state, views
from tests.unit.gateway import test_proxy as tp

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}'


class SessionPod:
    """A handshake-era MCP server: initialize issues an id kept in this process (one per pod),
    any other call with an unknown id is 404; records (method, session id) per call."""

    def __init__(self, name: str, *, init_fails: bool = False) -> None:
        self.name, self.init_fails = name, init_fails
        self.sessions: set[str] = set()
        self.seen: list[tuple[str, str | None]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        doc = json.loads(await request.read() or b"{}")
        sid = request.headers.get("Mcp-Session-Id")
        method = doc.get("method", request.method)
        self.seen.append((method, sid))
        if method == "initialize":
            if self.init_fails:
                return web.json_response({"jsonrpc": "2.0", "id": doc["id"], "error": {"code": -32603, "message": "full"}})
            new = f"{self.name}-s{len(self.sessions) + 1}"
            self.sessions.add(new)
            return web.json_response({"jsonrpc": "2.0", "id": doc["id"], "result": {"protocolVersion": "2025-11-25"}},
                                     headers={"Mcp-Session-Id": new})
        if sid not in self.sessions:
            return web.json_response({"jsonrpc": "2.0", "id": doc.get("id"), "error": {"code": -32001, "message": "no session"}},
                                     status=404)
        if request.method == "DELETE":
            self.sessions.discard(sid)
            return web.Response(status=204)
        if method == "notifications/initialized":
            return web.Response(status=202)
        return web.json_response({"jsonrpc": "2.0", "id": doc.get("id"), "result": {"pod": self.name}},
                                 headers={"Mcp-Session-Id": sid})

    async def start(self) -> tuple[web.AppRunner, int]:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, runner.addresses[0][1]


async def call(port: int, body: bytes, sid: str | None = None, method: str = "POST") -> tuple[int, dict[str, str], Any]:
    import aiohttp
    headers = {"Host": f"tool.{tp.NS}", **({"Mcp-Session-Id": sid} if sid else {})}
    async with aiohttp.ClientSession() as s:
        async with s.request(method, f"http://127.0.0.1:{port}/mcp", data=body, headers=headers) as r:
            raw = await r.read()
            return r.status, dict(r.headers), json.loads(raw) if raw else None


def rebound(outcome: str) -> float:
    return gwmetrics.SESSIONS_REBOUND.labels(outcome=outcome)._value.get()  # type: ignore[no-any-return]


async def handoff(vw: views.GatewayViews, st: state.State, *, old: str, new: str, port: int, gen: int) -> None:
    st.seal(old, (tp.NS, "tool"))
    vw.pods.delete(tp.pod(old, 1, rv=gen * 10))
    vw.pods.apply(tp.pod(new, port, rv=gen * 10 + 1))
    vw.runtimes.apply(tp.runtime(gen=gen, uid=new, rv=gen * 10 + 2))


def test_a_session_keeps_its_id_across_two_handoffs_and_each_pod_replays_it_once() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(tp.NS,), state=st)
        pods = [SessionPod("p1"), SessionPod("p2"), SessionPod("p3")]
        started = [await p.start() for p in pods]
        vw.runtimes.apply(tp.runtime(gen=1, uid="u1"))
        vw.pods.apply(tp.pod("u1", started[0][1]))
        px, gw, port = await tp.gateway(vw, st)
        before = rebound("rebound")
        try:
            status, headers, _ = await call(port, INIT)
            sid = headers["Mcp-Session-Id"]
            assert status == 200 and sid.startswith("bt1.") and pods[0].sessions == {"p1-s1"}
            status, headers, doc = await call(port, b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}', sid)
            assert status == 200 and doc["result"]["pod"] == "p1" and headers["Mcp-Session-Id"] == sid
            assert pods[0].seen[-1] == ("tools/call", "p1-s1")
            for gen, (pod, (_, pod_port)) in enumerate(zip(pods[1:], started[1:]), start=2):
                await handoff(vw, st, old=f"u{gen - 1}", new=f"u{gen}", port=pod_port, gen=gen)
                # Two calls of the session at once: one replay, both answered by the new pod.
                answers = await asyncio.gather(*(call(port, b'{"jsonrpc":"2.0","id":2,"method":"tools/call"}', sid)
                                                 for _ in range(2)))
                for status, headers, doc in answers:
                    assert status == 200 and doc["result"]["pod"] == pod.name and headers["Mcp-Session-Id"] == sid
                assert [m for m, _ in pod.seen].count("initialize") == 1
                assert pod.seen[:2] == [("initialize", None), ("notifications/initialized", f"{pod.name}-s1")]
                assert pod.seen[2:] == [("tools/call", f"{pod.name}-s1")] * 2
            assert rebound("rebound") - before == 2
            assert st.sessions_seen("u3") and not st.sessions_seen("u1")
            # The serving pod forgets the session (a restart of its server): its 404 is passed on,
            # never re-bound in a loop.
            pods[2].sessions.clear()
            status, headers, doc = await call(port, b'{"jsonrpc":"2.0","id":3,"method":"tools/call"}', sid)
            assert status == 404 and "Baton-Reason" not in headers and doc["error"]["message"] == "no session"
            assert [m for m, _ in pods[2].seen].count("initialize") == 1
        finally:
            await gw.cleanup()
            await px.close()
            for runner, _ in started:
                await runner.cleanup()
    tp.run(go)


def test_delete_ends_the_backend_session_and_a_failed_replay_says_why() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(tp.NS,), state=st)
        pods = [SessionPod("p1"), SessionPod("p2"), SessionPod("p3", init_fails=True)]
        started = [await p.start() for p in pods]
        vw.runtimes.apply(tp.runtime(gen=1, uid="u1"))
        vw.pods.apply(tp.pod("u1", started[0][1]))
        px, gw, port = await tp.gateway(vw, st)
        failed = rebound("failed")
        try:
            sids = [(await call(port, INIT))[1]["Mcp-Session-Id"] for _ in range(2)]
            await handoff(vw, st, old="u1", new="u2", port=started[1][1], gen=2)
            status, _, _ = await call(port, b"", sids[0], method="DELETE")
            assert status == 204 and pods[1].seen == []  # gone with its generation: nothing replayed to end it
            status, headers, _ = await call(port, b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}', sids[0])
            assert status == 404 and headers["Baton-Reason"] == "UnknownSession"
            await call(port, b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}', sids[1])
            status, _, _ = await call(port, b"", sids[1], method="DELETE")
            assert status == 204 and pods[1].seen[-1] == ("DELETE", "p2-s1") and not pods[1].sessions
            # A session ended by its DELETE is never re-bound after.
            await handoff(vw, st, old="u2", new="u3", port=started[2][1], gen=3)
            status, headers, _ = await call(port, b'{"jsonrpc":"2.0","id":5,"method":"tools/call"}', sids[1])
            assert status == 404 and headers["Baton-Reason"] == "UnknownSession"
            assert pods[2].seen == []
            # A live session whose replay the serving pod refuses: 404 SessionReplayFailed, saying why.
            fresh = SessionPod("p4")
            started.append(await fresh.start())
            await handoff(vw, st, old="u3", new="u4", port=started[3][1], gen=4)
            live = (await call(port, INIT))[1]["Mcp-Session-Id"]
            await handoff(vw, st, old="u4", new="u5", port=started[2][1], gen=5)  # p3 again, a new pod uid
            status, headers, doc = await call(port, b'{"jsonrpc":"2.0","id":6,"method":"tools/call"}', live)
            assert status == 404 and headers["Baton-Reason"] == "SessionReplayFailed"
            assert "initialize answered an error: full" in doc["error"]["message"] and doc["id"] == 6
            assert rebound("failed") - failed == 1
        finally:
            await gw.cleanup()
            await px.close()
            for runner, _ in started:
                await runner.cleanup()
    tp.run(go)
