"""A call's MCP session on the serving pod under spec.service.sessions (DESIGN.md, "Gateway"):
an initialize under Rebind bound to the gateway's sealed id; a sealed id's call sent under the
backend session of the pod that serves now (re-bound first by one replay of initialize when its
issuer is gone), or refused; a pod's own id refused at once when the pod that issued it is gone.
Does I/O (the replay, through ``baton.gateway.sessions.replay`` on http1's pool); the sealing
and the replay themselves are ``baton.gateway.sessions``. ``baton.gateway.proxy`` asks it per call.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from baton.gateway import forward, gwmetrics, refusals, route, sessions
from baton.gateway import state as state_mod
from baton.gateway import views as views_mod
from baton.model import names
from baton.settings import GatewaySettings


class Binder:
    """The sessions of one gateway's calls: its views and state, its upstreams' pool, and the keys
    session ids are sealed under."""

    def __init__(self, *, settings: GatewaySettings, views: views_mod.GatewayViews, state: state_mod.State,
                 upstreams: forward.Upstreams, keys: sessions.Keys) -> None:
        self.settings, self.views, self.state = settings, views, state
        self.upstreams = upstreams
        self.keys = keys

    def initialize_binding(self, target: route.Target, body: bytes | None) -> sessions.Binding | None:
        """An initialize under Rebind: its answer's session id is sealed into the gateway's own."""
        if body is None or not forward.is_initialize(body):
            return None
        if sessions.mode_of(self.views.runtime(target.namespace, target.runtime)) is not sessions.Mode.REBIND:
            return None
        return sessions.Binding(initialize=body, key=self.keys.current())

    async def bind(self, request: web.BaseRequest, sealed: sessions.Sealed, *, session_id: str, target: route.Target,
                    d: route.Forward, headers: list[tuple[str, str]],
                    body: bytes | None) -> list[tuple[str, str]] | web.Response | None:
        """The call's headers under the backend session of the serving pod `d` (re-bound first if
        the pod that issued the session is not `d`), the answer when there is none, or None when
        the pod refused the replay's connection (decided again, as a refused forward is)."""
        fp = sessions.fingerprint(session_id)
        k = (target.namespace, target.runtime, fp)
        if d.uid == sealed.pod_uid:
            backend = sealed.backend
        else:
            found = self.state.rebinds.get(k, d.uid)
            if found is not None:
                backend = found
            elif self.state.rebinds.is_ended(k):
                return refusals.refusal(route.Refuse(route.Reason.UNKNOWN_SESSION, 0,
                                                     "session not found: its client ended it (DELETE)", d.generation),
                                        target=target, body=body)
            elif sessions.mode_of(self.views.runtime(target.namespace, target.runtime)) is sessions.Mode.EXPIRE:
                return refusals.refusal(route.Refuse(
                    route.Reason.UNKNOWN_SESSION, 0,
                    "session not found: the generation that issued it is gone (spec.service.sessions: Expire); "
                    "start a new session", d.generation), target=target, body=body)
            elif request.method == "DELETE":
                # Its generation is gone, and with it the session: nothing to replay for an end.
                self.state.rebinds.end(k)
                resp = web.Response(status=204)
                resp.headers[names.HEADER_GENERATION] = str(d.generation)
                return resp
            else:
                try:
                    backend = await self._rebind(k, sealed, d=d, path=request.raw_path, headers=headers)
                except sessions.ReplayNotConnected:
                    return None
                except sessions.ReplayBusy as exc:
                    return refusals.refusal(route.Refuse(route.Reason.OVERLOADED, 1, str(exc), d.generation),
                                            target=target, body=body)
                except sessions.ReplayFailed as exc:
                    return refusals.refusal(route.Refuse(
                        route.Reason.SESSION_REPLAY_FAILED, 0,
                        f"session not found: re-binding it on generation {d.generation} failed: {exc}", d.generation),
                        target=target, body=body)
        self.state.session_seen(fp, d.uid)
        return sessions.with_session(headers, backend)

    async def _rebind(self, k: tuple[str, str, str], sealed: sessions.Sealed, *, d: route.Forward, path: str,
                      headers: list[tuple[str, str]]) -> str:
        """The backend id of session `k` on pod `d`, replayed once: calls of the same session that
        arrive meanwhile wait for that replay (it runs on even if the call that began it goes)."""
        pool = self.upstreams.pool
        assert pool is not None
        flight = (*k, d.uid)
        task = self.state.rebinds.replaying.get(flight)
        if task is None:
            async def replay() -> str:
                try:
                    backend = await sessions.replay(pool, pod=(d.uid, d.ip, d.port), path=path, headers=headers,
                                                    initialize=sealed.initialize,
                                                    connect_timeout=self.settings.connect_timeout_seconds)
                except (sessions.ReplayBusy, sessions.ReplayNotConnected):
                    raise  # nothing was sent: not a failure of the session
                except sessions.ReplayFailed:
                    gwmetrics.SESSIONS_REBOUND.labels(outcome="failed").inc()
                    raise
                finally:
                    self.state.rebinds.replaying.pop(flight, None)
                gwmetrics.SESSIONS_REBOUND.labels(outcome="rebound").inc()
                self.state.rebinds.put(k, d.uid, backend)
                return backend
            task = self.state.rebinds.replaying[flight] = asyncio.ensure_future(replay())
            # Its failure is each waiting call's answer; with none left waiting, nobody's.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(task)

    def session_gone(self, session_id: str | None, target: route.Target, d: route.Decision) -> route.Refuse | None:
        """An Mcp-Session-Id that a pod of this runtime issued, which cannot answer it any more
        (another pod serves, or it retires): the MCP answer for an unknown session, 404, at once."""
        if not session_id:
            return None
        issuer = self.state.session_uid((target.namespace, target.runtime), session_id)
        if issuer is None:
            return None  # not seen here: the pod decides
        if isinstance(d, route.Forward):
            gone = d.uid != issuer
        else:
            runtime = self.views.runtime(target.namespace, target.runtime) or {}
            pods = self.views.pods_of(target.namespace, target.runtime)
            present = any((p.get("metadata") or {}).get("uid") == issuer for p in pods)
            gone = not present or issuer in route.retiring_uids(runtime, pods, self.state.sealed)
        if not gone:
            return None
        return route.Refuse(route.Reason.UNKNOWN_SESSION, 0,
                            "session not found: the generation that issued it is gone; start a new session",
                            d.generation if isinstance(d, route.Forward) else
                            route.current_generation(self.views.runtime(target.namespace, target.runtime)))
