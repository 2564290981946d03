"""What a stateless (2026-07-28) MCP client loses at a handoff, and the gateway's two answers to it
(docs/gateway.md, "Stateless clients at a handoff"). Pure: no I/O, no clock.

1. `subscriptions/listen`: the request's answer IS the client's event stream (an SSE stream that
   stays open). The gateway ends it at the seal the way the specification ends one gracefully: the
   listen request's own result, `{"_meta": {SUBSCRIPTION_ID_META_KEY: <the listen id>}}`, as the
   last SSE event (the official Python SDK 2.3.0: `mcp/server/subscriptions.py` ListenHandler.close
   and its return, `mcp_types` SubscriptionsListenResult). The client ends its subscription cleanly
   and re-listens, now on N+1; an abrupt cut would surface as SubscriptionLost. The frame goes only
   between two SSE events (`SseCursor`): never inside one the pod is sending.
2. `ttlMs` (how long a client may cache a list result) is capped at TRANSITION_TTL_MS on answers
   given while the runtime is about to hand off or handing off (`ttl_capped`), so a client that
   listed on N lists again soon after N+1 serves. Only the digits of the result's `ttlMs` change,
   padded with spaces to the same length: every other byte, and the Content-Length, stay as the
   pod sent them.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Iterator, Mapping

LISTEN_METHOD = "subscriptions/listen"
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
# The cap on ttlMs while a handoff is pending or under way: a few seconds, long enough that a
# client listing in a loop is not made to list on every call, short enough that a list cached
# from N is stale soon after N+1 serves (a handoff takes seconds: docs/gateway.md, "Bounds").
TRANSITION_TTL_MS = 5000
# A streamed JSON answer (over SMALL_BODY_BYTES) is held up to this size to cap its ttlMs; a larger
# one passes as it is. The same bound holds for one SSE `data:` line.
CAP_BUFFER_BYTES = 1024 * 1024
UPDATE_PENDING = "UpdatePending"

_DECODER = json.JSONDecoder()
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")


def listen_id(body: bytes) -> str | int | None:
    """The id of the JSON-RPC `subscriptions/listen` request `body` is, else None (a notification
    without an id cannot be answered, so it has none either). Cheap test first: most calls are not."""
    if LISTEN_METHOD.encode() not in body:
        return None
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(msg, dict) or msg.get("method") != LISTEN_METHOD or msg.get("jsonrpc") != "2.0":
        return None
    rid = msg.get("id")
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def listen_end_frame(request_id: str | int) -> bytes:
    """The SSE event that ends a listen stream gracefully: the listen request's result, stamped
    with its subscription id (as the SDK's server writes it: `event: message`, CRLF)."""
    doc = {"jsonrpc": "2.0", "id": request_id,
           "result": {"_meta": {SUBSCRIPTION_ID_META_KEY: request_id}, "resultType": "complete"}}
    return b"event: message\r\ndata: " + json.dumps(doc, separators=(",", ":")).encode() + b"\r\n\r\n"


class SseCursor:
    """Where a relayed SSE stream stands: between two events (`at_boundary`) or inside one. An
    event ends at an empty line; a line ends at CRLF, LF or CR (the SSE specification)."""

    __slots__ = ("at_boundary", "_line_empty", "_after_cr")

    def __init__(self) -> None:
        self.at_boundary = True
        self._line_empty = True
        self._after_cr = False

    def _step(self, byte: int) -> bool:
        """Advance one byte; True when it ends an event (or an empty line between events)."""
        if byte == 0x0A and self._after_cr:
            self._after_cr = False  # the LF of a CRLF: the CR ended the line already
            return False
        if byte in (0x0A, 0x0D):
            self._after_cr = byte == 0x0D
            ended = self._line_empty
            if ended:
                self.at_boundary = True
            self._line_empty = True
            return ended
        self._after_cr = False
        self._line_empty = False
        self.at_boundary = False
        return False

    def feed(self, chunk: bytes) -> None:
        for byte in chunk:
            self._step(byte)

    def until_boundary(self, chunk: bytes) -> int | None:
        """How much of `chunk` to pass on to reach the end of the event under way (0: between
        events already), the LF of a CRLF included; None: the whole chunk and more."""
        if self.at_boundary:
            return 0
        for i, byte in enumerate(chunk):
            if self._step(byte):
                return i + 2 if byte == 0x0D and chunk[i + 1:i + 2] == b"\n" else i + 1
        return None


def media_type(headers: Iterable[tuple[str, str]]) -> str:
    """The answer's Content-Type without parameters, lower case ("" without one)."""
    value = next((v for k, v in headers if k.lower() == "content-type"), "")
    return value.split(";", 1)[0].strip().lower()


def ttl_capped(runtime: Mapping[str, Any] | None, *, pod_sealed: bool) -> bool:
    """Whether an answer's ttlMs is capped now: the answering pod is sealed, or the runtime (as
    the view shows it) has a transition under way, `UpdatePending=True` (a change the handoff
    policy holds back), or a spec change the operator has not observed yet (a transition is
    about to start)."""
    if pod_sealed:
        return True
    if runtime is None:
        return False
    status = runtime.get("status") or {}
    if status.get("transition"):
        return True
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == UPDATE_PENDING and c.get("status") == "True":
            return True
    observed = status.get("observedGeneration")
    generation = (runtime.get("metadata") or {}).get("generation")
    return isinstance(observed, int) and isinstance(generation, int) and observed < generation


def _skip_ws(text: str, at: int) -> int:
    """The index of the first character at or after `at` that is not JSON whitespace."""
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _members(text: str, at: int) -> Iterator[tuple[str, Any, int, int]]:
    """(key, value, value start, value end) of each member of the JSON object at `text[at]`."""
    if text[at] != "{":
        raise ValueError("not an object")
    i = _skip_ws(text, at + 1)
    if text[i] == "}":
        return
    while True:
        key, i = _DECODER.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError("a member's key is not a string")
        i = _skip_ws(text, i)
        if text[i] != ":":
            raise ValueError("no ':' after a key")
        start = _skip_ws(text, i + 1)
        value, end = _DECODER.raw_decode(text, start)
        yield key, value, start, end
        i = _skip_ws(text, end)
        if text[i] == "}":
            return
        if text[i] != ",":
            raise ValueError("no ',' between members")
        i = _skip_ws(text, i + 1)


def cap_ttl(body: bytes, *, cap_ms: int) -> bytes:
    """`body` (one JSON-RPC message) with its result's `ttlMs` lowered to `cap_ms` when higher,
    written in the same number of bytes (the digits, then spaces); every other byte unchanged.
    Anything else (no result, no ttlMs, not JSON, a number too short to hold the cap's digits):
    `body` as it is."""
    if b'"ttlMs"' not in body:
        return body
    try:
        text = body.decode("utf-8")
        at = _skip_ws(text, 0)
        spans = [(s, e) for key, value, s, e in _members(text, at) if key == "result" and isinstance(value, dict)]
        if not spans:
            return body
        start = spans[-1][0]  # the last "result" is the one a parser keeps
        ttl = [(s, e) for key, value, s, e in _members(text, start)
               if key == "ttlMs" and isinstance(value, (int, float)) and not isinstance(value, bool) and value > cap_ms]
    except (ValueError, IndexError, UnicodeDecodeError):
        return body
    digits = str(cap_ms)
    for s, e in reversed(ttl):
        if e - s >= len(digits):
            text = text[:s] + digits.ljust(e - s) + text[e:]
    return text.encode("utf-8")


class SseTtlCap:
    """An SSE answer relayed chunk by chunk with `cap_ttl` applied to each `data:` line. A line
    is held until it ends (CAP_BUFFER_BYTES at most: a longer one passes as it is)."""

    def __init__(self, *, cap_ms: int) -> None:
        self.cap_ms = cap_ms
        self._pending = b""
        self._passing = False  # inside a line too long to hold: passed on to its end

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:"):
            return line
        end = len(line.rstrip(b"\r\n"))
        return line[:5] + cap_ttl(line[5:end], cap_ms=self.cap_ms) + line[end:]

    def feed(self, chunk: bytes) -> bytes:
        buf = self._pending + chunk
        out: list[bytes] = []
        if self._passing:
            cut = _first_line_end(buf)
            if cut < 0:
                self._pending = b""
                return buf
            out.append(buf[:cut])
            buf = buf[cut:]
            self._passing = False
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        out.extend(self._line(m.group()) for m in _LINE.finditer(buf, 0, cut))
        rest = buf[cut:]
        if len(rest) > CAP_BUFFER_BYTES:
            out.append(rest)
            rest = b""
            self._passing = True
        self._pending = rest
        return b"".join(out)

    def flush(self) -> bytes:
        """What is held at the end of the answer (a last line without its end: as it is)."""
        rest, self._pending = self._pending, b""
        return rest


def _first_line_end(buf: bytes) -> int:
    """The index after the first line end in `buf` (CRLF, LF or CR), -1 without one."""
    m = re.search(rb"\r\n|\r|\n", buf)
    return -1 if m is None else m.end()


class JsonTtlCap:
    """A JSON answer relayed chunk by chunk: held whole (CAP_BUFFER_BYTES at most, then passed as
    it is) and given `cap_ttl` at its end. Same length: its Content-Length stands."""

    def __init__(self, *, cap_ms: int) -> None:
        self.cap_ms = cap_ms
        self._held: list[bytes] = []
        self._size = 0
        self._passing = False

    def feed(self, chunk: bytes) -> bytes:
        if self._passing:
            return chunk
        self._held.append(chunk)
        self._size += len(chunk)
        if self._size <= CAP_BUFFER_BYTES:
            return b""
        self._passing = True
        return self._take()

    def flush(self) -> bytes:
        data = self._take()
        return data if self._passing else cap_ttl(data, cap_ms=self.cap_ms)

    def _take(self) -> bytes:
        data, self._held, self._size = b"".join(self._held), [], 0
        return data


def ttl_cap_for(media: str, *, cap_ms: int) -> SseTtlCap | JsonTtlCap | None:
    """The relay that caps ttlMs in an answer of this media type (None: neither JSON nor SSE)."""
    if media == "text/event-stream":
        return SseTtlCap(cap_ms=cap_ms)
    if media == "application/json" or media.endswith("+json"):
        return JsonTtlCap(cap_ms=cap_ms)
    return None


def cap_ttl_whole(data: bytes, *, media: str, cap_ms: int) -> bytes:
    """A whole answer's body with ttlMs capped (JSON, or SSE's `data:` lines), same length."""
    relay = ttl_cap_for(media, cap_ms=cap_ms)
    if relay is None or b'"ttlMs"' not in data:
        return data
    return relay.feed(data) + relay.flush()
