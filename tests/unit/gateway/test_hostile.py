"""The call path against hostile or careless clients (issue 41; ../shared/notes/gateway-review.md
items 1, 2, 3): the hold caps are exact, a slow body counts against admissionSeconds, a held call
whose client left reaches no tool, a forwarded one is cut upstream, every bound answers at once,
and a head prefixed with blank lines is still bounded. Real loopback sockets, views filled by hand
(as tests/unit/gateway/test_proxy.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import aiohttp
from aiohttp import web

from baton.gateway import gwmetrics, listener, proxy, state, views
from unit.gateway import test_proxy as tp

NS, backend, gateway, pod, post, run, runtime, settings = (
    tp.NS, tp.backend, tp.gateway, tp.pod, tp.post, tp.run, tp.runtime, tp.settings)

HEAD = f"POST /mcp HTTP/1.1\r\nHost: tool.{NS}\r\nContent-Type: application/json\r\n"


def held_runtime(vw: views.GatewayViews, *, admission: int = 30) -> None:
    """A runtime whose pod is not Ready and no transition: decide() answers Hold."""
    vw.runtimes.apply(runtime(gen=1, uid="u1", admission=admission))
    p = pod("u1", 1)
    p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    vw.pods.apply(p)


async def open_call(port: int, body: bytes = b'{"jsonrpc":"2.0","id":1,"method":"m"}', *,
                    length: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{HEAD}Content-Length: {len(body) if length is None else length}\r\n\r\n".encode() + body)
    await writer.drain()
    return reader, writer


async def answered(reader: asyncio.StreamReader, within: float) -> bytes | None:
    try:
        return await asyncio.wait_for(reader.read(65536), within)
    except asyncio.TimeoutError:
        return None


async def until(check: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def test_twelve_calls_into_a_cap_of_two_hold_exactly_two() -> None:
    """Review item 1: an Overloaded refusal undid a hold it never made, so every second call was
    held past the cap and the held gauge went negative once they ended."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        held_runtime(vw, admission=2)
        before = gwmetrics.HELD._value.get()
        px, gw, port = await gateway(vw, st, max_held_per_runtime=2)
        conns = []
        try:
            answers = []
            for _ in range(12):
                reader, writer = await open_call(port)
                conns.append(writer)
                answers.append(await answered(reader, 0.3))
            refused = [a for a in answers if a is not None]
            assert len(refused) == 10 and all(b"Baton-Reason: Overloaded" in a for a in refused), answers
            assert st.held[(NS, "tool")] == 2
            assert gwmetrics.HELD._value.get() - before == 2
            await until(lambda: not st.held, within=5)
            assert gwmetrics.HELD._value.get() == before
        finally:
            for w in conns:
                w.close()
            await gw.cleanup()
            await px.close()
    run(go)


