"""Handshake-era MCP sessions across generations (`spec.service.sessions: Rebind`; docs/gateway.md,
"Sessions across a handoff"). The sealed session id and the reading of an initialize answer are
pure; `Rebinder.replay` does I/O (the replay of `initialize` on the serving pod, through the
gateway's upstream pool).

With Rebind the answer to an `initialize` forwarded here carries the gateway's own session id:
`bt1.<payload>.<mac>`, the payload holding the runtime, the pod that issued the backend session,
the backend's own id and the client's initialize body (zlib, base64url), signed with HMAC-SHA256
under a key derived from the gateway admin key (every replica has it, so any replica, restarted or
not, reads any id). Signed, not encrypted: it holds nothing the client did not send or was not
already given (its own initialize, the id the server issued it). A call carrying such an id whose
issuing pod no longer serves is re-bound: this replica replays the initialize and
`notifications/initialized` on the serving pod once (single flight), keeps the client's id -> the
new backend id (bounded, least recently used first) and forwards the call under the new id; answers
carry the client's id back. Without the id's state in hand (another replica re-bound it, this one
restarted) the replay is this replica's own: each replica re-binds a session at most once per
generation.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import dataclasses
import enum
import hashlib
import hmac
import json
import secrets
import zlib
from typing import Any, Callable

from baton.gateway import http1, http1conn, hygiene
from baton.model import names

PREFIX = "bt1."
# The client's initialize is kept in the id, so the id's size bounds it: an initialize past
# MAX_INITIALIZE_BYTES, or an id past MAX_ID_CHARS, is not sealed (that session expires at a
# handoff, as with Expire; counted `not_sealed`). Common clients send 200-600 bytes.
MAX_INITIALIZE_BYTES = 16 * 1024
MAX_ID_CHARS = 4096
MAC_BYTES = 16
KEY_CONTEXT = names.SESSION_ID_KEY_CONTEXT.encode("ascii")
# The replay: initialize, then notifications/initialized, within this many seconds in all, an
# answer read up to ANSWER_CAP bytes (an SSE answer stops at the first JSON-RPC response).
REPLAY_SECONDS = 10.0
ANSWER_CAP = 256 * 1024
# Re-bindings kept per replica (least recently used first): one per live session and generation.
REBINDS_CAP = 65536
# Sessions whose DELETE went through here: never re-bound after (a client that ended its session).
ENDED_CAP = 16384


class Mode(str, enum.Enum):
    REBIND = "Rebind"
    EXPIRE = "Expire"


def mode_of(runtime: dict[str, Any] | None) -> Mode:
    """spec.service.sessions, Rebind by default (a value this version does not know: Rebind)."""
    service = ((runtime or {}).get("spec") or {}).get("service") or {}
    return Mode.EXPIRE if service.get("sessions") == Mode.EXPIRE.value else Mode.REBIND


def derive_key(admin_key: bytes) -> bytes:
    """The session-id key: its own purpose under the admin key, so neither can stand for the other."""
    return hmac.new(admin_key, KEY_CONTEXT, hashlib.sha256).digest()


class Keys:
    """The current session-id key and the one before it (an admin key rotated in its Secret keeps
    the ids sealed under the old one readable until the next rotation)."""

    def __init__(self, admin_key: Callable[[], bytes] | None) -> None:
        # Without an admin key (unit tests): a key of this process alone.
        fixed = secrets.token_bytes(32)
        self._admin_key: Callable[[], bytes] = admin_key or (lambda: fixed)
        self._last_admin: bytes | None = None
        self._current = b""
        self._previous: bytes | None = None

    def current(self) -> bytes:
        admin = self._admin_key()
        if admin != self._last_admin:
            if self._last_admin is not None:
                self._previous = self._current
            self._last_admin, self._current = admin, derive_key(admin)
        return self._current

    def all(self) -> tuple[bytes, ...]:
        current = self.current()
        return (current,) if self._previous is None else (current, self._previous)


@dataclasses.dataclass(frozen=True)
class Sealed:
    namespace: str
    runtime: str
    pod_uid: str  # the pod that issued `backend`
    backend: str  # the server's own session id ("" when it issued none)
    initialize: bytes  # the client's initialize request, verbatim


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, (PREFIX + payload).encode("ascii"), hashlib.sha256).digest()[:MAC_BYTES])


def seal(s: Sealed, *, key: bytes) -> str | None:
    """The client's session id for `s`, or None when it would exceed the bounds."""
    if len(s.initialize) > MAX_INITIALIZE_BYTES:
        return None
    try:
        text = s.initialize.decode("utf-8")
    except UnicodeDecodeError:
        return None
    payload = _b64(zlib.compress(json.dumps([s.namespace, s.runtime, s.pod_uid, s.backend, text],
                                            separators=(",", ":")).encode("utf-8")))
    sid = f"{PREFIX}{payload}.{_mac(key, payload)}"
    return sid if len(sid) <= MAX_ID_CHARS else None


