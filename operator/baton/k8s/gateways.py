"""The gateway replicas, as the operator sees them (DESIGN.md "Gateway"; the contract in
docs/architecture.md, "Sealed admission"). Does I/O: one LIST of Leases in the system namespace
through the API server, and the admin calls to each live replica over aiohttp (seal, in-flight,
and for spec.idle the runtime's activity; one session per process, its connections kept and
bounded). A Lease's ANN_WAKE_DEMAND (the idle runtimes a replica holds calls for) is read here
too, from the LIST or the operator's watch of the same Leases (baton.cache.views).

Each replica registers itself with a Lease labelled baton.dev/component=gateway in
BATON_SYSTEM_NAMESPACE, renewed while it lives, whose annotation baton.dev/gateway-admin carries
its admin address (host:port). Live = the annotation is there and this process saw the Lease
change (its uid or resourceVersion: every renewal writes it) less than leaseDurationSeconds ago
by its OWN monotonic clock, as client-go's leader election judges a Lease: renewTime is the
replica's wall clock and is never compared with ours (a skewed clock neither hides a forwarding
replica nor keeps a dead one). A Lease seen for the first time is live (a replica that just
started must be sealed). The admin calls dial only those addresses, each carrying the admin key
and naming the Lease they are addressed to, each bounded by one short total deadline: a pass is
never held long by a replica that does not answer.

A replica whose Lease stopped changing may still forward for its static window (the annotation
baton.dev/gateway-static-seconds; docs/gateway.md, "When the API server is away"): it is still
listed, `lapsed`, until leaseDurationSeconds plus that window have passed since the last change
seen, and still asked. What it answers is classified here (AdminGone: nothing listens at its
address, or another process does) and judged in baton.sealing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any
from urllib.parse import urlencode

import aiohttp

from baton.k8s import api, client
from baton.model import names
from baton.sharding import ranges

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
# In the system namespace: the replicas' Leases (listed here), and the gateway's pods, whose
# watch-fed view (baton.cache.views) gives the EndpointSlice of each runtime routed through it.
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("coordination.k8s.io", "leases", ("list", "watch")),  # watched: a wake's demand (baton.cache.views)
    ("", "pods", ("list", "watch")),
)

# One admin call's total deadline (connect, send, read). Short: the pass waits for it.
ADMIN_TIMEOUT_SECONDS = 2.0
# An admin answer is a small JSON object; anything longer is not one.
MAX_ADMIN_RESPONSE_BYTES = 4096
# But for the sessions an in-flight answer lists: at most this many fingerprints (the gateway's
# state.SESSIONS_SEEN_REPORTED), each at most this long (the gateway's are 16 hex digits).
MAX_SESSIONS_LISTED = 4096
MAX_FINGERPRINT_CHARS = 64
MAX_INFLIGHT_RESPONSE_BYTES = MAX_ADMIN_RESPONSE_BYTES + MAX_SESSIONS_LISTED * (MAX_FINGERPRINT_CHARS + 4)
# A wake-demand annotation: at most names.WAKE_DEMAND_MAX names of at most 253 + 1 + 63 characters.
MAX_WAKE_DEMAND_CHARS = 512 * 330
# Every admin call of this process goes through one session: connections to the replicas are
# kept alive and reused (a seal round per runtime in transition every half second would otherwise
# open and close one connection per call), at most this many in all and to each replica. A call
# waiting for a free connection waits within its own deadline.
ADMIN_CONNECTIONS = 128
ADMIN_CONNECTIONS_PER_REPLICA = 16
# A static window announced in a Lease is believed up to this (a bad annotation cannot keep a
# dead replica asked for long; BATON_GATEWAY_STATIC_SECONDS allows 600).
MAX_STATIC_SECONDS = 3600
_session: aiohttp.ClientSession | None = None
_session_loop: asyncio.AbstractEventLoop | None = None


@dataclasses.dataclass(frozen=True)
class Replica:
    """A live gateway replica: its Lease's name (what a message names), its admin address, and
    its Lease's uid (with the name, the addressee of a seal: another replica refuses it)."""

    name: str
    admin: str  # host:port
    uid: str = ""
    # Its Lease stopped changing for a whole duration, but its static window has not passed: it
    # may still forward to runtimes in steady state (and still answers its admin API).
    lapsed: bool = False
    # The idle runtimes ("namespace/name") it holds calls for now: its Lease's ANN_WAKE_DEMAND.
    wake_demand: frozenset[str] = frozenset()
    # This process saw the Lease change (its replica wrote it while this process watched): only
    # then is its wake demand believed (a SIGKILLed replica's Lease keeps its last demand forever).
    written_since_seen: bool = True


