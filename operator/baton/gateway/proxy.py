"""The call path's admission: route one HTTP call by its Host, then hold it, refuse it, or hand
it to `baton.gateway.forward` for the serving pod. Does I/O (aiohttp server; the body reads).

What one call may keep is taken from the ledger (`baton.gateway.budget`) through its own ticket
and given back exactly once: a held place (per runtime and in all) and the bytes of its body
(in all); past a bound it is refused at once (503 Overloaded). A held call's body must arrive
within its admissionSeconds (a slow body counts against it), any body read whole within
BATON_GATEWAY_BODY_SECONDS. A call whose client leaves is never forwarded: aiohttp cancels the
handler when the connection is lost (`listener.calls_server`), and a held call looks once more
before it is forwarded; counted `cancelled`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import aiohttp
from aiohttp import web

from baton.gateway import budget, clients, forward, gwmetrics, hygiene, idle, refusals, registrar, route, sessionbind
from baton.gateway import sessions
from baton.gateway import state as state_mod
from baton.gateway import views as views_mod
from baton.model import names
from baton.settings import GatewaySettings

SESSION_HEADER = forward.SESSION_HEADER
SMALL_BODY_BYTES = forward.SMALL_BODY_BYTES
# Connect refused by a pod the API calls Ready (its server not listening yet): tried again
# within the call's admission budget, never once any byte of the body was sent.
CONNECT_RETRY_SECONDS = 0.2
REFUSED_CONNECT = "the serving pod refused the connection"
UNFORWARDED_METHODS = frozenset({"CONNECT", "TRACE"})
# At startup, the longest a call waits for the view of pod addresses (who its caller is) to be
# listed; past it the caller is judged by what is listed (an unknown address is no pod).
CLIENT_VIEW_WAIT_SECONDS = 30.0


class ClientGone(Exception):
    """The client's connection closed while its call was held."""


def forwardable(*, held: bool, client_waiting: bool) -> bool:
    """Whether a call the views let through is forwarded now: a held call only while its client
    still waits (aiohttp's cancellation of the handler may land after the wake-up that found a
    pod). A call forwarded as it arrives is not looked at again (its client was just there).
    The model check (tests/model/sim.py, Gateway) decides held calls by this too."""
    return client_waiting or not held