def test_the_total_of_held_calls_is_bounded_across_runtimes() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        held_runtime(vw, admission=5)
        other = runtime(gen=1, uid="u2", admission=5)
        other["metadata"]["name"] = "other"
        vw.runtimes.apply(other)
        px, gw, port = await gateway(vw, st, max_held_per_runtime=10, max_held_total=3)
        conns = []
        try:
            answers = []
            for host in ("tool", "tool", "other", "other", "tool"):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                body = b'{"jsonrpc":"2.0","id":1,"method":"m"}'
                writer.write(f"POST /mcp HTTP/1.1\r\nHost: {host}.{NS}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
                conns.append(writer)
                answers.append(await answered(reader, 0.3))
            assert answers[:3] == [None, None, None]
            assert all(a is not None and b"Baton-Reason: Overloaded" in a and b"503" in a.split(b"\r\n")[0] for a in answers[3:])
            assert b"gateway" in answers[3] or b"held in all" in answers[3]
        finally:
            for w in conns:
                w.close()
            await gw.cleanup()
            await px.close()
    run(go)


def test_held_bytes_are_bounded_per_runtime_and_in_all_and_never_starve_a_serving_runtime() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        held_runtime(vw, admission=5)
        seen: list[int] = []
        b2, p2 = await backend(2, seen)
        victim = runtime(gen=2, uid="v1", admission=5)
        victim["metadata"]["name"] = "victim"
        vw.runtimes.apply(victim)
        victim_pod = pod("v1", p2)
        victim_pod["metadata"]["name"] = "victim"
        victim_pod["metadata"]["labels"]["baton.dev/runtime"] = "victim"
        vw.pods.apply(victim_pod)
        # 400 KiB of bodies in all; held ones at most 300 KiB, 200 KiB of them for one runtime.
        px, gw, port = await gateway(vw, st, max_buffered_bytes=400 * 1024, max_held_bytes_per_runtime=200 * 1024)
        conns = []
        try:
            body = b"x" * (100 * 1024)  # larger than a small body: buffered once held
            answers = []
            for _ in range(3):
                reader, writer = await open_call(port, body)
                conns.append(writer)
                answers.append(await answered(reader, 0.5))
            assert answers[:2] == [None, None]
            assert answers[2] is not None and b"Baton-Reason: Overloaded" in answers[2] and b"for this runtime" in answers[2], answers[2]
            assert st.held_bytes[(NS, "tool")] <= 200 * 1024 and st.buffered_bytes <= 400 * 1024
            # A serving runtime's calls still have the quarter kept for them.
            status, headers, got, _ = await post(port, b'{"jsonrpc":"2.0","id":1,"method":"m","pad":"' + b"p" * 60000 + b'"}',
                                                 host=f"victim.{NS}")
            assert status == 200 and json.loads(got)["gen"] == 2
        finally:
            for w in conns:
                w.close()
            await gw.cleanup()
            await px.close()
            await b2.cleanup()
        await until(lambda: st.buffered_bytes == 0 and st.held_bytes_total == 0 and not st.held_bytes)
    run(go)


def test_a_slow_body_counts_against_admission_seconds() -> None:
    """Review item 2: a held call's body dribbled in kept its slot for 14 s against 2 s."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        held_runtime(vw, admission=1)
        px, gw, port = await gateway(vw, st)
        try:
            reader, writer = await open_call(port, b"x" * 1000, length=200_000)
            t0 = time.monotonic()
            for _ in range(40):  # 0.25 s apart: 10 s of dribble at most
                got = await answered(reader, 0.25)
                if got is not None:
                    break
                writer.write(b"x" * 1000)
            took = time.monotonic() - t0
            assert got is not None and b"503" in got.split(b"\r\n")[0] and b"Baton-Reason: Transitioning" in got, got
            assert took < 2.5, took
            writer.close()
            await until(lambda: not st.held)
        finally:
            await gw.cleanup()
            await px.close()
    run(go)


def test_a_held_call_whose_client_left_reaches_no_tool() -> None:
    """Review item 3: a held call whose socket closed was still forwarded to N+1 once it served."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        b2, p2 = await backend(2, seen)
        vw.runtimes.apply(runtime(gen=1, uid="u1", transition={"kind": "Handoff", "fromUid": "u1", "step": "Draining"}))
        vw.pods.apply(pod("u1", 1, serving="false"))
        before = gwmetrics.calls("cancelled", "")._value.get()
        px, gw, port = await gateway(vw, st)
        try:
            reader, writer = await open_call(port, b'{"jsonrpc":"2.0","id":"ghost-1","method":"send_email"}')
            await until(lambda: st.held.get((NS, "tool")) == 1)
            writer.close()
            await until(lambda: not st.held)
            # N+1 serves now: nothing is left to forward.
            vw.pods.delete(pod("u1", 1, serving="false", rv=2))
            vw.pods.apply(pod("u2", p2, rv=3))
            vw.runtimes.apply(runtime(gen=2, uid="u2", rv=4))
            status, _, body, _ = await post(port)
            assert status == 200 and json.loads(body)["gen"] == 2, body
            assert seen == [2], seen  # only the live call, never the ghost
            assert gwmetrics.calls("cancelled", "")._value.get() - before == 1
        finally:
            await gw.cleanup()
            await px.close()
            await b2.cleanup()
    run(go)


def test_a_forwarded_call_whose_client_left_is_cut_upstream() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        upstream_gone = asyncio.Event()

        async def slow(request: web.Request) -> web.StreamResponse:
            await request.read()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                upstream_gone.set()  # aiohttp cancels a handler whose client (the gateway) left
                raise
            return web.json_response({})
        app = web.Application(handler_args={"handler_cancellation": True})
        app.router.add_route("*", "/{tail:.*}", slow)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", runner.addresses[0][1]))
        px, gw, port = await gateway(vw, st)
        before = gwmetrics.CUT_UPSTREAM._value.get()
        try:
            reader, writer = await open_call(port)
            await until(lambda: st.total_inflight() == 1)
            writer.close()
            await asyncio.wait_for(upstream_gone.wait(), 5)
            await until(lambda: st.total_inflight() == 0)
            assert gwmetrics.CUT_UPSTREAM._value.get() - before == 1
        finally:
            await gw.cleanup()
            await px.close()
            await runner.cleanup()
    run(go)


def test_connections_are_bounded_in_total_and_per_client_address() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        px = proxy.Proxy(settings=settings(), views=vw, state=st, forwarding=lambda: True)
        await px.start()
        calls = listener.CallsListener(px.handle, ("127.0.0.1", 0), header_seconds=5, max_connections=4,
                                       max_connections_per_client=2)
        await calls.start()
        port = calls.port()
        opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            for _ in range(2):
                opened.append(await asyncio.open_connection("127.0.0.1", port))
            # A third from the same address: 503 at once, closed.
            r, w = await asyncio.open_connection("127.0.0.1", port)
            got = await answered(r, 2)
            assert got is not None and got.startswith(b"HTTP/1.1 503") and b"Baton-Reason: Overloaded" in got, got
            w.close()
            # Other addresses (127.0.0.2, .3) fill the total of 4; the fifth is refused.
            for src in ("127.0.0.2", "127.0.0.3"):
                opened.append(await asyncio.open_connection("127.0.0.1", port, local_addr=(src, 0)))
            await until(lambda: calls.open_connections() == 4)
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.4", 0))
            got = await answered(r, 2)
            assert got is not None and got.startswith(b"HTTP/1.1 503"), got
            w.close()
            # One closes: a place frees.
            opened.pop()[1].close()
            await until(lambda: calls.open_connections() == 3)
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.4", 0))
            assert await answered(r, 0.3) is None  # accepted, waiting for its head
            w.close()
        finally:
            for _, w in opened:
                w.close()
            await calls.cleanup()
            await px.close()
    run(go)


def test_blank_lines_before_the_head_do_not_escape_the_header_deadline() -> None:
    """Review item 2: llhttp skips leading blank lines, and the deadline took them for the end
    of a head: the connection then lived for aiohttp's keep-alive (75 s)."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        px = proxy.Proxy(settings=settings(), views=vw, state=st, forwarding=lambda: True)
        await px.start()
        calls = listener.CallsListener(px.handle, ("127.0.0.1", 0), header_seconds=1)
        await calls.start()
        try:
            with socket.create_connection(("127.0.0.1", calls.port()), timeout=5) as s:
                t0 = time.monotonic()
                s.sendall(b"\r\n\r\n")
                closed_at = None
                for byte in b"POST /mcp HTTP/1.1\r\nHost: tool.ns\r\n":
                    try:
                        s.sendall(bytes([byte]))
                    except OSError:
                        closed_at = time.monotonic() - t0
                        break
                    await asyncio.sleep(0.2)
                if closed_at is None:
                    s.settimeout(3)
                    assert s.recv(100) == b""
                    closed_at = time.monotonic() - t0
            assert closed_at < 2.5, closed_at
        finally:
            await calls.cleanup()
            await px.close()
    run(go)


def test_at_the_seal_quiet_streams_end_and_calls_do_not() -> None:
    """Review item 7: a GET event stream or a WebSocket that carries nothing never ends, and held
    the drain to drainSeconds. Sealed and quiet: the event stream ends cleanly, the WebSocket
    with 1012; a POST still being answered is a call and goes on."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        release = asyncio.Event()

        async def pod_handler(request: web.Request) -> web.StreamResponse:
            if request.headers.get("Upgrade", "").lower() == "websocket":
                ws = web.WebSocketResponse()
                await ws.prepare(request)
                async for _ in ws:
                    pass
                return ws
            if request.method == "GET":  # an endless, quiet event stream
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(b"data: hello\n\n")
                await asyncio.sleep(30)
                return resp
            await request.read()  # a call whose answer streams, slowly
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b"data: working\n\n")
            await release.wait()
            await resp.write(b"data: done\n\n")
            return resp
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", pod_handler)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", runner.addresses[0][1]))
        px, gw, port = await gateway(vw, st)
        try:
            async with aiohttp.ClientSession() as s:
                sse = await s.get(f"http://127.0.0.1:{port}/mcp", headers={"Host": f"tool.{NS}"})
                assert await sse.content.readline() == b"data: hello\n"
                ws = await s.ws_connect(f"http://127.0.0.1:{port}/ws", headers={"Host": f"tool.{NS}"})
                call = await s.post(f"http://127.0.0.1:{port}/mcp", data=b"{}", headers={"Host": f"tool.{NS}"})
                assert await call.content.readline() == b"data: working\n"
                await until(lambda: st.inflight["u1"] == 3)
                assert st.streams.end_idle(sealed=st.sealed, idle_seconds=0) == 0  # not sealed: nothing ends
                st.seal("u1", (NS, "tool"))
                assert st.streams.end_idle(sealed=st.sealed, idle_seconds=0) == 2
                rest = await asyncio.wait_for(sse.content.read(), 5)  # a clean end: no error raised
                assert rest in (b"", b"\n")
                msg = await asyncio.wait_for(ws.receive(), 5)
                assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.SERVICE_RESTART
                await until(lambda: st.inflight["u1"] == 1)  # the call goes on
                release.set()
                assert b"data: done" in await asyncio.wait_for(call.content.read(), 5)
                await until(lambda: st.total_inflight() == 0)
                await ws.close()
        finally:
            await gw.cleanup()
            await px.close()
            await runner.cleanup()
    run(go)


