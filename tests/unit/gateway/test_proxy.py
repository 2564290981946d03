"""The call path (baton.gateway.proxy) over real loopback sockets, with the views filled by hand
(real stores, no informer): forwarding with Baton-Generation, a held call woken by a view change
and answered by N+1 (never N), the hold bound, the caps, sessions of a gone generation, and a
pod that refuses connections while Ready."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from baton.gateway import listener, proxy, state, views
from baton.settings import GatewaySettings

NS = "ns"


def settings(**kw: Any) -> GatewaySettings:
    base = dict(identity="t", system_namespace=NS, namespaces=(NS,), bind=("127.0.0.1", 0), admin_bind=("127.0.0.1", 0),
                admin_address="127.0.0.1:0", metrics_bind=("127.0.0.1", 0), health_bind=("127.0.0.1", 0),
                allowed=(ipaddress.ip_network("127.0.0.0/8"),), lease_seconds=15, cluster_domain="cluster.local",
                shutdown_grace_seconds=1, log_level="INFO")
    base.update(kw)
    return GatewaySettings(**base)  # type: ignore[arg-type]


def runtime(*, gen: int | None, uid: str | None, transition: dict[str, Any] | None = None, rv: int = 1,
            admission: int = 30, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": []}
    if gen is not None:
        status["current"] = {"generation": gen, "uid": uid, "pod": "tool"}
    if transition:
        status["transition"] = transition
    return {"metadata": {"name": "tool", "namespace": NS, "resourceVersion": str(rv)},
            # The test's clients are loopback sockets, no pod: admitted as callers that are not pods.
            "spec": {"service": {"gateway": True, "ports": [{"port": 80, "targetPort": "http"}],
                                 "clients": {"cidrs": ["127.0.0.0/8"]}},
                     "budgets": {"admissionSeconds": admission}, **spec},
            "status": status}


def pod(uid: str, port: int, *, serving: str = "true", rv: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": "tool", "namespace": NS, "uid": uid, "resourceVersion": str(rv),
                         "labels": {"baton.dev/runtime": "tool", "baton.dev/serving": serving}},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}


async def backend(gen: int, seen: list[int], *, session: str | None = None) -> tuple[web.AppRunner, int]:
    async def any_call(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append(gen)
        if request.path == "/slow":  # answers after 2 s
            await asyncio.sleep(2)
        if request.path == "/silent":  # one event, then nothing for 3 s
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b"data: 0\n\n")
            await asyncio.sleep(3)
            return resp
        if request.path == "/sse":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(3):
                await resp.write(f"data: {i}\n\n".encode())
                await asyncio.sleep(0.2)
            await resp.write_eof()
            return resp
        headers = {"Mcp-Session-Id": session} if session else {}
        return web.json_response({"gen": gen, "body": body.decode()}, headers=headers)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_call)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def gateway(vw: views.GatewayViews, st: state.State, **kw: Any) -> tuple[proxy.Proxy, web.BaseRunner, int]:
    px = proxy.Proxy(settings=settings(**kw), views=vw, state=st, forwarding=lambda: True)
    await px.start()
    runner = web.ServerRunner(listener.calls_server(px.handle))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return px, runner, runner.addresses[0][1]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 60))


async def post(port: int, body: bytes = b'{"jsonrpc":"2.0","id":1,"method":"m"}', host: str = f"tool.{NS}",
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes, float]:
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s:
        async with s.post(f"http://127.0.0.1:{port}/mcp", data=body, headers={"Host": host, **(headers or {})}) as r:
            return r.status, dict(r.headers), await r.read(), time.monotonic() - t0


def test_forward_hold_and_wake_to_n_plus_1() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        b1, p1 = await backend(1, seen)
        b2, p2 = await backend(2, seen)
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", p1))
        px, gw, port = await gateway(vw, st)
        try:
            status, headers, body, _ = await post(port)
            assert status == 200 and headers["Baton-Generation"] == "1" and json.loads(body)["gen"] == 1
            # N stops admission (serving=false): a new call is held...
            vw.runtimes.apply(runtime(gen=1, uid="u1", rv=2, transition={"kind": "Handoff", "fromUid": "u1", "step": "Draining"}))
            vw.pods.apply(pod("u1", p1, serving="false", rv=2))
            held = asyncio.create_task(post(port, b'{"jsonrpc":"2.0","id":"h","method":"m"}'))
            await asyncio.sleep(0.3)
            assert not held.done() and st.held[(NS, "tool")] == 1
            # ...a view that shows N serving again (a replayed write) still never gets it...
            vw.pods.apply(pod("u1", p1, serving="true", rv=3))
            await asyncio.sleep(0.2)
            assert not held.done()
            # ...N+1 serves: the held call is answered by it, woken by the change (no polling).
            vw.pods.delete(pod("u1", p1, rv=4))
            vw.pods.apply(pod("u2", p2, rv=5))
            vw.runtimes.apply(runtime(gen=2, uid="u2", rv=6))
            status, headers, body, seconds = await held
            assert status == 200 and headers["Baton-Generation"] == "2" and json.loads(body)["gen"] == 2
            assert json.loads(json.loads(body)["body"])["id"] == "h", "the held body arrives whole"
            assert seen == [1, 2] and st.total_inflight() == 0 and not st.held
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
            await b2.cleanup()
    run(go)


def test_hold_bound_caps_and_sessions() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        b1, p1 = await backend(1, seen, session="sess-1")
        expire = runtime(gen=1, uid="u1", admission=1)
        expire["spec"]["service"]["sessions"] = "Expire"  # the pod's own ids, a 404 once it is gone
        vw.runtimes.apply(expire)
        vw.pods.apply(pod("u1", p1))
        px, gw, port = await gateway(vw, st, max_held_per_runtime=1, max_held_body_bytes=1024)
        try:
            # Only the answer to an initialize issues a session (a pod's id on any other answer is not taken).
            status, headers, _, _ = await post(port)
            assert headers["Mcp-Session-Id"] == "sess-1" and st.session_uid((NS, "tool"), "sess-1") is None
            status, headers, _, _ = await post(port, b'{"jsonrpc":"2.0","id":0,"method":"initialize"}')
            assert headers["Mcp-Session-Id"] == "sess-1" and st.session_uid((NS, "tool"), "sess-1") == "u1"
            assert st.session_uid((NS, "other"), "sess-1") is None  # keyed by runtime too
            st.seal("u1", (NS, "tool"))
            # Sealed, no transition: held for admissionSeconds=1, then 503 Transitioning (JSON-RPC).
            first = asyncio.create_task(post(port, b'{"jsonrpc":"2.0","id":8,"method":"m"}'))
            await asyncio.sleep(0.2)
            # The cap of held calls per runtime: the next one is refused at once.
            status, headers, body, _ = await post(port)
            assert status == 503 and headers["Baton-Reason"] == "Overloaded"
            status, headers, body, seconds = await first
            assert status == 503 and headers["Baton-Reason"] == "Transitioning" and 0.9 <= seconds < 5
            assert json.loads(body)["id"] == 8 and json.loads(body)["error"]["data"]["reason"] == "Transitioning"
            # A held call's body over the cap: 413.
            status, headers, _, _ = await post(port, b"x" * 2048)
            assert status == 413
            # The session u1 issued: u1 is sealed, it can never answer it: 404 at once.
            status, headers, body, seconds = await post(port, headers={"Mcp-Session-Id": "sess-1"})
            assert status == 404 and headers["Baton-Reason"] == "UnknownSession" and seconds < 0.5
            assert seen == [1, 1]
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
    run(go)


def test_streams_pass_through_and_a_refusing_pod_is_retried() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        # A Ready pod whose server is not listening yet (port taken from a backend then stopped).
        b0, dead = await backend(0, seen)
        await b0.cleanup()
        vw.runtimes.apply(runtime(gen=1, uid="u1", admission=10))
        vw.pods.apply(pod("u1", dead))
        px, gw, port = await gateway(vw, st)
        b1 = None
        try:
            call = asyncio.create_task(post(port))
            await asyncio.sleep(0.5)
            assert not call.done()
            b1, p1 = await backend(1, seen)
            vw.pods.apply(pod("u1", p1, rv=2))
            status, headers, body, _ = await call
            assert status == 200 and json.loads(body)["gen"] == 1
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}/sse", headers={"Host": f"tool.{NS}"}) as r:
                    times = []
                    async for _ in r.content:
                        times.append(time.monotonic())
                    assert r.headers["Baton-Generation"] == "1"
            assert len(times) >= 3 and times[-1] - times[0] >= 0.3, "events came as they were sent"
        finally:
            await gw.cleanup()
            await px.close()
            if b1 is not None:
                await b1.cleanup()
    run(go)


def test_a_pod_silent_past_the_idle_timeout_fails_the_call_once_never_sends_it_again() -> None:
    """The call was sent: past BATON_GATEWAY_IDLE_SECONDS without an answer it is answered 502
    UpstreamError, and never forwarded a second time (a tool call need not be idempotent; a
    read timeout once counted as a connect failure and the call was sent again within
    admissionSeconds). A stream silent that long is cut."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        b1, p1 = await backend(1, seen)
        vw.runtimes.apply(runtime(gen=1, uid="u1", admission=30))
        vw.pods.apply(pod("u1", p1))
        px, gw, port = await gateway(vw, st, idle_timeout_seconds=1.0)
        try:
            t0 = time.monotonic()
            async with aiohttp.ClientSession() as s:
                async with s.post(f"http://127.0.0.1:{port}/slow", data=b'{"jsonrpc":"2.0","id":7,"method":"m"}',
                                  headers={"Host": f"tool.{NS}"}) as r:
                    status, reason, body = r.status, r.headers.get("Baton-Reason"), await r.json()
            took = time.monotonic() - t0
            assert (status, reason, body["id"]) == (502, "UpstreamError", 7), (status, reason, body)
            assert took < 5, f"answered after {took:.2f}s"
            await asyncio.sleep(2.5)  # a second forward would have reached the tool by now
            assert seen == [1], f"the tool received the call {len(seen)} times"
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}/silent", headers={"Host": f"tool.{NS}"}) as r:
                    t0 = time.monotonic()
                    got = b""
                    with pytest.raises(aiohttp.ClientPayloadError):
                        async for chunk in r.content.iter_any():
                            got += chunk
            assert got == b"data: 0\n\n" and time.monotonic() - t0 < 2.9, "the silent stream was cut at the idle bound"
            assert st.total_inflight() == 0
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
    run(go)