@dataclasses.dataclass(frozen=True)
class Counts:
    """One replica's answer: calls in flight on the pod, and calls it holds for the runtime now
    (None: the replica did not say, as a gateway before the held count); in an in-flight answer,
    the fingerprints of the MCP sessions it last forwarded to the pod (None: not said, as a
    gateway before issue 42, or malformed), `sessions_truncated` when it listed only its bound."""

    inflight: int
    held: int | None = None
    sessions: frozenset[str] | None = None
    sessions_truncated: bool = False


class AdminError(Exception):
    """An admin call that did not give a usable answer (unreachable, timed out, not 200, not JSON)."""


class AdminNotFound(AdminError):
    """404: the replica has no such admin endpoint (a gateway older than the call)."""


class AdminGone(AdminError):
    """The answer says the replica addressed is not there: the connection was refused (nothing
    listens at its address: its process is dead) or the call was refused as misaddressed (409:
    another process, under another Lease, listens there). Only a lapsed replica is judged gone by
    it (baton.sealing); a live one's is a failure like any other."""


def static_seconds(lease: dict[str, Any]) -> int:
    """The static window a Lease announces (its annotation, a decimal integer), 0 when none or
    malformed (a gateway without static mode), at most MAX_STATIC_SECONDS."""
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(names.ANN_GATEWAY_STATIC)
    if not isinstance(text, str) or not text.isdigit():
        return 0
    return min(int(text), MAX_STATIC_SECONDS)


def wake_demand(lease: dict[str, Any] | None) -> frozenset[str]:
    """The runtimes ("namespace/name") a gateway Lease's ANN_WAKE_DEMAND lists (a JSON list of
    strings, at most names.WAKE_DEMAND_MAX read); empty when none, or malformed (never a wake
    from an annotation that cannot be read)."""
    if lease is None:
        return frozenset()
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(names.ANN_WAKE_DEMAND)
    if not isinstance(text, str) or len(text) > MAX_WAKE_DEMAND_CHARS:
        return frozenset()
    try:
        listed = json.loads(text)
    except ValueError:
        return frozenset()
    if not isinstance(listed, list):
        return frozenset()
    return frozenset(k for k in listed[:names.WAKE_DEMAND_MAX]
                     if isinstance(k, str) and k.count("/") == 1 and all(k.split("/")))


def live_replicas(leases: list[dict[str, Any]], *, sightings: ranges.Sightings, now: float) -> list[Replica]:
    """The replicas whose Lease is live at `now` (this process's monotonic clock), recording this
    listing in `sightings` (pure but for that record: the listing's interpretation). Live: seen
    changed (uid or resourceVersion) less than leaseDurationSeconds ago, or seen for the first
    time now; `lapsed` when unchanged for longer but less than leaseDurationSeconds plus the
    static window its Lease announces. Leases no longer listed are forgotten."""
    out: list[Replica] = []
    for lease in leases:
        meta = lease.get("metadata") or {}
        spec = lease.get("spec") or {}
        admin = (meta.get("annotations") or {}).get(names.ANN_GATEWAY_ADMIN)
        name, uid, version = meta.get("name"), meta.get("uid"), meta.get("resourceVersion")
        duration = spec.get("leaseDurationSeconds")
        if not admin or not name or not uid or not version or not isinstance(duration, int) or isinstance(duration, bool):
            continue
        unchanged_for = sightings.observe(name=str(name), version=f"{uid}/{version}", now=now)
        if unchanged_for < duration + static_seconds(lease):
            out.append(Replica(name=str(name), admin=str(admin), uid=str(uid), lapsed=unchanged_for >= duration,
                               wake_demand=wake_demand(lease), written_since_seen=sightings.changed(str(name))))
    sightings.forget_except(str((lz.get("metadata") or {}).get("name")) for lz in leases)
    return sorted(out, key=lambda r: r.name)


