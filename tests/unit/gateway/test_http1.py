"""baton.gateway.http1 over real loopback sockets, against servers that write exact bytes: the
answer's framings (length, chunked, until close, 1xx first), connection reuse only after a whole
answer with keep-alive, a pooled connection the pod closed is never written to, a broken answer
fails the call and its connection, the pool's bounds, and the request head it writes."""

from __future__ import annotations

import asyncio
import socket
from typing import Awaitable, Callable

import pytest

from baton.gateway import http1

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Pod:
    """A loopback server that runs `script` per connection and records each request it read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
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


async def call(pool: http1.Pool, pod: Pod, data: bytes = HEAD) -> tuple[int, str, list[tuple[str, str]], bytes]:
    conn = await pool.call(key=key(pod), data=data, connect_timeout=1.0)
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
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA", "bytes after the answer"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", "two answers"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", "two lengths"),
    (b"NOT HTTP AT ALL\r\n\r\n", "no status line"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", "an upgrade nobody asked for"),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (http1.MAX_HEAD_BYTES + 10) + b"\r\n\r\n", "a head past the bound"),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (4 * http1.MAX_HEAD_BYTES), "a header line with no end"),
])
def test_a_broken_answer_fails_the_call_and_its_connection_is_never_reused(answer: bytes, why: str) -> None:
    async def main() -> None:
        loop_errors: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: loop_errors.append(context))
        pod = await pod_with(keep_answering(answer))
        pool = http1.Pool(limit=8, keepalive_seconds=30)
        with pytest.raises(http1.UpstreamFailed):
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
        with pytest.raises(http1.UpstreamFailed):
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
        # Nothing frees a place within the connect timeout: nothing is sent.
        held = await pool.call(key=key(pod), data=HEAD, connect_timeout=1.0)
        sent = len(pod.requests)
        with pytest.raises(http1.ConnectFailed):
            await pool.call(key=("uid-4", "127.0.0.1", pod.port), data=HEAD, connect_timeout=0.2)
        assert len(pod.requests) == sent
        await held.read_whole()
        held.release()
        pool.close()
        await pod.stop()
    asyncio.run(main())