def test_websocket_is_forwarded_and_counted_while_open() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)

        async def echo(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for msg in ws:
                await ws.send_str(f"g1:{msg.data}")
            return ws
        app = web.Application()
        app.router.add_get("/ws", echo)
        b1 = web.AppRunner(app)
        await b1.setup()
        await web.TCPSite(b1, "127.0.0.1", 0).start()
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", b1.addresses[0][1]))
        px, gw, port = await gateway(vw, st)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.ws_connect(f"http://127.0.0.1:{port}/ws", headers={"Host": f"tool.{NS}"}) as ws:
                    assert ws._response.headers["Baton-Generation"] == "1"
                    await ws.send_str("hi")
                    msg = await ws.receive(timeout=5)
                    assert msg.data == "g1:hi"
                    assert st.inflight["u1"] == 1, "an open WebSocket counts as in flight"
                for _ in range(50):
                    if st.total_inflight() == 0:
                        break
                    await asyncio.sleep(0.1)
                assert st.total_inflight() == 0
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
    run(go)


def test_connections_are_pooled_per_pod_uid_never_across_a_reused_ip() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        peers: list[int] = []

        async def record(request: web.Request) -> web.Response:
            peers.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
            return web.json_response({})
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", record)
        b = web.AppRunner(app)
        await b.setup()
        await web.TCPSite(b, "127.0.0.1", 0).start()
        port_b = b.addresses[0][1]
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", port_b))
        px, gw, port = await gateway(vw, st)
        try:
            await post(port)
            await post(port)
            # N+1 got N's IP and port: a new connection, never N's kept-alive one.
            vw.pods.delete(pod("u1", port_b, rv=2))
            vw.pods.apply(pod("u2", port_b, rv=3))
            vw.runtimes.apply(runtime(gen=2, uid="u2", rv=4))
            await post(port)
            await post(port)
            assert peers[0] == peers[1], "kept alive within one pod"
            assert peers[2] != peers[1], "a connection to N was reused for N+1"
            assert peers[3] == peers[2]
        finally:
            await gw.cleanup()
            await px.close()
            await b.cleanup()
    run(go)


def test_whole_bodies_go_over_the_pool_and_uploads_and_head_over_aiohttp_answered_alike() -> None:
    """Calls with their body in hand are written whole on the gateway's own pooled connection
    (baton.gateway.http1); streamed uploads and HEAD go through aiohttp's client. Either way the
    pod gets the body whole with its own length, and the client the answer whole. A client that
    sends `Expect: 100-continue` gets its 100 from the gateway (it hung before: aiohttp's
    low-level server does not answer Expect)."""
    async def go() -> None:
        got: list[dict[str, Any]] = []

        async def echo(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            got.append({"method": request.method, "size": len(body), "expect": request.headers.get("Expect"),
                        "length": request.headers.get("Content-Length"), "peer": request.transport.get_extra_info("peername")
                        if request.transport else None})
            if request.path == "/big":
                return web.Response(body=b"x" * 150_000, content_type="application/octet-stream")
            return web.json_response({"size": len(body)}, headers={"X-Tool": "yes"})
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", echo)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        tool_port = runner.addresses[0][1]
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", tool_port))
        px, gw, port = await gateway(vw, st)
        try:
            assert px.pool is not None
            # In hand: small bodies, a body-less POST, Expect dropped (the body goes with the head).
            for _ in range(3):
                status, headers, body, _ = await post(port, b'{"id":1}', headers={"Expect": "100-continue"})
                assert status == 200 and json.loads(body) == {"size": 8} and headers["X-Tool"] == "yes"
                assert headers["Baton-Generation"] == "1"
            status, _, body, _ = await post(port, b"")
            assert status == 200 and json.loads(body) == {"size": 0}
            # A refusal that reads the body for its JSON-RPC id answers a client that expects 100 too.
            status, _, body, _ = await post(port, b'{"jsonrpc":"2.0","id":7,"method":"m"}', host="nothing.here",
                                            headers={"Expect": "100-continue"})
            assert status == 404 and json.loads(body)["id"] == 7
            assert [g["expect"] for g in got] == [None] * 4
            assert [g["length"] for g in got] == ["8", "8", "8", "0"]
            assert len({g["peer"] for g in got}) == 1, "one kept-alive connection carried all four"
            assert px.pool.open_count() == 1
            # A large answer to a small call streams back whole.
            async with aiohttp.ClientSession() as s:
                async with s.post(f"http://127.0.0.1:{port}/big", data=b"{}", headers={"Host": f"tool.{NS}"}) as r:
                    assert r.status == 200 and r.headers["Baton-Generation"] == "1"
                    assert await r.read() == b"x" * 150_000
                # A streamed upload (larger than a body read whole) and HEAD: aiohttp's client.
                upload = b"u" * (proxy.SMALL_BODY_BYTES + 1000)
                async with s.post(f"http://127.0.0.1:{port}/up", data=upload, headers={"Host": f"tool.{NS}"}) as r:
                    assert r.status == 200 and json.loads(await r.read()) == {"size": len(upload)}
                async with s.head(f"http://127.0.0.1:{port}/", headers={"Host": f"tool.{NS}"}) as r:
                    assert r.status == 200 and r.headers["Baton-Generation"] == "1" and await r.read() == b""
            assert [g["method"] for g in got[-3:]] == ["POST", "POST", "HEAD"]
            assert got[-2]["size"] == len(upload) and got[-2]["length"] == str(len(upload))
            assert st.total_inflight() == 0
        finally:
            await gw.cleanup()
            await px.close()
            await runner.cleanup()
    run(go)


def test_a_request_target_that_is_not_a_path_is_refused_and_nothing_is_dialled() -> None:
    """Absolute-form names an authority the pod could read instead of the routed Host: 400."""
    async def go() -> None:
        seen: list[int] = []
        b1, p1 = await backend(1, seen)
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", p1))
        px, gw, port = await gateway(vw, st)
        try:
            answers = []
            for target in (b"http://elsewhere.example/mcp", b"*", b"/mcp"):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"OPTIONS " + target + f" HTTP/1.1\r\nHost: tool.{NS}\r\nConnection: close\r\n\r\n".encode())
                answers.append((await reader.read()).split(b"\r\n", 1)[0])
                writer.close()
            assert answers[0].startswith(b"HTTP/1.1 400") and answers[1].startswith(b"HTTP/1.1 400"), answers
            assert answers[2].startswith(b"HTTP/1.1 200"), answers
            assert seen == [1], "only the origin-form call reached the pod"
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
    run(go)