async def list_live(namespace: str, *, sightings: ranges.Sightings, now: float) -> list[Replica]:
    """LIST the gateway Leases of the system namespace (a fresh read: a replica that registered a
    moment ago must be counted) and keep the live ones (`now`: this process's monotonic clock)."""
    items, _ = await client.work().list(
        api.path("coordination.k8s.io/v1", "leases", namespace),
        label_selector=f"{names.LABEL_COMPONENT}={names.COMPONENT_GATEWAY}",
    )
    return live_replicas(items, sightings=sightings, now=now)


def _url(admin: str, path: str) -> str:
    host, sep, port = admin.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise AdminError(f"admin address {admin!r} is not host:port")
    return f"http://{host}:{port}{path}"


def _admin_session() -> aiohttp.ClientSession:
    """This process's admin session (one per event loop: a test's new loop gets its own)."""
    global _session, _session_loop
    loop = asyncio.get_running_loop()
    if _session is None or _session.closed or _session_loop is not loop:
        _session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=ADMIN_CONNECTIONS, limit_per_host=ADMIN_CONNECTIONS_PER_REPLICA),
            cookie_jar=aiohttp.DummyCookieJar())
        _session_loop = loop
    return _session


async def close() -> None:
    """Close the admin session and its connections (at shutdown)."""
    global _session, _session_loop
    if _session is not None and _session_loop is asyncio.get_running_loop():
        await _session.close()
    _session, _session_loop = None, None


