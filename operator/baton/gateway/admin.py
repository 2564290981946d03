"""The admin API the operator calls (JSON; docs/gateway.md, "Registration and the admin API").
Does I/O (an aiohttp app).

Every request carries `Authorization: Bearer <the admin key>` (BATON_GATEWAY_ADMIN_KEY_FILE, the
same Secret mounted into the operator); without it, or with another key: 401, nothing read or
changed.

- POST /v1/seal {"namespace", "runtime", "uid", "lease": {"name", "uid"}} -> {"sealed": true,
  "inflight": n, "held": h}: from this answer on, no new call is forwarded to that pod UID
  (idempotent). `lease` names the replica the seal is addressed to (its registration Lease, as
  the operator listed it): any other replica, or this one under another Lease UID, answers 409
  and seals nothing. Past the sealed bounds (baton.gateway.state) with nothing to evict: 503,
  nothing sealed, the operator asks again.
- GET /v1/inflight?uid=<uid>[&namespace=<ns>&runtime=<name>][&lease=<name>&leaseUID=<uid>] ->
  {"uid", "inflight", "sealed", "sessions", "sessionsTruncated"[, "held"]}: calls forwarded to it
  and not yet answered in full, open streams and WebSockets; the fingerprints of the sessions this
  replica last forwarded to it (at most state.SESSIONS_SEEN_REPORTED, most recent first;
  sessionsTruncated once the list reached that bound); with the runtime named, also the calls
  held for it now (what `kubectl baton status` shows); with the Lease named, 409 unless it is
  this replica's.
- GET /v1/activity?namespace=<ns>&runtime=<name> -> {"idleSeconds", "inflight", "held"}: seconds
  (this replica's monotonic clock) since the last call for that runtime that counts as activity
  (baton.gateway.idle), or since this replica started if none; the calls forwarded to it and not
  yet answered (GET streams and WebSockets excluded); the calls held for it now. The operator
  reads every live replica before it idles a runtime (docs/gateway.md, "Idle runtimes and wake").
- Anything else 404; bad JSON or a missing field 400 naming the field.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import Any, Awaitable, Callable

from aiohttp import web

from baton import adminkey
from baton.gateway import state as state_mod

log = logging.getLogger("baton.gateway")
MAX_BODY = 4096
# Refused requests are logged at most this often (a flood of them must not flood the log).
REFUSAL_LOG_SECONDS = 10.0
LeaseId = tuple[str, str]  # (name, uid) of this replica's registration Lease


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


def authorized(header: str | None, *, key: bytes) -> bool:
    """Whether an Authorization header (None: absent) presents `key` as a bearer token; compared
    in constant time. The model check (tests/model/sim.py, Gateway) admits seals by this too."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key)


def _misaddressed(asked: LeaseId, mine: LeaseId | None) -> web.Response | None:
    """409 unless `asked` is this replica's current Lease."""
    if mine is not None and asked == mine:
        return None
    shown = f"{mine[0]} (uid {mine[1]})" if mine else "no Lease yet"
    return web.json_response({"error": f"addressed to Lease {asked[0]} (uid {asked[1]}); this replica is {shown}"},
                             status=409)