def is_sealed(sid: str) -> bool:
    return sid.startswith(PREFIX)


def unseal(sid: str, *, keys: tuple[bytes, ...], namespace: str, runtime: str) -> Sealed | None:
    """The state in a session id this gateway sealed for this runtime; None when it is not one
    (a bad signature, another key, another runtime, malformed)."""
    if not sid.startswith(PREFIX) or len(sid) > MAX_ID_CHARS:
        return None
    payload, _, mac = sid[len(PREFIX):].rpartition(".")
    if not payload or not any(hmac.compare_digest(mac, _mac(k, payload)) for k in keys):
        return None
    try:
        fields = json.loads(zlib.decompressobj().decompress(_unb64(payload), MAX_INITIALIZE_BYTES * 4))
    except (ValueError, zlib.error, binascii.Error):
        return None
    if not (isinstance(fields, list) and len(fields) == 5 and all(isinstance(f, str) for f in fields)):
        return None
    ns, rt, uid, backend, text = fields
    if (ns, rt) != (namespace, runtime):
        return None  # sealed for another runtime: never replayed here
    return Sealed(namespace=ns, runtime=rt, pod_uid=uid, backend=backend, initialize=text.encode("utf-8"))


def fingerprint(sid: str) -> str:
    """A short name for a client's session (counts, logs): never the id itself."""
    return hashlib.sha256(sid.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class ReplayFailed(Exception):
    """The serving pod did not take the replayed initialize (the message says why)."""


class ReplayBusy(ReplayFailed):
    """No upstream connection to the pod was free (this replica's bound): nothing was sent."""


class ReplayNotConnected(ReplayFailed):
    """The pod refused the connection before anything was sent (its server not listening yet)."""


def initialize_result(body: bytes, *, content_type: str) -> dict[str, object]:
    """The result of an initialize answer, JSON or an event stream (the first JSON-RPC response
    in it); ReplayFailed if it is an error or there is none."""
    docs: list[object] = []
    if content_type.lower().startswith("text/event-stream"):
        for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
            data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
            if data.strip():
                try:
                    docs.append(json.loads(data))
                except ValueError:
                    continue
    else:
        try:
            docs.append(json.loads(body))
        except ValueError:
            raise ReplayFailed("the answer to initialize is not JSON") from None
    for doc in docs:
        if isinstance(doc, dict) and ("result" in doc or "error" in doc) and "method" not in doc:
            if "error" in doc:
                error = doc["error"]
                message = error.get("message") if isinstance(error, dict) else error
                raise ReplayFailed(f"initialize answered an error: {str(message)[:200]}")
            result = doc["result"]
            if not isinstance(result, dict):
                raise ReplayFailed("initialize answered a result that is not an object")
            return result
    raise ReplayFailed("the answer to initialize held no JSON-RPC response")


def stream_complete(body: bytes) -> bool:
    """An event stream holds a JSON-RPC response already (the rest need not be waited for)."""
    try:
        initialize_result(body, content_type="text/event-stream")
    except ReplayFailed as exc:
        return "error" in str(exc)
    return True


class Rebinds:
    """This replica's re-bindings: (namespace, runtime, client id) -> (pod uid, backend id), the
    replays in flight (one per session and pod), and the sessions ended by a DELETE. Bounded."""

    def __init__(self) -> None:
        self.bound: collections.OrderedDict[tuple[str, str, str], tuple[str, str]] = collections.OrderedDict()
        self.ended: collections.OrderedDict[tuple[str, str, str], None] = collections.OrderedDict()
        self.replaying: dict[tuple[str, str, str, str], asyncio.Future[str]] = {}

    def get(self, key: tuple[str, str, str], uid: str) -> str | None:
        found = self.bound.get(key)
        if found is None or found[0] != uid:
            return None
        self.bound.move_to_end(key)
        return found[1]

    def put(self, key: tuple[str, str, str], uid: str, backend: str) -> None:
        self.bound[key] = (uid, backend)
        self.bound.move_to_end(key)
        while len(self.bound) > REBINDS_CAP:
            self.bound.popitem(last=False)

    def end(self, key: tuple[str, str, str]) -> None:
        self.bound.pop(key, None)
        self.ended[key] = None
        while len(self.ended) > ENDED_CAP:
            self.ended.popitem(last=False)

    def is_ended(self, key: tuple[str, str, str]) -> bool:
        return key in self.ended


# Set here on the replayed requests, whatever the client's call carried.
REPLAY_DROP = frozenset({"mcp-session-id", "mcp-protocol-version", "content-length", "content-type", "accept",
                         "accept-encoding", "expect", "last-event-id", "x-forwarded-for", "forwarded"})
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


async def replay(pool: http1.Pool, *, pod: http1.Key, path: str, headers: list[tuple[str, str]], initialize: bytes,
                 connect_timeout: float) -> str:
    """Initialize a new session on `pod` as the client did on the pod before it: its initialize
    (verbatim) and `notifications/initialized`, with the headers of the call being re-bound (its
    credentials are the client's now). The new backend id ("" if the server issued none), or
    ReplayFailed saying why. Bounded by REPLAY_SECONDS in all."""
    base = hygiene.end_to_end(headers, also_drop=REPLAY_DROP)
    try:
        async with asyncio.timeout(REPLAY_SECONDS):
            head = http1.request_head(method="POST", target=path, body_size=len(initialize), headers=base + [
                ("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")])
            conn = await pool.call(key=pod, data=head + initialize, connect_timeout=connect_timeout)
            try:
                if not 200 <= conn.status < 300:
                    raise ReplayFailed(f"the serving pod answered initialize with HTTP {conn.status}")
                answer = dict((k.lower(), v) for k, v in conn.headers)
                content_type = answer.get("content-type", "")
                body = b""
                while len(body) <= ANSWER_CAP:
                    chunk = await conn.read_chunk()
                    if not chunk:
                        break
                    body += chunk
                    if content_type.lower().startswith("text/event-stream") and stream_complete(body):
                        break  # the response is in; the stream's end need not be waited for
                result = initialize_result(body, content_type=content_type)
            finally:
                conn.release()
            backend = answer.get("mcp-session-id", "")
            version = result.get("protocolVersion")
            extra = [("Mcp-Session-Id", backend)] if backend else []
            if isinstance(version, str) and version:
                extra.append(("MCP-Protocol-Version", version))
            head = http1.request_head(method="POST", target=path, body_size=len(INITIALIZED), headers=base + extra + [
                ("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")])
            conn = await pool.call(key=pod, data=head + INITIALIZED, connect_timeout=connect_timeout)
            try:
                if not 200 <= conn.status < 300:
                    raise ReplayFailed(f"the serving pod answered notifications/initialized with HTTP {conn.status}")
                while len(await conn.read_chunk()) > 0:
                    pass
            finally:
                conn.release()
            return backend
    except TimeoutError:
        raise ReplayFailed(f"the serving pod did not complete initialize within {REPLAY_SECONDS:g}s") from None
    except http1.PoolBusy as exc:
        raise ReplayBusy(f"no connection to the serving pod free: {exc}") from None
    except http1.ConnectFailed as exc:
        raise ReplayNotConnected(f"the serving pod refused the connection: {exc}") from None
    except (http1conn.UpstreamFailed, ConnectionError) as exc:
        raise ReplayFailed(f"the serving pod failed the replayed initialize: {type(exc).__name__}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Binding:
    """What the forwarding does with the session ids of one call's answer."""

    client_id: str | None = None  # the client's sealed id: answers carry it in place of the backend's
    initialize: bytes | None = None  # an initialize under Rebind: the answer's backend id is sealed
    key: bytes = b""

    def answer_id(self, backend_id: str, *, namespace: str, runtime: str, uid: str) -> str | None:
        """The id the client gets in place of `backend_id`; None: the backend's own, unchanged."""
        if self.initialize is not None:
            return seal(Sealed(namespace=namespace, runtime=runtime, pod_uid=uid, backend=backend_id,
                               initialize=self.initialize), key=self.key)
        return self.client_id


def with_session(headers: list[tuple[str, str]], backend: str) -> list[tuple[str, str]]:
    """`headers` with the client's Mcp-Session-Id replaced by the backend's (dropped when "")."""
    out = [(k, v) for k, v in headers if k.lower() != "mcp-session-id"]
    if backend:
        out.append(("Mcp-Session-Id", backend))
    return out