def test_what_reaches_the_pod_is_what_the_gateway_vouches_for() -> None:
    """Review items 13, 14, 15, 16: CONNECT and TRACE refused; the client's X-Forwarded-For and
    Forwarded replaced by the gateway's; Connection cannot strip Host; a HEAD's target reaches
    the pod verbatim (as a POST's does); a pod's own Baton-Reason is not passed on; a hostNetwork
    pod is never dialled; a refusal of a chunked JSON-RPC body keeps its id; UnknownRuntime closes
    the connection (a client of a runtime turned `gateway: false` reconnects)."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        got: list[tuple[str, str, dict[str, str]]] = []

        async def pod_handler(request: web.Request) -> web.StreamResponse:
            got.append((request.method, request.raw_path, dict(request.headers)))
            return web.Response(text="ok", headers={"Baton-Reason": "Suspended"})
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", pod_handler)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", runner.addresses[0][1]))
        px, gw, port = await gateway(vw, st)

        async def raw(data: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            try:
                return await asyncio.wait_for(reader.read(65536), 5)
            finally:
                writer.close()
        try:
            for method in ("CONNECT", "TRACE"):
                answer = await raw(f"{method} /mcp HTTP/1.1\r\nHost: tool.{NS}\r\n\r\n".encode())
                assert answer.startswith(b"HTTP/1.1 400") and b"BadRequest" in answer, answer
            assert got == []
            answer = await raw(f"POST /mcp HTTP/1.1\r\nHost: tool.{NS}\r\nX-Forwarded-For: 10.9.9.9\r\n"
                               f"Forwarded: for=10.9.9.9\r\nConnection: Host\r\nContent-Length: 2\r\n\r\n{{}}".encode())
            assert answer.startswith(b"HTTP/1.1 200") and b"Baton-Reason" not in answer, answer
            _, _, headers = got[-1]
            assert headers["X-Forwarded-For"] == "127.0.0.1" and "Forwarded" not in headers
            assert headers["Host"] == f"tool.{NS}"
            await raw(f"HEAD /a/../b/%2e%2e/c%7e HTTP/1.1\r\nHost: tool.{NS}\r\n\r\n".encode())
            assert got[-1][:2] == ("HEAD", "/a/../b/%2e%2e/c%7e")
            # A chunked JSON-RPC body refused (the runtime suspended): the error carries its id.
            vw.runtimes.apply(runtime(gen=1, uid="u1", rv=2, suspend=True))
            answer = await raw(f"POST /mcp HTTP/1.1\r\nHost: tool.{NS}\r\nTransfer-Encoding: chunked\r\n\r\n"
                               "10\r\n{\"jsonrpc\":\"2.0\"\r\n".encode() + b"16\r\n,\"id\":42,\"method\":\"x\"}\r\n0\r\n\r\n")
            assert b"Suspended" in answer and json.loads(answer.split(b"\r\n\r\n", 1)[1])["id"] == 42, answer
            # A hostNetwork pod: its IP is the node's; never dialled.
            vw.runtimes.apply(runtime(gen=1, uid="u1", rv=3))
            host_pod = pod("u1", runner.addresses[0][1], rv=2)
            host_pod["spec"]["hostNetwork"] = True
            vw.pods.apply(host_pod)
            before = len(got)
            status, headers, _, _ = await post(port)
            assert status == 503 and headers["Baton-Reason"] == "AddressNotAllowed" and len(got) == before
            # UnknownRuntime: answered, and the connection closed.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET / HTTP/1.1\r\nHost: nothing.{NS}\r\n\r\n".encode())
            answer = await asyncio.wait_for(reader.read(), 5)  # read to EOF: the gateway closed
            assert b"UnknownRuntime" in answer and b"Connection: close" in answer
            writer.close()
        finally:
            await gw.cleanup()
            await px.close()
            await runner.cleanup()
    run(go)


def test_an_answer_with_a_transfer_coding_besides_chunked_is_refused_not_passed_on_undone() -> None:
    """Review item 16: `Transfer-Encoding: gzip, chunked` was de-chunked and the gzip dropped."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)

        async def pod_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nxxxxx\r\n0\r\n\r\n")
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(pod_server, "127.0.0.1", 0)
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", server.sockets[0].getsockname()[1]))
        px, gw, port = await gateway(vw, st)
        try:
            status, headers, _, _ = await post(port, b"{}")
            assert status == 502 and headers["Baton-Reason"] == "UpstreamError"
        finally:
            await gw.cleanup()
            await px.close()
            server.close()
    run(go)


