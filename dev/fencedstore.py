"""A small external store that refuses stale writers, for tests (issue 45; docs/hooks.md, "At least
once: how a receiver deduplicates and refuses a stale caller").

It plays the system outside the cluster that a tool and its hooks write to: an HTTP server on
127.0.0.1 (an ephemeral port), used as a context manager. Every POST (any path) must carry the
fence, in the headers Baton sends on hook calls (baton.model.names): Baton-Runtime,
Baton-Generation, Baton-Fencing-Token, and Baton-Hook on a hook call (none: a write of the tool
itself). It answers 200 and keeps the write when the fence is not older than what it accepted:

- per runtime, the newest generation it accepted from anyone: an older generation gets 409;
- per (runtime, generation, writer) -- the writer is the hook's name, or "tool" -- the highest
  fencing token it accepted: a lower token gets 409. A hook that another operator replica resumed
  after a crash carries the new holder's higher token; the old holder's late call is refused. The
  tool's own writes all carry its pod's creation token, which may be below the token of a hook
  sent later for the same generation: they are another writer, so one never refuses the other.

A refusal's body is JSON: {"refused": "generation" | "fencingToken", "reason": "... is older than
...", "newest": {...}}. A request without a valid fence gets 400. Every request is recorded (path,
headers, body, time, the answer) for assertions, whatever it was answered. For hook failure tests
the store can be told to answer a status (500) or to hang (no answer until released, bounded).

Bounds: each request's body is read up to MAX_BODY bytes; a hang ends at `hang_seconds` or when the
store stops; the server's threads are daemons and `stop` joins the serving thread.
"""
from __future__ import annotations

import dataclasses
import http.server
import json
import threading
import time
from types import TracebackType
from typing import Any

from baton.model import names

MAX_BODY = 64 * 1024
TOOL_WRITER = "tool"  # the writer of a request without Baton-Hook: the tool itself


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the store received it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]  # names as sent; look up with header()
    body: bytes
    at: float  # time.time() when it arrived
    status: int | None  # None: not answered (hung until the store stopped, or the caller left)

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclasses.dataclass(frozen=True)
class Fence:
    runtime: str
    generation: int
    token: int
    writer: str  # a hook's name, or TOOL_WRITER


@dataclasses.dataclass
class _Behaviour:
    status: int | None = None  # answer this instead of judging the fence
    hang: bool = False
    # Set: the requests this behaviour hung answer now (heal, stop). Each hang has its own, so
    # healing one path never releases another's.
    release: threading.Event = dataclasses.field(default_factory=threading.Event)


