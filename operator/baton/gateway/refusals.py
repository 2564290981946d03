"""Answers the gateway gives itself: a refusal with its reason (`Baton-Reason`, `Retry-After`
on 503s, a JSON-RPC error carrying the request's id when the body was JSON-RPC), and the bounded
reads of a request body that refusals and held calls need. Does I/O (reads the request body).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from baton.gateway import gwmetrics, route
from baton.gateway import budget as budget_mod
from baton.model import names

# A refusal reads at most this much of the body to find a JSON-RPC id (and only within the
# ledger's bound): a refused call must cost little.
PEEK_BYTES = 64 * 1024
PEEK_SECONDS = 2.0


# Refusals that also close the client's connection: GatewayShutdown (retry through another
# replica), UnknownRuntime (a runtime whose Service no longer points at the gateway, e.g.
# `gateway: false`: a kept-alive client reconnects through the Service's new endpoints).
CLOSE_AFTER = frozenset({route.Reason.GATEWAY_SHUTDOWN, route.Reason.UNKNOWN_RUNTIME})


def held_ms(held_since: float) -> str:
    """Baton-Held-Ms (names.HEADER_HELD_MS): the whole milliseconds a call was held, from
    `held_since` (monotonic) to now. On every answer to a call that was held, whatever it is."""
    return str(max(0, int((time.monotonic() - held_since) * 1000)))


class BodyLate(Exception):
    """The body did not arrive whole within its deadline."""


class BodyTooLarge(Exception):
    """The body is over its cap."""


def refusal(d: route.Refuse, *, target: route.Target | None, body: bytes | None,
            outcome: str = "refused") -> web.Response:
    gwmetrics.calls(outcome, d.reason.value).inc()
    headers = {names.HEADER_REASON: d.reason.value}
    if route.status_of(d.reason) == 503 or d.retry_after:
        headers["Retry-After"] = str(max(1, d.retry_after))
    resp = web.Response(
        status=route.status_of(d.reason), content_type="application/json", headers=headers,
        body=route.refusal_body(reason=d.reason, message=d.message, namespace=target.namespace if target else None,
                                runtime=target.runtime if target else None, generation=d.generation, body=body))
    if d.reason in CLOSE_AFTER:
        resp.force_close()
    return resp


async def read_body(request: web.BaseRequest, *, cap: int, seconds: float, ticket: budget_mod.Ticket) -> bytes:
    """The whole body, each chunk's bytes taken from `ticket` before it is kept. Raises BodyLate
    past `seconds` (in total: a body dribbled in is bounded, not each chunk), BodyTooLarge over
    `cap`, and a refusal (route.Refuse, as RefusedBody) when the ledger has no room."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > cap:
                    raise BodyTooLarge()
                full = ticket.reserve(len(chunk))
                if full is not None:
                    raise RefusedBody(full)
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyLate() from exc


class RefusedBody(Exception):
    def __init__(self, refuse: route.Refuse) -> None:
        super().__init__(refuse.message)
        self.refuse = refuse


async def peek_body(request: web.BaseRequest, *, ticket: budget_mod.Ticket) -> bytes | None:
    """Up to PEEK_BYTES of the request's body, to answer JSON-RPC with its id; None if larger,
    late, or the ledger has no room."""
    if not request.body_exists:
        return None
    try:
        return await read_body(request, cap=PEEK_BYTES, seconds=PEEK_SECONDS, ticket=ticket)
    except (BodyLate, BodyTooLarge, RefusedBody, aiohttp.ClientError, ConnectionError):
        return None
