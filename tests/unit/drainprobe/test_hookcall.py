"""A hook's POST (baton.hookcall) against real sockets on loopback: the fence in its headers and
body, 2xx succeeds and anything else fails with what was answered (bounded), one deadline, no
redirect followed, nothing dialled outside the allowed CIDRs."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from typing import Awaitable, Callable

from baton import hookcall
from baton.model import names
from baton.model import spec as sp

LOOP = (ipaddress.ip_network("127.0.0.0/8"),)
FENCE = hookcall.Fence(namespace="agents", runtime="search", generation=7, fencing_token=12, hook="preRetire",
                       pod="search")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def pod(ip: str = "127.0.0.1") -> dict[str, object]:
    return {"status": {"podIP": ip}, "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 1}]}]}}


async def run_call(handler: Handler, *, timeout: float = 2.0, ip: str = "127.0.0.1",
                   path: str = "/release") -> tuple[hookcall.Result, float]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        t0 = time.monotonic()
        got = await hookcall.Caller(allowed=LOOP).call(pod=pod(ip), post=sp.HttpPost(path=path, port=port), fence=FENCE,
                                                       timeout=timeout, timeout_seconds=int(timeout))
        return got, time.monotonic() - t0
    finally:
        server.close()


def answer(raw: bytes, seen: list[bytes] | None = None) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        body = await reader.readexactly(length)
        if seen is not None:
            seen.append(head + body)
        writer.write(raw)
        await writer.drain()
        writer.close()
    return handle


def test_the_fence_goes_in_the_headers_and_the_body() -> None:
    seen: list[bytes] = []
    got, _ = asyncio.run(run_call(answer(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nreleased", seen)))
    assert got == hookcall.Result(True, "answered 200: released")
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /release HTTP/1.1"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers[names.HEADER_RUNTIME] == "agents/search"
    assert headers[names.HEADER_GENERATION] == "7" and headers[names.HEADER_FENCING_TOKEN] == "12"
    assert headers[names.HEADER_HOOK] == "preRetire"
    assert json.loads(body) == {"runtime": "search", "namespace": "agents", "generation": 7, "fencingToken": 12,
                                "hook": "preRetire", "pod": "search"}


def test_a_non_2xx_fails_with_what_it_answered_bounded() -> None:
    got, _ = asyncio.run(run_call(answer(b"HTTP/1.1 500 Oops\r\n\r\n" + b"x" * 10_000)))
    assert not got.ok and got.message.startswith("answered 500: xxx")
    assert len(got.message) <= len("answered 500: ") + hookcall.MAX_BODY_BYTES


def test_a_redirect_is_never_followed() -> None:
    got, _ = asyncio.run(run_call(answer(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2/\r\nContent-Length: 0\r\n\r\n")))
    assert not got.ok and "redirects are not followed" in got.message


def test_a_hook_that_hangs_is_ended_at_its_deadline() -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    got, took = asyncio.run(run_call(hang, timeout=1.0))
    assert not got.ok and got.message == "no answer within timeoutSeconds=1"
    assert took < 5


def test_nothing_is_dialled_outside_the_allowed_cidrs_or_with_a_bad_path() -> None:
    got = asyncio.run(hookcall.Caller(allowed=LOOP).call(
        pod=pod("192.0.2.1"), post=sp.HttpPost(path="/r", port=80), fence=FENCE, timeout=1, timeout_seconds=1))
    assert not got.ok and "outside the allowed CIDRs" in got.message
    got = asyncio.run(hookcall.Caller(allowed=LOOP).call(
        pod=pod(), post=sp.HttpPost(path="/a b", port=80), fence=FENCE, timeout=1, timeout_seconds=1))
    assert not got.ok and "httpPost.path" in got.message
    got = asyncio.run(hookcall.Caller(allowed=LOOP).call(
        pod=pod(), post=sp.HttpPost(path="/r", port="nope"), fence=FENCE, timeout=1, timeout_seconds=1))
    assert not got.ok and "httpPost.port" in got.message
