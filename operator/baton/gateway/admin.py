"""The admin API the operator calls (JSON; /work/brief/gateway.md). Does I/O (an aiohttp app).

- POST /v1/seal {"namespace", "runtime", "uid"} -> {"sealed": true, "inflight": n, "held": h}:
  from this answer on, no new call is forwarded to that pod UID (idempotent).
- GET /v1/inflight?uid=<uid>[&namespace=<ns>&runtime=<name>] -> {"uid", "inflight", "sealed"
  [, "held"]}: calls forwarded to it and not yet answered in full, open streams and WebSockets;
  with the runtime named, also the calls held for it now (what `kubectl baton status` shows).
- Anything else 404; bad JSON or a missing field 400 naming the field.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from baton.gateway import state as state_mod

log = logging.getLogger("baton.gateway")
MAX_BODY = 4096


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


def application(state: state_mod.State) -> web.Application:
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
        uid = str(doc["uid"])
        first = uid not in state.sealed
        state.seal(uid, (str(doc["namespace"]), str(doc["runtime"])))
        if first:
            log.info("sealed %s/%s pod %s: %d in flight", doc["namespace"], doc["runtime"], uid, state.inflight[uid],
                     extra={"runtime": f"{doc['namespace']}/{doc['runtime']}"})
        return web.json_response({"sealed": True, "inflight": state.inflight[uid],
                                  "held": state.held[(str(doc["namespace"]), str(doc["runtime"]))]})

    async def inflight(request: web.Request) -> web.Response:
        uid = request.query.get("uid")
        if not uid:
            return _bad("query parameter 'uid' is missing")
        answer: dict[str, Any] = {"uid": uid, "inflight": state.inflight[uid], "sealed": uid in state.sealed}
        namespace, runtime = request.query.get("namespace"), request.query.get("runtime")
        if namespace and runtime:
            answer["held"] = state.held[(namespace, runtime)]
        return web.json_response(answer)

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"error": "not found"}, status=404)

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/v1/seal", seal)
    app.router.add_get("/v1/inflight", inflight)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
