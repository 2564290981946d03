"""Misbehaving drain-probe servers, bound on a loopback "pod" IP (127.0.100.x on kwok-loop).

DESIGN.md: the drain probe dials only the pod's own IP, follows no redirect, has one total
deadline and a cap on bytes read, and counts any error as "not idle". These servers are the
tools that misbehave against it:

- ``SlowTrickle``: answers one byte per ``interval`` (1 s), starting with the status line, and
  never ends (until stopped or ``max_seconds``): only a total deadline gets rid of it;
- ``Garbage``: answers bytes that are not HTTP, then closes;
- ``Redirect``: answers ``302`` with ``Location`` at another loopback address (a ``Canary``);
- ``Canary``: records every connection it receives and answers 200 (so a probe that followed a
  redirect would wrongly see "idle"); a test asserts it saw none;
- ``IdleAfter``: 503 until ``seconds`` after start, 200 after;
- ``NoSuchEndpoint``: answers ``404`` (or 405, 501) to everything: a probe on a path the tool
  does not have.

Each is a small threaded TCP server: ``start()`` / ``stop()`` or ``with``; the lowercase
factories (``slow_trickle(ip, port)``...) return it started. Bounded: only loopback addresses,
at most ``max_connections`` connections, each at most ``max_seconds`` long; ``stop()`` closes
the listener and every connection and joins the threads. Every connection is recorded
(``connections()``): when it came, the request line, bytes sent, when the peer went away.
"""
from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Self

from harness.kwok import assert_loopback

READ_CAP = 64 * 1024      # bytes of a request read at most
READ_SECONDS = 5.0        # a request that has not ended after this is answered anyway


@dataclass
class Connection:
    """One accepted connection. Times are time.monotonic()."""

    peer: tuple[str, int]
    accepted: float
    request_line: str | None = None   # e.g. "GET /idle HTTP/1.1"; None if none arrived
    bytes_sent: int = 0
    answered: int | None = None       # HTTP status sent, when the server sent one
    peer_closed: float | None = None  # when the peer was seen gone (EOF, reset, broken pipe)
    closed: float | None = None       # when the server closed it


