"""baton.gateway.http1 (and the baton.gateway.http1conn connections it pools) over real loopback
sockets, against servers that write exact bytes: the answer's framings (length, chunked, until
close, 1xx first), connection reuse only after a whole answer with keep-alive, a pooled connection
the pod closed is never written to, a broken answer fails the call and its connection, the pool's
bounds, and the request head it writes."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Awaitable, Callable

import pytest

from baton.gateway import http1, http1conn

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Pod:
    """A loopback server that runs `script` per connection and records each request it read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.dropped = 0  # requests read and never answered (the connection closed instead)
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> Pod:
        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.script(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
        self.server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        req = head + (await reader.readexactly(length) if length else b"")
        self.requests.append(req)
        return req

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


def keep_answering(answer: bytes, times: int = 100) -> Callable[[Pod], Script]:
    def make(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(times):
                await pod.read_request(reader)
                writer.write(answer)
                await writer.drain()
        return script
    return make


async def pod_with(make: Callable[[Pod], Script]) -> Pod:
    pod = Pod(lambda r, w: asyncio.sleep(0))
    pod.script = make(pod)
    return await pod.start()


def key(pod: Pod) -> http1.Key:
    return ("uid-1", "127.0.0.1", pod.port)


HEAD = http1.request_head(method="POST", target="/mcp", headers=[("Host", "tool.ns")], body_size=2) + b"{}"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello"


async def call(pool: http1.Pool, pod: Pod, data: bytes = HEAD,
               to: http1.Key | None = None) -> tuple[int, str, list[tuple[str, str]], bytes]:
    conn = await asyncio.wait_for(pool.call(key=to or key(pod), data=data, connect_timeout=1.0), 5)
    try:
        body = await asyncio.wait_for(conn.read_whole(), 5)
    finally:
        conn.release()
    return conn.status, conn.reason, conn.headers, body


def test_request_head_sets_its_own_length_and_none_for_a_bodyless_get() -> None:
    post = http1.request_head(method="POST", target="/mcp?x=1", headers=[("Host", "a.b"), ("Accept", "*/*")], body_size=7)
    assert post == b"POST /mcp?x=1 HTTP/1.1\r\nHost: a.b\r\nAccept: */*\r\nContent-Length: 7\r\n\r\n"
    assert http1.request_head(method="GET", target="/", headers=[("Host", "a.b")], body_size=None) \
        == b"GET / HTTP/1.1\r\nHost: a.b\r\n\r\n"
    # A body-less POST says so (as aiohttp's client does), or a pod would wait for a body.
    assert b"Content-Length: 0\r\n" in http1.request_head(method="POST", target="/", headers=[], body_size=None)


def test_a_whole_answer_is_read_and_its_connection_reused() -> None:
    async def main() -> None:
        pod = await pod_with(keep_answering(OK))
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        for _ in range(3):
            status, reason, headers, body = await call(pool, pod)
            assert (status, reason, body) == (200, "OK", b"hello")
            assert ("Content-Type", "application/json") in headers
        assert pod.connections == 1
        assert len(pod.requests) == 3 and pod.requests[0].endswith(b"Content-Length: 2\r\n\r\n{}")
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_chunked_answers_stream_and_informational_answers_are_skipped() -> None:
    answer = (b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
              b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
              b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\n")

    async def main() -> None:
        pod = await pod_with(keep_answering(answer))
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        conn = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        assert conn.status == 200 and conn.content_length() is None
        assert [k for k, _ in conn.headers] == ["Transfer-Encoding", "Content-Type"]  # not the 103's Link
        chunks = []
        while chunk := await asyncio.wait_for(conn.read_chunk(), 5):
            chunks.append(chunk)
        conn.release()
        assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\n"
        await call(pool, pod)  # the same connection answers again
        assert pod.connections == 1
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_an_answer_delimited_by_the_close_is_whole_and_its_connection_not_reused() -> None:
    def make(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await pod.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ")
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"part two")
            await writer.drain()
        return script

    async def main() -> None:
        pod = await pod_with(make)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        assert (await call(pool, pod))[3] == b"part one, part two"
        assert (await call(pool, pod))[3] == b"part one, part two"
        assert pod.connections == 2
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_pooled_connection_the_pod_closed_is_not_written_to() -> None:
    def make(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await pod.read_request(reader)
            writer.write(OK)  # keep-alive by HTTP/1.1, then closed while idle in the pool
            await writer.drain()
        return script

    async def main() -> None:
        pod = await pod_with(make)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        await call(pool, pod)
        await asyncio.sleep(0.1)  # the FIN arrives: the connection leaves the pool
        assert pool.open_count() == 0
        assert (await call(pool, pod))[3] == b"hello"
        assert pod.connections == 2 and len(pod.requests) == 2
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_an_answer_not_read_in_full_closes_its_connection() -> None:
    async def main() -> None:
        pod = await pod_with(keep_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"))  # 5 of 10
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        conn = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        assert await asyncio.wait_for(conn.read_chunk(), 5) == b"hello"
        conn.release()  # the caller gave up on the rest
        await asyncio.sleep(0.05)
        assert pool.open_count() == 0
        pool.close()
        await pod.stop()
    asyncio.run(main())


@pytest.mark.parametrize("answer,why", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", "two lengths"),
    (b"NOT HTTP AT ALL\r\n\r\n", "no status line"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", "an upgrade nobody asked for"),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (http1conn.MAX_HEAD_BYTES + 10) + b"\r\n\r\n", "a head past the bound"),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (4 * http1conn.MAX_HEAD_BYTES), "a header line with no end"),
])
def test_a_broken_answer_fails_the_call_and_its_connection_is_never_reused(answer: bytes, why: str) -> None:
    async def main() -> None:
        loop_errors: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: loop_errors.append(context))
        pod = await pod_with(keep_answering(answer))
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        with pytest.raises(http1conn.UpstreamFailed):
            conn = await asyncio.wait_for(pool.call(key=key(pod), data=HEAD, connect_timeout=1.0), 5)
            try:
                await asyncio.wait_for(conn.read_whole(), 5)
                await asyncio.sleep(0.05)  # bytes after a whole answer arrive after it
                assert conn.error is not None, why
                raise conn.error
            finally:
                conn.release()
        await asyncio.sleep(0.05)
        assert pool.open_count() == 0, why
        assert not loop_errors, loop_errors  # failed by the protocol, not by asyncio's fatal-error path
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_pod_that_closes_before_answering_fails_the_call_after_it_was_sent() -> None:
    def make(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await pod.read_request(reader)  # read, then gone without a word
        return script

    async def main() -> None:
        pod = await pod_with(make)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        with pytest.raises(http1conn.UpstreamFailed):
            await asyncio.wait_for(pool.call(key=key(pod), data=HEAD, connect_timeout=1.0), 5)
        assert len(pod.requests) == 1
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_nothing_listening_is_a_connect_failure() -> None:
    async def main() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # bound, not listening: refused
            pool = http1.Pool(limit=8, keepalive_seconds=30)
            with pytest.raises(http1.ConnectFailed):
                await pool.call(key=("uid-1", "127.0.0.1", port), data=HEAD, connect_timeout=1.0)
            assert pool.open_count() == 0
    asyncio.run(main())


def test_idle_connections_expire_and_the_limit_is_kept() -> None:
    now = [0.0]

    async def main() -> None:
        pod = await pod_with(keep_answering(OK))
        pool = http1.Pool(limit=1, keepalive_seconds=30, clock=lambda: now[0])
        await call(pool, pod)
        now[0] = 31.0  # past keep-alive: closed, not reused
        await call(pool, pod)
        assert pod.connections == 2
        # At the limit, the idle connection to uid-1 gives its place to a call to uid-2.
        conn = await pool.call(key=("uid-2", "127.0.0.1", pod.port), data=HEAD, connect_timeout=5.0)
        assert await conn.read_whole() == b"hello"
        conn.release()
        assert pod.connections == 3 and pool.open_count() == 1
        # One in use: a call to another pod waits for it, and gets its place once it is released.
        first = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        second = asyncio.ensure_future(pool.call(key=("uid-3", "127.0.0.1", pod.port), data=HEAD, connect_timeout=5.0))
        await asyncio.sleep(0.1)
        assert not second.done() and pool.open_count() == 1
        assert await first.read_whole() == b"hello"
        first.release()
        conn = await asyncio.wait_for(second, 5)
        assert await conn.read_whole() == b"hello"
        conn.release()
        assert pool.open_count() == 1
        # Nothing frees a place within the pool timeout: PoolBusy (not a pod's refusal), nothing sent.
        held = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        sent = len(pod.requests)
        with pytest.raises(http1.PoolBusy):
            await pool.call(key=("uid-4", "127.0.0.1", pod.port), data=HEAD, connect_timeout=1.0, pool_timeout=0.2)
        assert not isinstance(http1.PoolBusy(), http1.ConnectFailed)
        assert len(pod.requests) == sent
        await held.read_whole()
        held.release()
        pool.close()
        await pod.stop()
    asyncio.run(main())


def closes_idle_after(seconds: float, clock: Callable[[], float], answer: bytes = OK) -> Callable[[Pod], Script]:
    """A pod whose keep-alive ends `seconds` after its last answer, its close crossing our next
    write every time: a request that comes later on the connection is read and never answered
    (the race a real server's idle close makes now and then, made certain)."""
    def make(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            answered_at: float | None = None
            while True:
                await pod.read_request(reader)
                if answered_at is not None and clock() - answered_at >= seconds:
                    pod.dropped += 1
                    return
                writer.write(answer)
                await writer.drain()
                answered_at = clock()
        return script
    return make


def test_idle_connections_expire_before_common_servers_close_them() -> None:
    """uvicorn, Hypercorn and Node close an idle connection after 5 s: by default the pool stops
    reusing one well before, so no call is written on a connection the pod is closing."""
    now = [0.0]

    async def main() -> None:
        pod = await pod_with(closes_idle_after(5.0, lambda: now[0]))
        pool = http1.Pool(limit=8, clock=lambda: now[0])
        for gap in [1.0, 6.0, 4.9] * 5:
            assert (await call(pool, pod))[3] == b"hello"
            now[0] += gap
        assert pod.dropped == 0
        assert pod.connections == 10  # 15 calls: reused after 1 s, a new one after 6 s and after 4.9 s
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_the_reviews_reproduction_sequential_calls_past_a_short_server_keepalive() -> None:
    """Review item 11 on the real clock, scaled: a pod keeps idle connections 0.2 s, the calls
    come 0.15-0.25 s apart; with the pool's expiry below the pod's, none is lost."""
    async def main() -> None:
        pod = await pod_with(closes_idle_after(0.2, time.monotonic))
        pool = http1.Pool(limit=8, keepalive_seconds=0.1)
        failed = 0
        for i in range(16):
            try:
                await call(pool, pod)
            except http1conn.UpstreamFailed:
                failed += 1
            await asyncio.sleep(0.15 + 0.1 * (i % 2))
        assert (failed, pod.dropped) == (0, 0)
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_keep_alive_timeout_in_the_answer_is_honoured() -> None:
    now = [0.0]
    hinted = b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=3, max=100\r\nContent-Length: 5\r\n\r\nhello"

    async def main() -> None:
        pod = await pod_with(closes_idle_after(3.0, lambda: now[0], hinted))
        pool = http1.Pool(limit=8, keepalive_seconds=30, clock=lambda: now[0])
        for gap in [1.5, 2.5, 3.5] * 3:
            assert (await call(pool, pod))[3] == b"hello"
            now[0] += gap
        # Kept for timeout - 1 s (the hint's margin): reused after 1.5 s, not after 2.5 s or 3.5 s.
        assert (pod.dropped, pod.connections) == (0, 6)
        pool.close()
        await pod.stop()
    asyncio.run(main())


@pytest.mark.parametrize("header", [b"Keep-Alive: timeout=0", b"Keep-Alive: timeout=1", b"Connection: close"])
def test_an_answer_that_says_not_to_keep_the_connection_is_not_reused(header: bytes) -> None:
    async def main() -> None:
        pod = await pod_with(keep_answering(b"HTTP/1.1 200 OK\r\n" + header + b"\r\nContent-Length: 5\r\n\r\nhello"))
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        for _ in range(3):
            assert (await call(pool, pod))[3] == b"hello"
        assert pod.connections == 3
        pool.close()
        await pod.stop()
    asyncio.run(main())


def drops_the_second_request(pod: Pod) -> Script:
    """Answers a connection's first request; the second is read and the connection closed."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await pod.read_request(reader)
        writer.write(OK)
        await writer.drain()
        await pod.read_request(reader)
        pod.dropped += 1
    return script


GET = http1.request_head(method="GET", target="/sse", headers=[("Host", "tool.ns")], body_size=None)
PUT = http1.request_head(method="PUT", target="/x", headers=[("Host", "tool.ns")], body_size=2) + b"{}"
KEYED_POST = http1.request_head(method="POST", target="/mcp", headers=[("Host", "tool.ns"), ("idempotency-key", "k1")],
                                body_size=2) + b"{}"


@pytest.mark.parametrize("data", [GET, PUT, KEYED_POST], ids=["GET", "PUT", "POST with Idempotency-Key"])
def test_an_idempotent_call_is_written_once_more_when_a_reused_connection_closes_at_the_write(data: bytes) -> None:
    async def main() -> None:
        pod = await pod_with(drops_the_second_request)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        assert (await call(pool, pod, data))[3] == b"hello"
        assert (await call(pool, pod, data))[3] == b"hello"  # the reused one closed: again on a new one
        assert (pod.dropped, pod.connections, len(pod.requests)) == (1, 2, 3)
        assert pool.open_count() == 1
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_post_is_never_written_twice() -> None:
    async def main() -> None:
        pod = await pod_with(drops_the_second_request)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        await call(pool, pod)
        with pytest.raises(http1conn.UpstreamFailed):
            await call(pool, pod)
        assert (pod.dropped, pod.connections, len(pod.requests)) == (1, 1, 2)
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_get_is_not_written_again_when_a_new_connection_fails_or_answer_bytes_came() -> None:
    def closes_at_once(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await pod.read_request(reader)  # a new connection: the pod itself fails the call
        return script

    def half_answers_the_second(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await pod.read_request(reader)
            writer.write(OK)
            await writer.drain()
            await pod.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-")  # the pod began answering: it saw the call
            await writer.drain()
        return script

    async def main() -> None:
        pod = await pod_with(closes_at_once)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        with pytest.raises(http1conn.UpstreamFailed):
            await call(pool, pod, GET)
        assert (pod.connections, len(pod.requests)) == (1, 1)
        await pod.stop()
        pod = await pod_with(half_answers_the_second)
        await call(pool, pod, GET)
        with pytest.raises(http1conn.UpstreamFailed):
            await call(pool, pod, GET)
        assert (pod.connections, len(pod.requests)) == (1, 2)
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_pod_at_its_connection_limit_does_not_block_another_and_its_wait_is_bounded() -> None:
    async def main() -> None:
        pod = await pod_with(keep_answering(OK))
        pool = http1.Pool(limit=4, limit_per_key=2, keepalive_seconds=30)
        a, b = key(pod), ("uid-2", "127.0.0.1", pod.port)
        a1 = await pool.call(key=a, data=HEAD, connect_timeout=1.0)  # two long calls hold a's places
        a2 = await pool.call(key=a, data=HEAD, connect_timeout=1.0)
        sent = len(pod.requests)
        with pytest.raises(http1.PoolBusy):
            await pool.call(key=a, data=HEAD, connect_timeout=1.0, pool_timeout=0.2)
        assert len(pod.requests) == sent  # nothing sent
        assert (await call(pool, pod, to=b))[3] == b"hello"  # another pod is not kept waiting
        # A call waiting for a's place gets a's connection once one is released.
        waiting = asyncio.ensure_future(pool.call(key=a, data=HEAD, connect_timeout=1.0, pool_timeout=5.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        assert await a1.read_whole() == b"hello"
        a1.release()
        a3 = await asyncio.wait_for(waiting, 5)
        assert await a3.read_whole() == b"hello"
        a3.release()
        assert pod.connections == 3  # a1's, a2's and b's: the waiting call reused a1's
        # A connection to a that closes gives its place to a waiting call too.
        a4 = await pool.call(key=a, data=HEAD, connect_timeout=1.0)
        waiting = asyncio.ensure_future(pool.call(key=a, data=HEAD, connect_timeout=1.0, pool_timeout=5.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        a2.abort()
        a2.release()
        a5 = await asyncio.wait_for(waiting, 5)
        for conn in (a4, a5):
            assert await conn.read_whole() == b"hello"
            conn.release()
        assert pool.open_count() == 3
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_a_reset_during_a_body_delimited_by_the_close_fails_the_call() -> None:
    def make(pod: Pod) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await pod.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ")
            await writer.drain()
            await asyncio.sleep(0.05)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
            writer.transport.abort()
        return script

    async def main() -> None:
        pod = await pod_with(make)
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        conn = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        with pytest.raises(http1conn.UpstreamFailed):
            await asyncio.wait_for(conn.read_whole(), 5)
        conn.release()
        pool.close()
        await pod.stop()
    asyncio.run(main())


@pytest.mark.parametrize("answer,why", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA", "bytes after the answer"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", "two answers"),
])
def test_stray_bytes_after_a_whole_answer_deliver_it_and_the_connection_is_not_reused(answer: bytes, why: str) -> None:
    async def main() -> None:
        pod = await pod_with(keep_answering(answer))
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        conn = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        await asyncio.sleep(0.05)  # every byte is in before the caller reads
        assert (conn.status, await asyncio.wait_for(conn.read_whole(), 5)) == (200, b"hello"), why
        conn.release()
        assert pool.open_count() == 0, why
        assert (await call(pool, pod))[3] == b"hello"
        assert pod.connections == 2, why
        pool.close()
        await pod.stop()
    asyncio.run(main())


def test_which_calls_may_be_written_twice() -> None:
    assert http1.replayable(GET) and http1.replayable(PUT) and http1.replayable(KEYED_POST)
    assert not http1.replayable(HEAD)  # a POST: a tool call
    fooled = http1.request_head(method="POST", target="/x", headers=[("X-Note", "idempotency-key: 1")], body_size=0)
    assert not http1.replayable(fooled)  # the name must be a field's own


@pytest.mark.parametrize("kwargs,field", [
    ({"limit": 0}, "limit"), ({"limit": 4, "limit_per_key": 5}, "limit_per_key"),
    ({"limit": 4, "limit_per_key": 0}, "limit_per_key"), ({"limit": 4, "keepalive_seconds": -1.0}, "keepalive_seconds"),
])
def test_bad_pool_bounds_are_refused_by_name(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        http1.Pool(**kwargs)  # type: ignore[arg-type]