class FencedStore:
    """`with FencedStore() as store:` ... `store.url` ... `store.requests()`."""

    def __init__(self, *, hang_seconds: float = 120.0) -> None:
        if hang_seconds <= 0:
            raise ValueError(f"hang_seconds must be positive, not {hang_seconds}")
        self.hang_seconds = hang_seconds
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._writes: list[tuple[Fence, str, bytes]] = []
        self._newest_generation: dict[str, int] = {}
        self._highest_token: dict[tuple[str, int, str], int] = {}
        self._default = _Behaviour()
        self._by_path: dict[str, _Behaviour] = {}
        self._hangs: list[threading.Event] = []  # every hang's release, set by stop()
        self._stopped = False
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life -------------------------------------------------------------------------------

    def start(self) -> FencedStore:
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                store._handle(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                return  # quiet: the tests read requests(), not stderr

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fencedstore", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for release in self._hangs:
                release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server, self._thread = None, None

    def __enter__(self) -> FencedStore:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the store is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- what tests tell it -----------------------------------------------------------------

    def answer(self, status: int, *, path: str | None = None) -> None:
        """Answer every POST (or those to `path`) with `status` (and an empty JSON object),
        recording it, without judging or keeping it: a hook receiver that fails."""
        if not 100 <= status <= 599:
            raise ValueError(f"status must be an HTTP status 100..599, not {status}")
        with self._lock:
            self._set(path, _Behaviour(status=status))

    def hang(self, *, path: str | None = None) -> None:
        """Answer nothing to every POST (or those to `path`) until heal()/stop() or hang_seconds:
        a hook receiver that never answers."""
        with self._lock:
            behaviour = _Behaviour(hang=True)
            if self._stopped:
                behaviour.release.set()
            self._hangs.append(behaviour.release)
            self._set(path, behaviour)

    def heal(self, *, path: str | None = None) -> None:
        """Judge the fence again (every path, or `path` alone); the requests that what is healed
        hung are answered 503 now (a hang of another path goes on)."""
        with self._lock:
            healed = [self._default, *self._by_path.values()] if path is None else [self._by_path.pop(path, _Behaviour())]
            if path is None:
                self._default, self._by_path = _Behaviour(), {}
            for behaviour in healed:
                behaviour.release.set()

    def _set(self, path: str | None, behaviour: _Behaviour) -> None:
        """Put `behaviour` in place for `path` (None: the default), releasing a hang it replaces."""
        old = self._default if path is None else self._by_path.get(path)
        if old is not None:
            old.release.set()
        if path is None:
            self._default = behaviour
        else:
            self._by_path[path] = behaviour

    # --- what tests read --------------------------------------------------------------------

    def requests(self, *, path: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self._requests if path is None or r.path == path]

    def accepted(self) -> list[tuple[Fence, str, bytes]]:
        """(fence, path, body) of every write it accepted, in order."""
        with self._lock:
            return list(self._writes)

    # --- the judgement ----------------------------------------------------------------------

    def judge(self, fence: Fence) -> tuple[int, dict[str, Any]]:
        """(200, {...}) and the fence remembered, or (409, {"refused": ..., "reason": ...})."""
        with self._lock:
            return self._judge(fence)

    def _judge(self, fence: Fence) -> tuple[int, dict[str, Any]]:
        newest = self._newest_generation.get(fence.runtime, 0)
        key = (fence.runtime, fence.generation, fence.writer)
        top = self._highest_token.get(key, 0)
        state = {"generation": newest, "fencingToken": top, "writer": fence.writer}
        if fence.generation < newest:
            return 409, {"refused": "generation", "newest": state,
                         "reason": f"generation {fence.generation} is older than generation {newest} of {fence.runtime}"}
        if fence.token < top:
            return 409, {"refused": "fencingToken", "newest": state,
                         "reason": f"fencing token {fence.token} is older than {top} "
                                   f"({fence.writer} of generation {fence.generation} of {fence.runtime})"}
        self._newest_generation[fence.runtime] = fence.generation
        self._highest_token[key] = fence.token
        return 200, {"accepted": True, "generation": fence.generation, "fencingToken": fence.token,
                     "writer": fence.writer}

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        at = time.time()
        headers = dict(handler.headers.items())
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        body = handler.rfile.read(length) if 0 <= length <= MAX_BODY else b""
        with self._lock:
            behaviour = self._by_path.get(handler.path, self._default)
            hang, fixed, release = behaviour.hang, behaviour.status, behaviour.release
            index = len(self._requests)
            self._requests.append(Request(method="POST", path=handler.path, headers=headers, body=body, at=at,
                                          status=None))
        status: int
        answer: dict[str, Any]
        if hang:
            release.wait(self.hang_seconds)
            status, answer = 503, {"reason": "the store was told to hang; released"}
        elif fixed is not None:
            status, answer = fixed, {}
        elif not 0 <= length <= MAX_BODY:
            status, answer = 413 if length > MAX_BODY else 400, {"reason": "Content-Length missing, bad or too large"}
        else:
            fence, problem = _fence(headers)
            if fence is None:
                status, answer = 400, {"reason": problem}
            else:
                with self._lock:
                    status, answer = self._judge(fence)
                    if status == 200:
                        self._writes.append((fence, handler.path, body))
        with self._lock:
            self._requests[index] = dataclasses.replace(self._requests[index], status=status)
        data = json.dumps(answer).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass  # the caller gave up (its deadline): what it was sent is recorded all the same


def _fence(headers: dict[str, str]) -> tuple[Fence | None, str]:
    """The fence a request's headers carry, or None and what is wrong, naming the header."""
    lower = {k.lower(): v.strip() for k, v in headers.items()}
    runtime = lower.get(names.HEADER_RUNTIME.lower(), "")
    if "/" not in runtime:
        return None, f"header {names.HEADER_RUNTIME} must be <namespace>/<name>, not {runtime!r}"
    numbers: dict[str, int] = {}
    for header in (names.HEADER_GENERATION, names.HEADER_FENCING_TOKEN):
        text = lower.get(header.lower(), "")
        if not text.isdigit():
            return None, f"header {header} must be a decimal integer, not {text!r}"
        numbers[header] = int(text)
    writer = lower.get(names.HEADER_HOOK.lower()) or TOOL_WRITER
    return Fence(runtime=runtime, generation=numbers[names.HEADER_GENERATION],
                 token=numbers[names.HEADER_FENCING_TOKEN], writer=writer), ""
