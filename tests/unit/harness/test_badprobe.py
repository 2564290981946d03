"""The misbehaving drain-probe servers (tests/harness/badprobe.py), on loopback sockets only.

Each server is checked with a plain client doing what a naive probe would: the servers must
really misbehave the way later tests rely on, and stop() must leave nothing behind.
"""
from __future__ import annotations

import http.client
import math
import socket
import time
import urllib.request
from typing import Iterator

import pytest

from dev.wait import wait_for
from harness import badprobe

POD_IP = "127.0.100.241"     # a "pod" IP of kwok-loop's range; port 0: any free port
OTHER_IP = "127.0.100.242"


def _get(host: str, port: int, path: str = "/idle", timeout: float = 5) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


@pytest.fixture
def canary() -> Iterator[badprobe.Canary]:
    with badprobe.canary(OTHER_IP, 0) as c:
        yield c


def test_only_loopback_addresses_are_accepted() -> None:
    with pytest.raises(AssertionError, match="only send traffic to 127.0.0.0/8"):
        badprobe.Canary("192.0.2.10", 0)
    with pytest.raises(AssertionError):
        badprobe.Redirect(POD_IP, 0, to=("10.0.0.1", 80))


def test_slow_trickle_sends_one_byte_per_interval_and_notices_the_probe_leave() -> None:
    with badprobe.slow_trickle(POD_IP, 0) as srv:
        sock = socket.create_connection(srv.address, timeout=5)
        sock.sendall(b"GET /idle HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        t0 = time.monotonic()
        sock.settimeout(0.2)
        # Read for 2.5 s (bounded): a byte at 0 s, 1 s, 2 s; never a whole status line.
        while time.monotonic() - t0 < 2.5:
            try:
                got += sock.recv(100)
            except socket.timeout:
                pass
        assert got and badprobe.SlowTrickle.HEAD.startswith(got), got
        assert 1 <= len(got) <= 4, got
        [conn] = srv.connections()
        assert conn.request_line == "GET /idle HTTP/1.1" and conn.answered is None
        sock.close()
        closed = wait_for(lambda: srv.connections()[0].peer_closed, timeout=5,
                          what="trickle sees the client gone")
        assert closed is not None and closed >= t0
        wait_for(lambda: srv.connections()[0].closed, timeout=5, what="trickle closes its side")
        assert srv.connections()[0].bytes_sent <= len(got) + 2


def test_slow_trickle_outlasts_a_per_read_timeout() -> None:
    """A client whose timeout is per read (http.client) keeps waiting: each byte comes in time."""
    with badprobe.slow_trickle(POD_IP, 0, interval=0.1) as srv:
        conn = http.client.HTTPConnection(*srv.address, timeout=0.5)
        t0 = time.monotonic()
        conn.request("GET", "/idle")
        resp = conn.getresponse()  # the status line and headers take ~7 s at 0.1 s a byte
        took = time.monotonic() - t0
        conn.close()
        assert resp.status == 200
        assert took >= len(badprobe.SlowTrickle.HEAD) * 0.1 * 0.9, took


def test_garbage_is_not_http_and_closes() -> None:
    with badprobe.garbage(POD_IP, 0) as srv:
        with pytest.raises(http.client.HTTPException):
            _get(*srv.address)
        sock = socket.create_connection(srv.address, timeout=5)
        sock.sendall(b"GET /idle HTTP/1.1\r\n\r\n")
        data = b""
        for _ in range(100):  # bounded: the server closes after the payload
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        sock.close()
        assert data == badprobe.Garbage.PAYLOAD
        assert [c.request_line for c in srv.connections()] == ["GET /idle HTTP/1.1"] * 2


def test_redirect_points_at_the_canary_which_counts_who_followed(canary: badprobe.Canary) -> None:
    with badprobe.redirect(POD_IP, 0, to=canary.address) as srv:
        status, _ = _get(*srv.address, path="/idle")
        conn = http.client.HTTPConnection(*srv.address, timeout=5)
        conn.request("GET", "/idle")
        resp = conn.getresponse()
        conn.close()
        assert status == resp.status == 302
        assert resp.getheader("Location") == f"http://{OTHER_IP}:{canary.port}/idle"
        # Not following (as above): the canary saw nothing.
        assert canary.connections() == []
        # A client that follows redirects (urllib) lands on the canary, which records it.
        with urllib.request.urlopen(f"http://{POD_IP}:{srv.port}/idle", timeout=5) as r:
            assert r.status == 200 and r.read() == b"idle"
        wait_for(lambda: [c.answered for c in canary.connections()] == [200], timeout=5, interval=0.02,
                 what="the canary's answer recorded")
        [seen] = canary.connections()
        assert seen.request_line == "GET /idle HTTP/1.1" and seen.answered == 200
        assert seen.peer[0].startswith("127.")


def test_idle_after_answers_503_while_busy() -> None:
    with badprobe.idle_after(POD_IP, 0, seconds=3600) as srv:
        assert _get(*srv.address) == (503, b"busy")
        # The server records what it sent right after sending it: wait for that (bounded).
        wait_for(lambda: [c.answered for c in srv.connections()] == [503], timeout=5, interval=0.02,
                 what="the 503 recorded")


def test_idle_after_answers_200_once_its_time_has_come_and_never_503_after() -> None:
    with badprobe.idle_after(POD_IP, 0, seconds=1.0) as srv:
        wait_for(lambda: _get(*srv.address) == (200, b"idle"), timeout=5, interval=0.1,
                 what="idle after 1 s")
        assert srv.started is not None and time.monotonic() - srv.started >= 1.0
        for _ in range(3):
            assert _get(*srv.address)[0] == 200
        wait_for(lambda: all(c.answered is not None for c in srv.connections()), timeout=5, interval=0.02,
                 what="every answer recorded")
        answers = [c.answered for c in srv.connections()]
        assert set(answers) <= {503, 200} and answers[-4:] == [200] * 4
        assert answers == sorted(answers, key=lambda s: s == 200), "a 503 after a 200"


def test_idle_after_turns_idle_when_told_before_its_time() -> None:
    with badprobe.idle_after(POD_IP, 0, seconds=math.inf) as srv:
        assert _get(*srv.address)[0] == 503
        srv.make_idle()
        assert _get(*srv.address) == (200, b"idle")
        wait_for(lambda: [c.answered for c in srv.connections()] == [503, 200], timeout=5, interval=0.02,
                 what="both answers recorded")
        first_idle = srv.first_idle_answer()
        assert first_idle is not None and first_idle == srv.connections()[1].accepted


def test_stop_closes_the_listener_and_cuts_open_connections() -> None:
    srv = badprobe.slow_trickle(POD_IP, 0)
    sock = socket.create_connection(srv.address, timeout=5)
    sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
    wait_for(lambda: srv.connections() and srv.connections()[0].bytes_sent >= 1, timeout=5,
             what="trickle started")
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 5
    assert _refused(*srv.address)
    sock.settimeout(3)
    rest = b""
    for _ in range(100):  # bounded: the cut connection ends with EOF or a reset
        try:
            chunk = sock.recv(100)
        except ConnectionResetError:
            break
        if not chunk:
            break
        rest += chunk
    sock.close()
    assert len(rest) <= 2
    assert srv.connections()[0].closed is not None


def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    srv = badprobe.Canary(POD_IP, 0, max_connections=1)
    with srv:
        a = socket.create_connection(srv.address, timeout=5)  # held open: the canary waits for a request
        b = socket.create_connection(srv.address, timeout=5)
        b.settimeout(5)
        assert b.recv(10) == b""
        a.close()
        b.close()
        assert len(srv.connections()) == 2
