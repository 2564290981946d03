"""The drain probe against real sockets on loopback: every misbehaviour ends as "not idle" with
a reason, within the probe's one deadline, dialling nothing but the pod's own address."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from typing import Awaitable, Callable

import pytest

from baton import drainprobe
from baton.model import spec as sp

LOOP = (ipaddress.ip_network("127.0.0.0/8"),)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def probe_spec(port: int, path: str = "/idle", timeout: int = 1) -> sp.DrainProbe:
    return sp.DrainProbe(http_get=sp.HttpGet(path=path, port=port), timeout_seconds=timeout)


def pod(ip: str = "127.0.0.1") -> dict[str, object]:
    return {"status": {"podIP": ip}, "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 1}]}]}}


async def serve(handler: Handler, host: str = "127.0.0.1") -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, host, 0)
    return server, server.sockets[0].getsockname()[1]


def answer(raw: bytes) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        writer.close()
    return handle


async def run_probe(handler: Handler, *, path: str = "/idle", timeout: int = 1,
                    prober: drainprobe.Prober | None = None) -> tuple[drainprobe.Result, float]:
    server, port = await serve(handler)
    prober = prober or drainprobe.Prober(allowed=LOOP, concurrency=4)
    try:
        t0 = time.monotonic()
        result = await prober.probe(pod=pod(), probe=probe_spec(port, path, timeout))
        return result, time.monotonic() - t0
    finally:
        server.close()


def test_200_is_idle_and_503_is_not() -> None:
    ok, _ = asyncio.run(run_probe(answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")))
    assert ok == drainprobe.Result(idle=True)
    busy, _ = asyncio.run(run_probe(answer(b"HTTP/1.1 503 Busy\r\n\r\n")))
    assert not busy.idle and busy.error == "answered 503"


@pytest.mark.parametrize("code", [404, 405, 501])
def test_no_such_endpoint_is_a_misconfigured_probe_not_a_busy_tool(code: int) -> None:
    result, _ = asyncio.run(run_probe(answer(f"HTTP/1.1 {code} Nope\r\n\r\n".encode())))
    assert not result.idle and result.misconfigured and f"answered {code}" in (result.error or "")
    busy, _ = asyncio.run(run_probe(answer(b"HTTP/1.1 503 Busy\r\n\r\n")))
    assert not busy.misconfigured


def test_redirect_is_not_followed() -> None:
    async def scenario() -> tuple[drainprobe.Result, int]:
        canary_hits = 0

        async def canary(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal canary_hits
            canary_hits += 1
            writer.close()
        canary_server, canary_port = await serve(canary, "127.0.0.2")
        try:
            result, _ = await run_probe(answer(
                f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:{canary_port}/idle\r\n\r\n".encode()))
            await asyncio.sleep(0.2)
            return result, canary_hits
        finally:
            canary_server.close()
    result, hits = asyncio.run(scenario())
    assert not result.idle and "302" in (result.error or "")
    assert hits == 0, "the redirect target was dialled"


def test_trickling_pod_is_cut_at_one_total_deadline() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            for byte in b"HTTP/1.1 200 OK\r\n":  # one byte a second: a per-read timeout never fires
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.3)
        except (ConnectionError, OSError):
            pass
    result, took = asyncio.run(run_probe(trickle, timeout=1))
    assert not result.idle and "timeoutSeconds=1" in (result.error or "")
    assert took < 1.5


def test_garbage_and_oversized_answers_are_not_idle() -> None:
    garbage, _ = asyncio.run(run_probe(answer(b"\x00\xffSSH-2.0-nope\r\n")))
    assert not garbage.idle and "not an HTTP" in (garbage.error or "")
    huge, _ = asyncio.run(run_probe(answer(b"HTTP/1.1 200 " + b"x" * 10_000 + b"\r\n\r\n")))
    assert not huge.idle and huge.error
    closed, _ = asyncio.run(run_probe(answer(b"")))
    assert not closed.idle and closed.error


def test_bad_path_and_addresses_are_refused_before_dialling() -> None:
    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise AssertionError("dialled")
    for path in ("idle", "/a b", "/x\r\nHost: evil"):
        result, _ = asyncio.run(run_probe(never, path=path))
        assert not result.idle and "must start with /" in (result.error or ""), path
    prober = drainprobe.Prober(allowed=(ipaddress.ip_network("10.0.0.0/8"),), concurrency=1)
    result = asyncio.run(prober.probe(pod=pod("127.0.0.1"), probe=probe_spec(9)))
    assert not result.idle and "outside the allowed CIDRs" in (result.error or "")
    result = asyncio.run(drainprobe.Prober(allowed=LOOP, concurrency=1).probe(pod={"status": {}}, probe=probe_spec(9)))
    assert not result.idle and result.error == "the pod has no IP"


def test_stuck_probes_do_not_delay_a_healthy_one_beyond_its_deadline() -> None:
    """30 pods that never answer hold slots; a healthy pod's probe still answers within its
    own timeout (the deadline counts waiting for a slot, and slots outnumber them)."""
    async def scenario() -> tuple[drainprobe.Result, float]:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(5)
            writer.close()
        slow, slow_port = await serve(silent)
        good, good_port = await serve(answer(b"HTTP/1.1 200 OK\r\n\r\n"))
        prober = drainprobe.Prober(allowed=LOOP, concurrency=64)
        try:
            stuck = [asyncio.create_task(prober.probe(pod=pod(), probe=probe_spec(slow_port, timeout=3)))
                     for _ in range(30)]
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            result = await prober.probe(pod=pod(), probe=probe_spec(good_port, timeout=1))
            took = time.monotonic() - t0
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
            return result, took
        finally:
            slow.close()
            good.close()
    result, took = asyncio.run(scenario())
    assert result.idle and took < 1.0


@pytest.mark.parametrize("port", [80800, 70000, -1, 0, "70000", "²", "-1", True])
def test_a_port_no_socket_can_take_is_not_idle_with_a_reason_never_an_exception(port: object) -> None:
    # These are what the CRD admitted before its port rule (defect: an OverflowError or a
    # ValueError escaped the probe before decide(), so Draining never ended).
    probe = sp.DrainProbe.model_construct(http_get=sp.HttpGet.model_construct(path="/idle", port=port),
                                          timeout_seconds=1)
    prober = drainprobe.Prober(allowed=LOOP, concurrency=1)
    result = asyncio.run(prober.probe(pod=pod(), probe=probe))
    assert not result.idle
    assert result.error is not None and "port" in result.error


def test_a_named_port_whose_container_port_is_out_of_range_is_not_idle() -> None:
    bad = {"status": {"podIP": "127.0.0.1"},
           "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 99999}]}]}}
    prober = drainprobe.Prober(allowed=LOOP, concurrency=1)
    probe = sp.DrainProbe(http_get=sp.HttpGet(path="/idle", port="http"), timeout_seconds=1)
    result = asyncio.run(prober.probe(pod=bad, probe=probe))
    assert not result.idle and result.error is not None and "'http'" in result.error


def test_an_unexpected_failure_inside_the_probe_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("boom")
    monkeypatch.setattr(asyncio, "open_connection", broken)
    prober = drainprobe.Prober(allowed=LOOP, concurrency=1)
    result = asyncio.run(prober.probe(pod=pod(), probe=probe_spec(8080)))
    assert result == drainprobe.Result(idle=False, error="RuntimeError: boom")


def test_the_refused_ips_it_remembers_are_bounded() -> None:
    prober = drainprobe.Prober(allowed=(ipaddress.ip_network("10.0.0.0/8"),), concurrency=1)
    for i in range(drainprobe.REFUSED_IPS_REMEMBERED + 10):
        ip = f"127.0.{i // 250}.{i % 250 + 1}"
        result = asyncio.run(prober.probe(pod=pod(ip), probe=probe_spec(9)))
        assert not result.idle and "outside the allowed CIDRs" in (result.error or "")
    assert len(prober._refused_ips) <= drainprobe.REFUSED_IPS_REMEMBERED