def test_a_bad_websocket_handshake_reaches_no_pod() -> None:
    """Review item 12: the pod's WebSocket was opened (with the gateway's own key) before the
    client's handshake was checked, and leaked when that check failed."""
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        upgrades: list[str] = []

        async def pod_handler(request: web.Request) -> web.StreamResponse:
            upgrades.append(request.method)
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for _ in ws:
                pass
            return ws
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", pod_handler)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        vw.runtimes.apply(runtime(gen=1, uid="u1"))
        vw.pods.apply(pod("u1", runner.addresses[0][1]))
        px, gw, port = await gateway(vw, st)
        try:
            for head in (f"GET /ws HTTP/1.1\r\nHost: tool.{NS}\r\nUpgrade: websocket\r\n\r\n",
                         f"POST /ws HTTP/1.1\r\nHost: tool.{NS}\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
                         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(head.encode())
                answer = await asyncio.wait_for(reader.read(65536), 5)
                writer.close()
                assert answer.startswith(b"HTTP/1.1 400") and b"Baton-Reason: BadRequest" in answer, answer
            assert upgrades == [] and st.total_inflight() == 0
            # A good handshake still goes through.
            async with aiohttp.ClientSession() as s:
                ws = await s.ws_connect(f"http://127.0.0.1:{port}/ws", headers={"Host": f"tool.{NS}"})
                await ws.close()
            assert upgrades == ["GET"]
        finally:
            await gw.cleanup()
            await px.close()
            await runner.cleanup()
    run(go)