def application(state: state_mod.State, *, key: adminkey.KeyFile, lease: Callable[[], LeaseId | None],
                present: Callable[[str], bool] = lambda _uid: True) -> web.Application:
    """`key`: the admin key every request must present; `lease`: this replica's Lease now (None
    before it is registered); `present`: whether a pod UID is in the view (seal eviction)."""
    last_logged = [float("-inf")]

    @web.middleware
    async def authenticated(request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if not authorized(header, key=key.key()):
            scheme = (header or "").partition(" ")[0]
            now = time.monotonic()
            if now - last_logged[0] >= REFUSAL_LOG_SECONDS:
                last_logged[0] = now
                log.warning("admin API: %s %s from %s refused: %s", request.method, request.path, request.remote,
                            "no bearer credential" if scheme.lower() != "bearer" else "wrong key")
            return web.json_response({"error": "unauthorized: present the gateway admin key as a bearer token"},
                                     status=401, headers={"WWW-Authenticate": 'Bearer realm="baton-gateway-admin"'})
        return await handler(request)

    async def seal(request: web.Request) -> web.Response:
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return _bad(f"body over {MAX_BODY} bytes")
        try:
            doc: Any = json.loads(raw)
        except ValueError as exc:
            return _bad(f"body is not JSON: {exc}")
        if not isinstance(doc, dict):
            return _bad("body must be a JSON object")
        for field in ("namespace", "runtime", "uid"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                return _bad(f"field {field!r} (a non-empty string) is missing")
        addressee = doc.get("lease")
        if not isinstance(addressee, dict):
            return _bad("field 'lease' (an object: the addressed replica's Lease name and uid) is missing")
        for field in ("name", "uid"):
            if not isinstance(addressee.get(field), str) or not addressee[field]:
                return _bad(f"field 'lease.{field}' (a non-empty string) is missing")
        refusal = _misaddressed((addressee["name"], addressee["uid"]), lease())
        if refusal is not None:
            return refusal
        uid, key_ = str(doc["uid"]), (str(doc["namespace"]), str(doc["runtime"]))
        first = uid not in state.sealed
        try:
            state.seal(uid, key_, present=present)
        except state_mod.SealRefused as exc:
            log.warning("seal of %s/%s pod %s refused: %s", key_[0], key_[1], uid, exc,
                        extra={"runtime": f"{key_[0]}/{key_[1]}"})
            return web.json_response({"error": f"seal refused: {exc}", "reason": "SealLimit"}, status=503)
        if first:
            log.info("sealed %s/%s pod %s: %d in flight", key_[0], key_[1], uid, state.inflight[uid],
                     extra={"runtime": f"{key_[0]}/{key_[1]}"})
        return web.json_response({"sealed": True, "inflight": state.inflight[uid], "held": state.held[key_]})

    async def inflight(request: web.Request) -> web.Response:
        uid = request.query.get("uid")
        if not uid:
            return _bad("query parameter 'uid' is missing")
        name, lease_uid = request.query.get("lease"), request.query.get("leaseUID")
        if name or lease_uid:
            if not name or not lease_uid:
                return _bad("query parameters 'lease' and 'leaseUID' go together")
            refusal = _misaddressed((name, lease_uid), lease())
            if refusal is not None:
                return refusal
        # The sessions this replica last forwarded to the pod (fingerprints, never the ids): the
        # operator counts them, distinct over the replicas, into the handoff's history entry.
        seen = state.sessions_seen(uid)
        answer: dict[str, Any] = {"uid": uid, "inflight": state.inflight[uid], "sealed": uid in state.sealed,
                                  "sessions": seen, "sessionsTruncated": len(seen) >= state_mod.SESSIONS_SEEN_REPORTED}
        namespace, runtime = request.query.get("namespace"), request.query.get("runtime")
        if namespace and runtime:
            answer["held"] = state.held[(namespace, runtime)]
        return web.json_response(answer)

    async def activity(request: web.Request) -> web.Response:
        for name in ("namespace", "runtime"):
            if not request.query.get(name):
                return _bad(f"query parameter {name!r} is missing")
        key_ = (request.query["namespace"], request.query["runtime"])
        return web.json_response({"idleSeconds": round(state.idle_seconds(key_), 3), "inflight": state.calls[key_],
                                  "held": state.held[key_]})

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"error": "not found"}, status=404)

    app = web.Application(client_max_size=MAX_BODY, middlewares=[authenticated])
    app.router.add_post("/v1/seal", seal)
    app.router.add_get("/v1/inflight", inflight)
    app.router.add_get("/v1/activity", activity)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