class Proxy:
    def __init__(self, *, settings: GatewaySettings, views: views_mod.GatewayViews, state: state_mod.State,
                 forwarding: Callable[[], bool | registrar.Mode], admin_key: Callable[[], bytes] | None = None) -> None:
        self.settings, self.views, self.state = settings, views, state
        # Session ids are sealed under a key derived from the admin key: every replica reads them.
        self.session_keys = sessions.Keys(admin_key)
        self._forwarding = forwarding
        self.shutting_down = False
        self.upstreams = forward.Upstreams(settings=settings, state=state)
        self.upstreams.runtime_of = views.runtime  # an answer's ttlMs is capped in a transition
        self.binder = sessionbind.Binder(settings=settings, views=views, state=state, upstreams=self.upstreams,
                                         keys=self.session_keys)
        gwmetrics.watch_buffered_bytes(lambda: float(state.buffered_bytes))
        self.ledger = budget.Ledger(state=state, max_held_per_runtime=settings.max_held_per_runtime,
                                    max_held_total=settings.max_held_total,
                                    max_buffered_bytes=settings.max_buffered_bytes,
                                    max_held_bytes_per_runtime=settings.max_held_bytes_per_runtime)

    @property
    def pool(self) -> Any:
        return self.upstreams.pool

    async def start(self) -> None:
        await self.upstreams.start()

    async def close(self) -> None:
        await self.upstreams.close()

    # --- the decision, from the views -------------------------------------------------------
    def decide(self, target: route.Target, excluded: set[str]) -> route.Decision:
        # `forwarding`: the registrar's mode (True/False: every runtime or none, as in tests).
        mode = self._forwarding()
        if mode is False or mode == registrar.Mode.HOLDING or self.shutting_down:
            return route.Hold("this replica is not registered or its views are not listed")
        runtime = self.views.runtime(target.namespace, target.runtime)
        pods = self.views.pods_of(target.namespace, target.runtime)
        d = route.decide(runtime, pods, port=target.port, sealed=self.state.sealed, excluded=excluded,
                         allowed=self.settings.allowed)
        if mode == registrar.Mode.STATIC:
            # The API server is away (docs/gateway.md, "When the API server is away"): only a
            # runtime in steady state in the last view is forwarded; seals still apply above.
            return route.fail_static(runtime, d)
        return d

    async def _refuse(self, request: web.BaseRequest, d: route.Refuse, *, target: route.Target | None,
                      body: bytes | None, ticket: budget.Ticket) -> web.Response:
        if body is None:
            body = await refusals.peek_body(request, ticket=ticket)
        return refusals.refusal(d, target=target, body=body)

    # --- the call ----------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        ticket = self.ledger.ticket()
        try:
            resp = await self._handle(request, ticket)
            if ticket.held_since is not None and not resp.prepared:
                # A refusal of a call that was held (a forwarded answer carries it already).
                resp.headers[names.HEADER_HELD_MS] = refusals.held_ms(ticket.held_since)
            if request.body_exists and not request.content.is_eof() and not resp.prepared:
                # Answered before its body was read (a refusal): closed rather than read to
                # its end for the next request (aiohttp would read and drop it for up to 10 s).
                resp.force_close()
            return resp
        except (asyncio.CancelledError, ClientGone):
            # The client left (aiohttp cancels the handler when its connection is lost): what
            # was forwarded is cut upstream (the pod's connection closed), nothing held is sent.
            if ticket.forwarded:
                gwmetrics.CUT_UPSTREAM.inc()
            else:
                gwmetrics.calls("cancelled", "").inc()
            raise
        finally:
            ticket.release()

    async def _handle(self, request: web.BaseRequest, ticket: budget.Ticket) -> web.StreamResponse:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        why = hygiene.smuggling(headers)
        if not why and not request.raw_path.startswith("/"):
            # Absolute-form ("GET http://host/ ...") names an authority the pod might read
            # instead of the Host the call was routed by; "*" means nothing to a tool.
            why = "the request target must be a path (origin-form)"
        elif not why and request.method in UNFORWARDED_METHODS:
            # CONNECT asks for a tunnel, TRACE echoes the request (headers a tool may not show).
            why = f"{request.method} is not forwarded to tools"
        if why:
            return refusals.refusal(route.Refuse(route.Reason.BAD_REQUEST, 0, why), target=None, body=None)
        expect = request.headers.get("Expect")
        if expect is not None and expect.lower() == "100-continue" and request.version >= aiohttp.HttpVersion11:
            # The client sends the body only after this; every path below may read it (a small
            # body at once, a held one, a refusal's JSON-RPC id). aiohttp's low-level server
            # does not answer Expect itself (its Application's router does).
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        hosts = [v for k, v in headers if k.lower() == "host"]
        target = route.parse_host(hosts[0], cluster_domain=self.settings.cluster_domain) if len(hosts) == 1 else None
        # --- who may call (tenant isolation; docs/gateway.md, "Who may call"): the caller's
        # namespace from its source address, never a header; a bare Host is a name in it.
        client_ip = clients.peer_ip(request.transport.get_extra_info("peername") if request.transport else None)
        if not self.views.addresses_listed.is_set():
            await self.views.wait_addresses_listed(CLIENT_VIEW_WAIT_SECONDS)  # at startup only
        client_namespace = self.views.namespace_of(client_ip)
        if target is None and len(hosts) == 1:
            target = clients.short_host(hosts[0], client_namespace=client_namespace)
        if target is not None:
            denied = clients.client_allowed(self.views.runtime(target.namespace, target.runtime),
                                          client_namespace=client_namespace, client_ip=client_ip)
            if denied is not None:
                return await self._refuse(request, denied, target=target, body=None, ticket=ticket)
        # --- end of who may call
        if target is None:
            return await self._refuse(request, route.Refuse(
                route.Reason.UNKNOWN_RUNTIME, 0, "the Host header names no runtime (<runtime>.<namespace>[.svc[.<domain>]][:port])"),
                target=None, body=None, ticket=ticket)
        if self.shutting_down:
            return await self._refuse(request, route.Refuse(route.Reason.GATEWAY_SHUTDOWN, 1, "this gateway replica is shutting down"),
                                      target=target, body=None, ticket=ticket)
        key = (target.namespace, target.runtime)
        arrival = time.monotonic()
        session_id = request.headers.get(SESSION_HEADER)
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        body: bytes | None = None  # read at once when small, else buffered once the call is held
        if not websocket and request.body_exists and request.content_length is not None \
                and request.content_length <= SMALL_BODY_BYTES:
            full = ticket.reserve(request.content_length)
            if full is not None:
                return refusals.refusal(full, target=target, body=None)
            try:
                # All there: no wait to bound, and no timer armed (one less per call).
                async with asyncio.timeout(None if request.content.is_eof() else self.settings.body_timeout_seconds):
                    body = await request.read()
            except (asyncio.TimeoutError, aiohttp.ClientError, ConnectionError):
                return refusals.refusal(route.Refuse(
                    route.Reason.BAD_REQUEST, 0,
                    f"the request's body did not arrive whole within {self.settings.body_timeout_seconds:g}s"),
                    target=target, body=None)
        # A session id this gateway sealed (spec.service.sessions: Rebind): re-bound below if
        # its generation is gone. Any other id is the pod's own (Expire, or issued before).
        sealed: sessions.Sealed | None = None
        if session_id and sessions.is_sealed(session_id):
            sealed = sessions.unseal(session_id, keys=self.session_keys.all(), namespace=target.namespace,
                                     runtime=target.runtime)
            if sealed is None:
                return await self._refuse(request, route.Refuse(
                    route.Reason.UNKNOWN_SESSION, 0,
                    "session not found: its id does not verify here (issued for another runtime, or under a "
                    "gateway admin key rotated since); start a new session"), target=target, body=body, ticket=ticket)
        held_since: float | None = None
        excluded: set[str] = set()
        waking = False  # held for an idle runtime's wake: demand (state.demand) until it ends
        gone_away = False
        try:
            while True:
                wake = self.state.event(key)
                d = self.decide(target, excluded)
                if isinstance(d, route.Refuse):
                    return await self._refuse(request, d, target=target, body=body, ticket=ticket)
                gone = self.binder.session_gone(session_id, target, d) if sealed is None else None
                if gone is not None:
                    return await self._refuse(request, gone, target=target, body=body, ticket=ticket)
                if isinstance(d, route.Forward):
                    waiting = request.transport is not None and not request.transport.is_closing()
                    if not forwardable(held=held_since is not None, client_waiting=waiting):
                        raise ClientGone()  # a call nobody waits for is never run
                    outcome = "held_then_forwarded" if held_since is not None else "forwarded"
                    send_headers, binding = headers, self.binder.initialize_binding(target, body)
                    result: web.StreamResponse | None = None
                    replay_refused = False  # the pod refused the replay's connection: decided again
                    if sealed is not None and session_id is not None:
                        bound = await self.binder.bind(request, sealed, session_id=session_id, target=target, d=d,
                                                       headers=headers, body=body)
                        if isinstance(bound, web.StreamResponse):
                            return bound
                        replay_refused = bound is None
                        send_headers, binding = (bound or headers), sessions.Binding(client_id=session_id)
                    if not replay_refused:
                        result = await self._forward(request, d, target=target, body=body, websocket=websocket,
                                                     headers=send_headers, outcome=outcome, held_since=held_since,
                                                     ticket=ticket, binding=binding)
                    if result is not None:
                        if sealed is not None and session_id is not None and request.method == "DELETE":
                            # The client ended its session: never re-bound after.
                            self.state.rebinds.end((target.namespace, target.runtime, sessions.fingerprint(session_id)))
                        return result
                    # Connect refused before any byte went: wait a moment, decide again.
                    d = route.Hold(REFUSED_CONNECT)
                for_wake = d.wake_seconds is not None
                if for_wake and not waking and (body is not None or not request.body_exists or websocket):
                    idle_refusal = self._no_wake(request, d, target=target, body=body)
                    if idle_refusal is not None:
                        return idle_refusal
                    waking = True
                    self.state.demand_add(key)
                if held_since is None:
                    full = ticket.hold(key)
                    if full is not None:
                        return refusals.refusal(full, target=target, body=body)
                    held_since = ticket.held_since = time.monotonic()
                    runtime = self.views.runtime(*key)
                    excluded = route.retiring_uids(runtime or {}, self.views.pods_of(*key), self.state.sealed)
                    refused = await self._read_held_body(request, key=key, arrival=arrival, body=body,
                                                         websocket=websocket, target=target, ticket=ticket)
                    if isinstance(refused, web.Response):
                        return refused
                    body = refused
                    if for_wake and not waking:
                        # A body read only now (over SMALL_BODY_BYTES): whether it wakes the runtime.
                        idle_refusal = self._no_wake(request, d, target=target, body=body)
                        if idle_refusal is not None:
                            return idle_refusal
                        waking = True
                        self.state.demand_add(key)
                runtime = self.views.runtime(*key)
                # Held for a wake: spec.idle.wakeSeconds from its arrival, else admissionSeconds.
                hold_seconds = d.wake_seconds if d.wake_seconds is not None else route.admission_seconds(runtime)
                remaining = arrival + hold_seconds - time.monotonic()
                if self.shutting_down:
                    return refusals.refusal(route.Refuse(route.Reason.GATEWAY_SHUTDOWN, 1, "this gateway replica is shutting down"),
                                            target=target, body=body)
                if remaining <= 0:
                    if d.wake_seconds is not None:
                        return refusals.refusal(route.Refuse(
                            route.Reason.WAKE_TIMEOUT, d.wake_seconds,
                            f"the idle runtime did not wake within spec.idle.wakeSeconds={d.wake_seconds}",
                            route.current_generation(runtime)), target=target, body=body)
                    return self._past_admission(runtime, d.why, target=target, body=body)
                pause = min(remaining, CONNECT_RETRY_SECONDS) if _is_connect_retry(d) else remaining
                try:
                    await asyncio.wait_for(wake.wait(), pause)
                except asyncio.TimeoutError:
                    pass
        except (asyncio.CancelledError, ClientGone):
            gone_away = True
            raise
        finally:
            if held_since is not None:
                gwmetrics.HOLD_SECONDS.observe(time.monotonic() - held_since)
            if waking:
                self.state.demand_remove(key)
                if held_since is not None:
                    outcome = "cancelled" if gone_away else "forwarded" if ticket.forwarded else "refused"
                    gwmetrics.WAKE_HOLD_SECONDS.labels(outcome=outcome).observe(time.monotonic() - held_since)

    def _no_wake(self, request: web.BaseRequest, d: route.Hold, *, target: route.Target,
                 body: bytes | None) -> web.Response | None:
        """For an idle runtime: 503 Idle at once for a call that does not wake it (ping, no
        JSON-RPC request: a health check), else None (held for the wake)."""
        assert d.wake_seconds is not None
        if idle.wakes(http_method=request.method, body=body):
            return None
        return refusals.refusal(route.Refuse(
            route.Reason.IDLE, d.wake_seconds,
            "the runtime is idle: only a JSON-RPC request other than ping wakes it (health checks and ping do not)",
            route.current_generation(self.views.runtime(target.namespace, target.runtime))), target=target, body=body)

    async def _forward(self, request: web.BaseRequest, d: route.Forward, *, target: route.Target, body: bytes | None,
                       websocket: bool, headers: list[tuple[str, str]], outcome: str, held_since: float | None,
                       ticket: budget.Ticket, binding: sessions.Binding | None) -> web.StreamResponse | None:
        """forward.forward, counted per runtime for GET /v1/activity: a call that counts as
        activity (baton.gateway.idle) when it is sent and again when it ends (a long call is
        activity all along), and calls in flight (GET streams and WebSockets are no calls)."""
        key = (target.namespace, target.runtime)
        methods = idle.request_methods(body) if request.method == "POST" else None  # parsed once
        counted = idle.counts_as_activity(http_method=request.method, methods=methods,
                                          streamed=body is None and request.body_exists and not websocket)
        call = idle.is_call(http_method=request.method, methods=methods, websocket=websocket)
        if counted:
            self.state.active(key)
        if call:
            self.state.call_begin(key)
        try:
            return await forward.forward(self.upstreams, request, d, target=target, body=body, websocket=websocket,
                                         headers=headers, outcome=outcome, held_since=held_since, ticket=ticket,
                                         binding=binding)
        finally:
            if call:
                self.state.call_end(key)
            if counted:
                self.state.active(key)

    async def _read_held_body(self, request: web.BaseRequest, *, key: state_mod.Key, arrival: float,
                              body: bytes | None, websocket: bool, target: route.Target,
                              ticket: budget.Ticket) -> bytes | None | web.Response:
        """A held call's body, whole (a small one was read already), or the refusal: over the
        held-body cap (413), no room in the ledger (503 Overloaded), or not whole before the
        call's admissionSeconds ran out (503 Transitioning: a slow body counts against it)."""
        cap = self.settings.max_held_body_bytes
        if body is not None:
            if len(body) <= cap:
                return body
        elif not request.body_exists or websocket:
            return None
        else:
            runtime = self.views.runtime(*key)
            remaining = arrival + route.admission_seconds(runtime) - time.monotonic()
            try:
                return await refusals.read_body(request, cap=cap, seconds=max(0.0, min(remaining, self.settings.body_timeout_seconds)),
                                                ticket=ticket)
            except refusals.RefusedBody as exc:
                return refusals.refusal(exc.refuse, target=target, body=None)
            except refusals.BodyLate:
                if remaining <= self.settings.body_timeout_seconds:
                    return self._past_admission(self.views.runtime(*key), "its body was still arriving", target=target, body=None)
                return refusals.refusal(route.Refuse(
                    route.Reason.BAD_REQUEST, 0,
                    f"the request's body did not arrive whole within {self.settings.body_timeout_seconds:g}s"),
                    target=target, body=None)
            except (aiohttp.ClientError, ConnectionError) as exc:
                raise ClientGone() from exc
            except refusals.BodyTooLarge:
                pass
        return refusals.refusal(route.Refuse(route.Reason.TOO_LARGE, 0, f"a held call's body is capped at {cap} bytes"),
                                target=target, body=None)

    def _past_admission(self, runtime: dict[str, Any] | None, why: str, *, target: route.Target,
                        body: bytes | None) -> web.Response:
        hook = route.hook_failed(runtime)
        if hook is not None:
            # The operator's own failure holds it, not a slow transition: said (issue 45).
            return refusals.refusal(route.Refuse(route.Reason.HOOK_FAILED, 30, hook, route.current_generation(runtime)),
                                    target=target, body=body)
        return refusals.refusal(route.Refuse(
            route.Reason.TRANSITIONING, 1,
            f"no generation served within budgets.admissionSeconds={route.admission_seconds(runtime)} ({why})",
            route.current_generation(runtime)), target=target, body=body)


def _is_connect_retry(d: route.Decision) -> bool:
    return isinstance(d, route.Hold) and d.why == REFUSED_CONNECT