async def _call(method: str, url: str, *, body: dict[str, Any] | None = None, key: bytes | None = None,
                timeout: float = ADMIN_TIMEOUT_SECONDS, limit: int = MAX_ADMIN_RESPONSE_BYTES) -> dict[str, Any]:
    headers = {"Authorization": "Bearer " + key.decode("ascii")} if key else {}
    try:
        async with _admin_session().request(method, url, json=body, headers=headers, allow_redirects=False,
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            raw = await _read(resp.content, limit=limit)
            if resp.status == 409:
                raise AdminGone(f"{method} {url}: {resp.status}{_why(raw)}")
            if resp.status == 404:
                raise AdminNotFound(f"{method} {url}: {resp.status}{_why(raw)}")
            if resp.status != 200:
                raise AdminError(f"{method} {url}: {resp.status}{_why(raw)}")
    except AdminError:
        raise
    except aiohttp.ClientConnectorError as exc:
        # Refused: nothing listens there (a timeout or an unreachable host says nothing of the kind).
        kind = AdminGone if isinstance(exc.os_error, ConnectionRefusedError) else AdminError
        raise kind(f"{method} {url}: {type(exc).__name__} {exc}".strip()) from exc
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise AdminError(f"{method} {url}: {type(exc).__name__} {exc}".strip()) from exc
    if len(raw) > limit:
        raise AdminError(f"{method} {url}: answer over {limit} bytes")
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise AdminError(f"{method} {url}: not JSON") from exc
    if not isinstance(answer, dict):
        raise AdminError(f"{method} {url}: not a JSON object")
    return answer


async def _read(content: aiohttp.StreamReader, *, limit: int) -> bytes:
    """The body up to `limit` + 1 bytes (one more tells it is too long). A read gives what has
    arrived, at most a chunk: an answer longer than one chunk (a list of sessions) is read on."""
    raw = b""
    while len(raw) <= limit:
        chunk = await content.read(limit + 1 - len(raw))
        if not chunk:
            break
        raw += chunk
    return raw


def _why(raw: bytes) -> str:
    """The error a refusal's JSON body gives (401 without the key, 409 misaddressed, 503 past a
    bound), for the log; empty if it gives none."""
    try:
        error = json.loads(raw[:MAX_ADMIN_RESPONSE_BYTES]).get("error")
    except (ValueError, AttributeError):
        return ""
    return f" ({str(error)[:200]})" if error else ""


def _counts(answer: dict[str, Any], what: str) -> Counts:
    n = answer.get("inflight")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise AdminError(f"{what}: no in-flight count in the answer")
    held = answer.get("held")
    # The held count is only shown, never decided on: one that is missing or malformed is unknown.
    ok = isinstance(held, int) and not isinstance(held, bool) and held >= 0
    return Counts(inflight=n, held=held if ok else None, sessions=_sessions(answer.get("sessions")),
                  sessions_truncated=answer.get("sessionsTruncated") is True)


def _sessions(listed: object) -> frozenset[str] | None:
    """The session fingerprints an answer lists; None (unknown) when absent or malformed: they
    are only counted for people to read (the history entry), never decided on."""
    if not isinstance(listed, list) or len(listed) > MAX_SESSIONS_LISTED:
        return None
    if not all(isinstance(f, str) and 0 < len(f) <= MAX_FINGERPRINT_CHARS for f in listed):
        return None
    return frozenset(listed)


async def seal(replica: Replica, *, namespace: str, runtime: str, uid: str, key: bytes | None = None,
               timeout: float = ADMIN_TIMEOUT_SECONDS) -> Counts:
    """POST /v1/seal, addressed to the replica's Lease (name and uid) and carrying the admin key:
    from this answer on, the replica forwards no new call to pod `uid`. Returns its in-flight
    count for that pod and the calls it holds for the runtime; AdminError unless it confirmed
    (sealed: true)."""
    body = {"namespace": namespace, "runtime": runtime, "uid": uid, "lease": {"name": replica.name, "uid": replica.uid}}
    answer = await _call("POST", _url(replica.admin, "/v1/seal"), body=body, key=key, timeout=timeout)
    if answer.get("sealed") is not True:
        raise AdminError(f"{replica.name}: seal not confirmed")
    return _counts(answer, replica.name)


async def inflight(replica: Replica, *, uid: str, namespace: str, runtime: str, key: bytes | None = None,
                   timeout: float = ADMIN_TIMEOUT_SECONDS) -> Counts:
    """GET /v1/inflight: calls forwarded to pod `uid` and not yet answered in full (streams and
    WebSockets included) on this replica, the calls it holds for the runtime, and the sessions it
    last forwarded to the pod. Addressed to the replica's Lease when its uid is known (another
    replica refuses to answer for it)."""
    fields = {"uid": uid, "namespace": namespace, "runtime": runtime}
    if replica.uid:
        fields.update({"lease": replica.name, "leaseUID": replica.uid})
    answer = await _call("GET", _url(replica.admin, "/v1/inflight?" + urlencode(fields)), key=key, timeout=timeout,
                         limit=MAX_INFLIGHT_RESPONSE_BYTES)
    return _counts(answer, replica.name)



@dataclasses.dataclass(frozen=True)
class Activity:
    """One replica's GET /v1/activity answer: seconds since the runtime's last call that counts
    (by the replica's own clock; since it started if none), calls in flight and held for it."""

    idle_seconds: float
    inflight: int
    held: int


def _activity(answer: dict[str, Any], what: str) -> Activity:
    idle = answer.get("idleSeconds")
    if not isinstance(idle, (int, float)) or isinstance(idle, bool) or not idle >= 0 or idle == float("inf"):
        raise AdminError(f"{what}: no idleSeconds in the activity answer")
    counts = []
    for field in ("inflight", "held"):
        n = answer.get(field)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise AdminError(f"{what}: no {field} count in the activity answer")
        counts.append(n)
    return Activity(idle_seconds=float(idle), inflight=counts[0], held=counts[1])


async def activity(replica: Replica, *, namespace: str, runtime: str, key: bytes | None = None,
                   timeout: float = ADMIN_TIMEOUT_SECONDS) -> Activity:
    """GET /v1/activity: how long since the runtime's last call that counts as activity on this
    replica, and its calls in flight and held (spec.idle). Addressed to the replica's Lease when
    its uid is known. AdminNotFound (404): a gateway older than idling, whose activity is unknown."""
    fields = {"namespace": namespace, "runtime": runtime}
    if replica.uid:
        fields.update({"lease": replica.name, "leaseUID": replica.uid})
    answer = await _call("GET", _url(replica.admin, "/v1/activity?" + urlencode(fields)), key=key, timeout=timeout)
    return _activity(answer, replica.name)