class _Server:
    """Accept loop in one thread, one thread per connection; subclasses implement serve()."""

    def __init__(self, host: str, port: int, *, max_connections: int = 64,
                 max_seconds: float = 300.0) -> None:
        self.host = assert_loopback(host)
        self.port = port
        self.max_connections = max_connections
        self.max_seconds = max_seconds
        self._lock = threading.Lock()
        self._conns: list[Connection] = []
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self.started: float | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def start(self) -> Self:
        if self._listener is not None:
            return self
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.host, self.port))
            s.listen(16)
        except OSError:
            s.close()
            raise
        self.port = int(s.getsockname()[1])
        s.settimeout(0.1)
        self._listener = s
        self.started = time.monotonic()
        self._accept_thread = threading.Thread(target=self._accept, daemon=True,
                                               name=f"{type(self).__name__}-{self.host}:{self.port}")
        self._accept_thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            socks, threads = list(self._socks), list(self._threads)
        for c in socks:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.1))
        alive = [t.name for t in threads if t.is_alive()]
        if alive or (self._accept_thread is not None and self._accept_thread.is_alive()):
            raise AssertionError(f"{type(self).__name__} threads still alive after stop: {alive}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def connections(self) -> list[Connection]:
        with self._lock:
            return [replace(c) for c in self._conns]

    # -- internals

    def _accept(self) -> None:
        assert self._listener is not None
        # Bounded: ends at stop(), or after max_seconds plus a margin at most.
        deadline = time.monotonic() + self.max_seconds + 60
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                sock, peer = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn = Connection(peer=(str(peer[0]), int(peer[1])), accepted=time.monotonic())
            with self._lock:
                self._conns.append(conn)
                over = len(self._conns) > self.max_connections
                if not over:
                    self._socks.append(sock)
            if over:
                sock.close()
                self._mark(conn, closed=True)
                continue
            t = threading.Thread(target=self._serve_one, args=(sock, conn), daemon=True,
                                 name=f"{type(self).__name__}-conn-{conn.peer[1]}")
            with self._lock:
                self._threads.append(t)
            t.start()

    def _serve_one(self, sock: socket.socket, conn: Connection) -> None:
        try:
            self.serve(sock, conn)
        except OSError:
            self._mark(conn, peer_closed=True)
        finally:
            try:
                sock.close()
            finally:
                self._mark(conn, closed=True)

    def _mark(self, conn: Connection, *, peer_closed: bool = False, closed: bool = False,
              sent: int = 0, request_line: str | None = None, answered: int | None = None) -> None:
        with self._lock:
            now = time.monotonic()
            if peer_closed and conn.peer_closed is None:
                conn.peer_closed = now
            if closed and conn.closed is None:
                conn.closed = now
            conn.bytes_sent += sent
            if request_line is not None:
                conn.request_line = request_line
            if answered is not None:
                conn.answered = answered

    def _read_request(self, sock: socket.socket, conn: Connection) -> bytes:
        """The request head (up to a blank line), bounded in bytes and time."""
        data = b""
        deadline = time.monotonic() + READ_SECONDS
        sock.settimeout(0.1)
        while b"\r\n\r\n" not in data and len(data) < READ_CAP and not self._stop.is_set():
            if time.monotonic() >= deadline:
                break
            try:
                chunk = sock.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                self._mark(conn, peer_closed=True)
                break
            data += chunk
        line = data.split(b"\r\n", 1)[0].decode("latin-1") if data else None
        self._mark(conn, request_line=line)
        return data

    def _send(self, sock: socket.socket, conn: Connection, data: bytes,
              status: int | None = None) -> None:
        sock.sendall(data)
        self._mark(conn, sent=len(data), answered=status)

    def _peer_gone(self, sock: socket.socket) -> bool:
        """True when the peer has closed (EOF or reset), without blocking."""
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        try:
            return sock.recv(4096, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        raise NotImplementedError

    def _respond(self, sock: socket.socket, conn: Connection, status: int, reason: str,
                 body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}",
                "Content-Type: text/plain", "Connection: close"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._send(sock, conn, ("\r\n".join(head) + "\r\n\r\n").encode() + body, status)


class SlowTrickle(_Server):
    """One byte per `interval`, from the first byte of the status line on, never finishing."""

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000000\r\n\r\n"

    def __init__(self, host: str, port: int, *, interval: float = 1.0, max_connections: int = 64,
                 max_seconds: float = 300.0) -> None:
        super().__init__(host, port, max_connections=max_connections, max_seconds=max_seconds)
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        self._read_request(sock, conn)
        end = conn.accepted + self.max_seconds
        i = 0
        while not self._stop.is_set() and time.monotonic() < end:
            if self._peer_gone(sock):
                self._mark(conn, peer_closed=True)
                return
            byte = self.HEAD[i:i + 1] or b"x"
            try:
                sock.sendall(byte)
            except OSError:
                self._mark(conn, peer_closed=True)
                return
            self._mark(conn, sent=1, answered=200 if i == len(self.HEAD) - 1 else None)
            i += 1
            self._stop.wait(self.interval)


class Garbage(_Server):
    """Answers `payload` (not HTTP) and closes."""

    PAYLOAD = b"\x00\xff\xfeSSH-2.0-not-http\r\n\x1b[31mgarbage\x1b[0m\r\n\r\n"

    def __init__(self, host: str, port: int, *, payload: bytes | None = None,
                 max_connections: int = 64, max_seconds: float = 300.0) -> None:
        super().__init__(host, port, max_connections=max_connections, max_seconds=max_seconds)
        self.payload = self.PAYLOAD if payload is None else payload

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        self._read_request(sock, conn)
        self._send(sock, conn, self.payload)


class Redirect(_Server):
    """Answers `status` (302) with Location http://<to>/<path of the request>."""

    def __init__(self, host: str, port: int, *, to: tuple[str, int], status: int = 302,
                 max_connections: int = 64, max_seconds: float = 300.0) -> None:
        super().__init__(host, port, max_connections=max_connections, max_seconds=max_seconds)
        self.to = (assert_loopback(to[0]), int(to[1]))
        self.status = status

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        head = self._read_request(sock, conn)
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        path = parts[1].decode("latin-1") if len(parts) >= 2 and parts[1].startswith(b"/") else "/"
        location = f"http://{self.to[0]}:{self.to[1]}{path}"
        self._respond(sock, conn, self.status, "Found", b"", {"Location": location})


class Canary(_Server):
    """Records every connection; answers 200 "idle" to whatever arrives."""

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        self._read_request(sock, conn)
        self._respond(sock, conn, 200, "OK", b"idle")


class IdleAfter(_Server):
    """503 "busy" until `seconds` after start() or until make_idle(), whichever comes first;
    200 "idle" after (``seconds=math.inf``: busy until told)."""

    def __init__(self, host: str, port: int, *, seconds: float, max_connections: int = 64,
                 max_seconds: float = 300.0) -> None:
        super().__init__(host, port, max_connections=max_connections, max_seconds=max_seconds)
        self.seconds = seconds
        self._told = threading.Event()

    def make_idle(self) -> None:
        self._told.set()

    def idle(self) -> bool:
        return self._told.is_set() or (
            self.started is not None and time.monotonic() - self.started >= self.seconds)

    def first_idle_answer(self) -> float | None:
        """When the first connection answered 200 was accepted (monotonic), if any was."""
        return min((c.accepted for c in self.connections() if c.answered == 200), default=None)

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        self._read_request(sock, conn)
        if self.idle():
            self._respond(sock, conn, 200, "OK", b"idle")
        else:
            self._respond(sock, conn, 503, "Service Unavailable", b"busy")


class NoSuchEndpoint(_Server):
    """A tool without the probe's endpoint: answers `status` (404 by default) to everything."""

    def __init__(self, host: str, port: int, *, status: int = 404, max_connections: int = 64,
                 max_seconds: float = 300.0) -> None:
        super().__init__(host, port, max_connections=max_connections, max_seconds=max_seconds)
        self.status = status

    def serve(self, sock: socket.socket, conn: Connection) -> None:
        self._read_request(sock, conn)
        reasons = {404: "Not Found", 405: "Method Not Allowed", 501: "Not Implemented"}
        self._respond(sock, conn, self.status, reasons.get(self.status, "Nope"), b"no such endpoint")


def no_such_endpoint(host: str, port: int, *, status: int = 404) -> NoSuchEndpoint:
    s = NoSuchEndpoint(host, port, status=status)
    s.start()
    return s


def slow_trickle(host: str, port: int, *, interval: float = 1.0) -> SlowTrickle:
    s = SlowTrickle(host, port, interval=interval)
    s.start()
    return s


def garbage(host: str, port: int, *, payload: bytes | None = None) -> Garbage:
    s = Garbage(host, port, payload=payload)
    s.start()
    return s


def redirect(host: str, port: int, *, to: tuple[str, int], status: int = 302) -> Redirect:
    s = Redirect(host, port, to=to, status=status)
    s.start()
    return s


def canary(host: str, port: int) -> Canary:
    s = Canary(host, port)
    s.start()
    return s


def idle_after(host: str, port: int, seconds: float) -> IdleAfter:
    s = IdleAfter(host, port, seconds=seconds)
    s.start()
    return s
