"""A forwarding proxy between ONE operator process and the API server, to misbehave on purpose.

The operator talks plain HTTP to ``127.0.0.1:<port>`` with no credentials (``proxy.kubeconfig``);
the proxy forwards each request to the real API server over HTTPS with the admin credentials of
the cluster's kubeconfig, streaming the answer chunk by chunk (watches stay live). A test can
then, from its own thread:

- ``hold(predicate)``: requests matching the predicate are not sent upstream; ``held_count()``
  says how many wait; ``release()`` sends them upstream late (also when their client gave up)
  and returns their log entries, each with the status the API server answered (e.g. 409);
- ``delay(predicate, seconds)``: matching requests are forwarded that much later;
- ``blackhole()`` / ``restore()``: requests are accepted and never answered nor forwarded, and
  streams already open stop delivering (a half-open network); ``restore()`` forwards new
  requests again (what was blackholed stays dead, as a half-open connection does);
- ``log()``: every request (method, path, Accept header, status, times, response bytes passed
  on, what the proxy did with it).

Runs an aiohttp server and client on its own event loop in a background thread. Everything is
bounded: ``stop()`` (or leaving the ``with`` block) drops what is held or blackholed, cuts the
streams and closes every connection. Only loopback is ever listened on; upstream is the
cluster's own API server.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import aiohttp
from aiohttp import web
from kubernetes import client, config

# Headers that belong to one hop (RFC 9110 7.6.1) or that the proxy sets itself.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})
MAX_BODY = 32 * 1024 * 1024  # request bodies (manifests) are read whole, up to this


@dataclass(frozen=True)
class RequestInfo:
    """What a hold predicate sees of a request."""

    method: str
    path: str    # without the query
    query: str   # raw query string ("" when none)

    @property
    def is_watch(self) -> bool:
        return bool(re.search(r"(^|&)watch=(true|1)(&|$)", self.query))


@dataclass
class LogEntry:
    """One request through the proxy. Times are time.monotonic()."""

    id: int
    method: str
    path: str
    query: str
    started: float
    status: int | None = None        # the API server's status; None if never forwarded/answered
    answered: float | None = None    # when the API server's status line arrived
    finished: float | None = None    # when the proxy was done with it
    held: bool = False               # was held by a hold() predicate
    delayed: float = 0.0             # seconds a delay() held it back before forwarding
    released: float | None = None    # when release() let it go upstream
    blackholed: bool = False         # accepted and never answered (or its stream was cut)
    dropped: bool = False            # still held or blackholed when the proxy stopped
    client_gone: bool = False        # the client disconnected before the answer was delivered
    error: str | None = None         # upstream failure (connect, TLS, read)
    accept: str = ""                 # the client's Accept header (e.g. a metadata-only list)
    bytes_out: int = 0               # response body bytes passed to the client (as encoded)

    @property
    def info(self) -> RequestInfo:
        return RequestInfo(self.method, self.path, self.query)


def matching(method: str | None = None, path: str | None = None,
             watch: bool | None = None) -> Callable[[RequestInfo], bool]:
    """A predicate: `method` equal (case-insensitive), `path` a regex that must match the whole
    path, `watch` True/False for watch requests only / never watches; None means any."""
    rx = re.compile(path) if path is not None else None

    def pred(r: RequestInfo) -> bool:
        return ((method is None or r.method.upper() == method.upper())
                and (rx is None or rx.fullmatch(r.path) is not None)
                and (watch is None or r.is_watch == watch))
    return pred


@dataclass
class _Upstream:
    base: str                      # https://host:port
    ssl_context: ssl.SSLContext | bool
    authorization: str | None      # value of the Authorization header, if a token is used


def _upstream_from_kubeconfig(path: str) -> _Upstream:
    """The API server and admin credentials of a kubeconfig, as the kubernetes client reads it
    (certificate data or files, token; the client writes *-data to temporary files)."""
    cfg = client.Configuration()
    # kubernetes.config is not annotated (unlike kubernetes.client).
    config.load_kube_config(config_file=path, client_configuration=cfg,  # type: ignore[no-untyped-call]
                            persist_config=False)
    base = cfg.host.rstrip("/")
    ctx: ssl.SSLContext | bool = False
    if base.startswith("https://"):
        if cfg.verify_ssl:
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        else:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    auth = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    return _Upstream(base=base, ssl_context=ctx, authorization=auth or None)


def write_kubeconfig(path: Path, server: str) -> None:
    """A kubeconfig naming `server` (plain http) and a user without any credentials."""
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "baton-proxy", "cluster": {"server": server}}],
        "users": [{"name": "anonymous-through-proxy", "user": {}}],
        "contexts": [{"name": "baton-proxy", "context": {
            "cluster": "baton-proxy", "user": "anonymous-through-proxy", "namespace": "default"}}],
        "current-context": "baton-proxy",
    }
    path.write_text(json.dumps(cfg, indent=2) + "\n")


class ApiProxy:
    """``with ApiProxy(cluster.kubeconfig, tmp_path) as proxy:`` then give ``proxy.kubeconfig`` to
    one operator (``OperatorProcess(..., kubeconfig=proxy.kubeconfig)``)."""

    def __init__(self, upstream_kubeconfig: str, workdir: Path | str, *, name: str = "apiproxy",
                 connect_timeout: float = 10.0, stop_timeout: float = 10.0) -> None:
        self._upstream = _upstream_from_kubeconfig(upstream_kubeconfig)
        self.kubeconfig = str(Path(workdir) / f"{name}.kubeconfig")
        self.port: int = 0
        self._connect_timeout = connect_timeout
        self._stop_timeout = stop_timeout
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._log: list[LogEntry] = []
        self._hold: Callable[[RequestInfo], bool] | None = None
        self._delay: tuple[Callable[[RequestInfo], bool], float] | None = None
        self._held: list[LogEntry] = []
        self._blackholed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        # Created on the loop:
        self._release_ev: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._done: asyncio.Event | None = None
        # The upstream responses being relayed (watches): closed at stop, so each handler ends at
        # once instead of holding the runner's cleanup for its shutdown timeout, twice (4 s).
        self._relaying: set[aiohttp.ClientResponse] = set()

    # -- lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ApiProxy":
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        self._thread = threading.Thread(target=self._run, args=(sock,), name=f"apiproxy-{self.port}",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(15):
            raise AssertionError("api proxy did not start within 15s")
        if self._start_error is not None:
            raise AssertionError(f"api proxy failed to start: {self._start_error!r}")
        write_kubeconfig(Path(self.kubeconfig), self.url)
        return self

    def stop(self) -> None:
        """Drop held and blackholed requests, cut streams, close every connection; bounded."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running() and self._done is not None:
            loop.call_soon_threadsafe(self._done.set)
        thread.join(self._stop_timeout + 5)
        if thread.is_alive():
            raise AssertionError(f"api proxy thread did not stop within {self._stop_timeout + 5}s")
        self._thread = None

    def __enter__(self) -> "ApiProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api_client(self, *, retries: int | bool | None = None) -> client.ApiClient:
        """A kubernetes ApiClient that goes through the proxy (plain http, no credentials).

        `retries` is urllib3's: by default (None) the client retries a failed or timed-out
        request 3 times, so one blackholed GET costs four read timeouts; False: no retry."""
        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig,  # type: ignore[no-untyped-call]
                                client_configuration=cfg, persist_config=False)
        cfg.retries = retries
        return client.ApiClient(cfg)

    # -- controls (any thread)

    def hold(self, predicate: Callable[[RequestInfo], bool]) -> None:
        """From now on, requests matching `predicate` wait in the proxy until release()."""
        with self._lock:
            self._hold = predicate

    def delay(self, predicate: Callable[[RequestInfo], bool] | None, seconds: float = 0.0) -> None:
        """From now on, requests matching `predicate` are sent upstream `seconds` late (None:
        no more delays). A hold or blackhole takes precedence."""
        if predicate is not None and seconds <= 0:
            raise ValueError("a delay must be positive")
        with self._lock:
            self._delay = None if predicate is None else (predicate, seconds)

    def held_count(self) -> int:
        with self._lock:
            return len(self._held)

    def held(self) -> list[LogEntry]:
        """Copies of the entries held right now."""
        with self._lock:
            return [replace(e) for e in self._held]

    def release(self, timeout: float = 15.0) -> list[LogEntry]:
        """Stop holding; send every held request upstream now. Waits (at most `timeout`) until
        each has the API server's answer (or an error) and returns their entries. While the
        proxy is blackholed, the blackhole wins: released requests are swallowed, not sent."""
        with self._lock:
            self._hold = None
            released = list(self._held)
            self._held.clear()
            now = time.monotonic()
            for e in released:
                e.released = now
        self._call(self._wake_held)
        ids = {e.id for e in released}
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.05) + 1):
            entries = [e for e in self.log() if e.id in ids]
            if all(e.status is not None or e.error is not None or e.dropped or e.blackholed
                   for e in entries):
                return entries
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        raise AssertionError(f"released requests not answered upstream within {timeout}s: "
                             f"{[e for e in self.log() if e.id in ids]}")

    def blackhole(self) -> None:
        """Accept connections and requests, never answer nor forward; open streams go silent."""
        with self._lock:
            self._blackholed = True

    def restore(self) -> None:
        """Forward new requests again (blackholed ones stay unanswered until stop())."""
        with self._lock:
            self._blackholed = False

    @property
    def blackholed(self) -> bool:
        with self._lock:
            return self._blackholed

    def log(self) -> list[LogEntry]:
        """A copy of every request seen so far, in arrival order."""
        with self._lock:
            return [replace(e) for e in self._log]

    def requests(self, predicate: Callable[[RequestInfo], bool]) -> list[LogEntry]:
        return [e for e in self.log() if predicate(e.info)]

    # -- the event loop thread

    def _call(self, fn: Callable[[], None]) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(fn)

    def _wake_held(self) -> None:
        assert self._release_ev is not None
        self._release_ev.set()
        self._release_ev = asyncio.Event()

    def _run(self, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(sock))
        finally:
            # Whatever still runs (a handler of a connection the server did not close in
            # time) is cancelled, not abandoned with the loop.
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self, sock: socket.socket) -> None:
        self._release_ev = asyncio.Event()
        self._stopping = asyncio.Event()
        self._done = asyncio.Event()
        try:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._upstream.ssl_context, limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
                auto_decompress=False, skip_auto_headers=("Accept-Encoding", "User-Agent"))
            app = web.Application(client_max_size=MAX_BODY)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            # handler_cancellation=False: a client that gives up does not cancel its request, so
            # a released request still reaches the API server late (what a test wants to see).
            self._runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                         shutdown_timeout=2.0, handler_cancellation=False)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._start_error = e
            self._ready.set()
            sock.close()
            return
        self._ready.set()
        await self._done.wait()
        # Shutting down: wake everything that waits, cut upstream, close the listener.
        self._stopping.set()
        self._release_ev.set()
        for upstream in list(self._relaying):
            upstream.close()
        await self._session.close()
        try:
            await asyncio.wait_for(self._runner.cleanup(), self._stop_timeout)
        except asyncio.TimeoutError:
            pass

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._stopping is not None and self._session is not None
        raw = request.raw_path
        path, _, query = raw.partition("?")
        entry = LogEntry(id=next(self._ids), method=request.method, path=path, query=query,
                         started=time.monotonic(), accept=request.headers.get("Accept", ""))
        if request.headers.get("Upgrade"):
            with self._lock:
                self._log.append(entry)
            return self._finish(entry, web.Response(status=501, text="api proxy: no upgrades"))
        with self._lock:
            self._log.append(entry)
            blackholed = self._blackholed
            held = not blackholed and self._hold is not None and self._hold(entry.info)
            delay = self._delay
            if not blackholed and not held and delay is not None and delay[0](entry.info):
                entry.delayed = delay[1]
            if blackholed:
                entry.blackholed = True
            elif held:
                entry.held = True
                self._held.append(entry)
        body = await request.read()
        if blackholed:
            return await self._silence(entry, request)
        if held:
            while True:
                assert self._release_ev is not None
                ev = self._release_ev
                await ev.wait()
                if self._stopping.is_set():
                    with self._lock:
                        entry.dropped = True
                        if entry in self._held:
                            self._held.remove(entry)
                    return self._finish(entry, web.Response(status=503, text="api proxy stopped"))
                with self._lock:
                    if entry not in self._held:
                        break
            with self._lock:
                # The client may have given up while the request was held.
                entry.client_gone = request.transport is None or request.transport.is_closing()
        if entry.delayed:
            try:
                await asyncio.wait_for(self._stopping.wait(), entry.delayed)
            except asyncio.TimeoutError:
                pass
            if self._stopping.is_set():
                with self._lock:
                    entry.dropped = True
                return self._finish(entry, web.Response(status=503, text="api proxy stopped"))
        return await self._forward(entry, request, body)

    async def _silence(self, entry: LogEntry, request: web.Request) -> web.StreamResponse:
        """Never answer: wait for stop(), then close the connection without a response."""
        assert self._stopping is not None
        await self._stopping.wait()
        with self._lock:
            entry.dropped = True
        if request.transport is not None:
            request.transport.close()
        return self._finish(entry, web.Response(status=503))

    def _finish(self, entry: LogEntry, resp: web.StreamResponse) -> web.StreamResponse:
        with self._lock:
            entry.finished = time.monotonic()
        return resp

    async def _forward(self, entry: LogEntry, request: web.Request, body: bytes) -> web.StreamResponse:
        assert self._session is not None and self._stopping is not None
        if self._went_dark(entry):  # released or delayed into a blackhole: it wins
            return await self._silence(entry, request)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP
                   and k.lower() != "authorization"}
        if self._upstream.authorization:
            headers["Authorization"] = self._upstream.authorization
        # The kubernetes client sends JSON bodies without a Content-Type (the API server then
        # assumes JSON); aiohttp would label them application/octet-stream (the API server: 415).
        skip = () if "Content-Type" in request.headers else ("Content-Type",)
        try:
            upstream = await self._session.request(
                request.method, self._upstream.base + request.raw_path, headers=headers,
                data=body if body else None, allow_redirects=False, skip_auto_headers=skip)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, RuntimeError) as e:
            with self._lock:
                entry.error = f"{type(e).__name__}: {e}"
            return self._finish(entry, web.Response(status=502, text=f"api proxy: {e}"))
        with self._lock:
            entry.status = upstream.status
            entry.answered = time.monotonic()
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in HOP_BY_HOP:
                resp.headers.add(k, v)
        if upstream.headers.get("Content-Length") is not None:
            resp.content_length = int(upstream.headers["Content-Length"])
        self._relaying.add(upstream)
        try:
            async with upstream:
                if self._dead(request, entry):
                    return self._finish(entry, resp)
                if self._went_dark(entry):
                    return await self._silence(entry, request)
                await resp.prepare(request)
                # Chunk by chunk: a watch is one long response. Nothing more reaches the client
                # once the proxy is blackholed: no chunk, not even the end of the stream.
                async for chunk in upstream.content.iter_any():
                    if self._went_dark(entry):
                        return await self._silence(entry, request)
                    if self._dead(request, entry):
                        return self._finish(entry, resp)
                    await resp.write(chunk)
                    with self._lock:
                        entry.bytes_out += len(chunk)
                if self._stopping.is_set():  # closed by stop(): cut, not ended
                    with self._lock:
                        entry.dropped = True
                    if request.transport is not None:
                        request.transport.close()
                    return self._finish(entry, resp)
                # A chunked stream's end is a message too (the terminating chunk); a response
                # of known length is complete once its bytes are out.
                if resp.content_length is None and self._went_dark(entry):
                    return await self._silence(entry, request)
                await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            with self._lock:
                entry.client_gone = True
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError) as e:
            with self._lock:
                if self._stopping.is_set():
                    entry.dropped = True
                else:
                    entry.error = f"{type(e).__name__}: {e}"
            if request.transport is not None:
                request.transport.close()
        finally:
            self._relaying.discard(upstream)
        return self._finish(entry, resp)

    def _went_dark(self, entry: LogEntry) -> bool:
        with self._lock:
            if self._blackholed:
                entry.blackholed = True
            return self._blackholed

    def _dead(self, request: web.Request, entry: LogEntry) -> bool:
        if request.transport is None or request.transport.is_closing():
            with self._lock:
                entry.client_gone = True
            return True
        return False
