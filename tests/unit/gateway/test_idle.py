"""Idle runtimes at the gateway (issue 43; docs/gateway.md, "Idle runtimes and wake"): which
calls count as activity (a pure rule, table-tested), GET /v1/activity, and the call path for an
idle runtime over real loopback sockets with the views fed by hand (as test_proxy): a JSON-RPC
request held with spec.idle.wakeSeconds then 503 WakeTimeout, or forwarded to the woken
generation, with Baton-Held-Ms; ping and health checks 503 Idle at once; a failed wake's
back-off 503 WakeFailed at once; the wake demand set while a call is held and cleared after, and
written to the registration Lease promptly, coalesced (the adapter replaced at our boundary;
the real API server in tests/integration/test_gateway_wake_demand.py)."""

from __future__ import annotations

import asyncio
import datetime
import json
import pathlib
import time
from typing import Any

import aiohttp
import pytest

from baton import adminkey
from baton.gateway import admin, gwmetrics, idle, registrar, state, views
from baton.k8s import registration
from tests.unit.gateway import test_proxy as tp

pytestmark = pytest.mark.unit

NS = tp.NS
KEY = (NS, "tool")
CALL = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}'
PING = b'{"jsonrpc":"2.0","id":8,"method":"ping"}'


def rpc(method: str, rid: Any = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method}).encode()


# --- the rule: what counts as activity, what wakes ----------------------------------------------
@pytest.mark.parametrize("http_method,body,streamed,counts", [
    ("POST", rpc("tools/call"), False, True),
    ("POST", rpc("resources/read"), False, True),
    ("POST", rpc("prompts/get"), False, True),
    ("POST", rpc("completion/complete"), False, True),
    ("POST", rpc("ping"), False, False),
    ("POST", rpc("initialize"), False, False),
    ("POST", rpc("tools/list"), False, False),
    ("POST", rpc("prompts/list"), False, False),
    ("POST", rpc("resources/list"), False, False),
    ("POST", rpc("resources/templates/list"), False, False),
    ("POST", rpc("subscriptions/listen"), False, False),
    ("POST", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', False, False),  # a notification
    ("POST", b'{"jsonrpc":"2.0","id":1,"result":{}}', False, False),  # a response the client sends back
    ("POST", b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call"}]', False, True),
    ("POST", b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]', False, False),
    ("POST", b"not json", False, False),
    ("POST", b'{"id":1,"method":"tools/call"}', False, False),  # no "jsonrpc": "2.0"
    ("POST", None, False, False),
    ("POST", None, True, True),  # a body streamed unread (over 64 KiB): cannot tell, counted
    ("GET", None, False, False),  # an event stream
    ("HEAD", None, False, False),  # a health check
    ("DELETE", None, False, False),  # a session's end
    ("PUT", rpc("tools/call"), False, False),
])
def test_what_counts_as_activity(http_method: str, body: bytes | None, streamed: bool, counts: bool) -> None:
    methods = idle.request_methods(body)
    assert idle.counts_as_activity(http_method=http_method, methods=methods, streamed=streamed) is counts


@pytest.mark.parametrize("http_method,body,wakes", [
    ("POST", rpc("tools/call"), True),
    ("POST", rpc("initialize"), True),
    ("POST", rpc("tools/list"), True),
    ("POST", rpc("ping"), False),
    ("POST", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', False),
    ("POST", b"{}", False),
    ("POST", None, False),
    ("GET", None, False),
    ("HEAD", None, False),
])
def test_what_wakes_an_idle_runtime(http_method: str, body: bytes | None, wakes: bool) -> None:
    assert idle.wakes(http_method=http_method, body=body) is wakes


def test_what_is_in_flight_and_the_runtime_fields() -> None:
    assert idle.is_call(http_method="POST", methods=["tools/call"], websocket=False)
    assert idle.is_call(http_method="DELETE", methods=None, websocket=False)
    assert not idle.is_call(http_method="GET", methods=None, websocket=False)
    assert not idle.is_call(http_method="GET", methods=None, websocket=True)
    assert not idle.is_call(http_method="POST", methods=["subscriptions/listen"], websocket=False)
    rt = {"spec": {"idle": {"wakeSeconds": 20}}, "status": {"idle": {"since": "2026-12-05T10:00:00Z"},
                                                             "retry": {"attempt": 1, "notBefore": "2026-12-05T10:00:30Z"}}}
    assert idle.idle_since(rt) == "2026-12-05T10:00:00Z" and idle.idle_since({"status": {"idle": {"since": None}}}) is None
    assert idle.wake_seconds(rt) == 20 and idle.wake_seconds({}) == idle.WAKE_SECONDS_DEFAULT
    t = datetime.datetime(2026, 12, 5, 10, 0, 20, tzinfo=datetime.timezone.utc)
    assert idle.backoff_left(rt, now=t) == 10.0
    assert idle.backoff_left(rt, now=t + datetime.timedelta(seconds=10)) is None
    assert idle.backoff_left({"status": {"retry": {"attempt": 1}}}, now=t) is None


def test_state_activity_floor_and_demand_bounds() -> None:
    now = [1000.0]
    st = state.State(clock=lambda: now[0])
    now[0] = 1100.0
    assert st.idle_seconds(KEY) == 100.0  # none yet: since the replica started
    st.active(KEY)
    now[0] = 1130.0
    assert st.idle_seconds(KEY) == 30.0
    # Past the cap the least recently active is evicted, and the floor rises to its time: an
    # unlisted runtime never reads idler than the evicted one was.
    cap = state.ACTIVITY_CAP
    state.ACTIVITY_CAP = 2
    try:
        now[0] = 1140.0
        st.active((NS, "b"))
        now[0] = 1150.0
        st.active((NS, "c"))
        # Its last activity (1100) is the floor: 50 s, as before the eviction (not 150, since the start).
        assert KEY not in st.activity and st.idle_seconds(KEY) == 50.0
        assert st.idle_seconds((NS, "never")) == 50.0
    finally:
        state.ACTIVITY_CAP = cap
    changes: list[list[str]] = []
    st.on_demand_change = lambda: changes.append(st.wake_demand())
    st.demand_add((NS, "z"))
    st.demand_add((NS, "a"))
    st.demand_add((NS, "a"))
    st.demand_remove((NS, "a"))
    assert changes == [[f"{NS}/z"], [f"{NS}/a", f"{NS}/z"]], "one change per runtime that becomes demand"
    st.demand_remove((NS, "a"))
    assert changes[-1] == [f"{NS}/z"] and st.wake_demand() == [f"{NS}/z"]
    st.demand_remove((NS, "z"))
    assert st.wake_demand() == [] and st.demand == {}


# --- the call path ------------------------------------------------------------------------------
def idle_runtime(*, wake: int = 1, admission: int = 30, rv: int = 1, retry_in: float | None = None) -> dict[str, Any]:
    rt = tp.runtime(gen=1, uid="u1", rv=rv, admission=admission, idle={"afterSeconds": 60, "wakeSeconds": wake})
    rt["status"]["idle"] = {"since": "2026-12-05T10:00:00Z"}
    rt["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Idle",
                                   "message": "the runtime is idle since 2026-12-05T10:00:00Z"}]
    if retry_in is not None:
        not_before = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=retry_in)
        rt["status"]["retry"] = {"attempt": 1, "notBefore": not_before.strftime("%Y-%m-%dT%H:%M:%SZ")}
        rt["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "WakeFailed",
                                       "message": "the wake did not become Ready within wakeSeconds=5: image pull"}]
    return rt


def _wake_hold_count(outcome: str) -> float:
    value = gwmetrics.metrics.REGISTRY.get_sample_value("baton_gateway_wake_hold_seconds_count", {"outcome": outcome})
    return value or 0.0


async def head(port: int) -> tuple[int, dict[str, str], float]:
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s:
        async with s.head(f"http://127.0.0.1:{port}/healthz", headers={"Host": f"tool.{NS}"}) as r:
            return r.status, dict(r.headers), time.monotonic() - t0


async def get(port: int) -> tuple[int, dict[str, str], float]:
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/mcp", headers={"Host": f"tool.{NS}"}) as r:
            await r.read()
            return r.status, dict(r.headers), time.monotonic() - t0


def test_activity_is_counted_only_for_calls_that_count() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        b1, p1 = await tp.backend(1, seen)
        vw.runtimes.apply(tp.runtime(gen=1, uid="u1"))
        vw.pods.apply(tp.pod("u1", p1))
        px, gw, port = await tp.gateway(vw, st)
        try:
            for body in (PING, rpc("initialize"), rpc("tools/list"),
                         b'{"jsonrpc":"2.0","method":"notifications/initialized"}'):
                status, _, _, _ = await tp.post(port, body)
                assert status == 200
            assert (await get(port))[0] == 200
            assert KEY not in st.activity and len(seen) == 5, "forwarded, none counted"
            before = time.monotonic()
            status, _, _, _ = await tp.post(port, CALL)
            assert status == 200 and st.activity[KEY] >= before and st.idle_seconds(KEY) < 1.0
            assert st.calls == {}, "in flight per runtime back to none once answered"
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
    tp.run(go)


def test_admin_activity_answers_authenticated_and_names_a_missing_parameter(tmp_path: pathlib.Path) -> None:
    async def go() -> None:
        key = tmp_path / "admin.key"
        key.write_text("k" * 48 + "\n")
        now = [500.0]
        st = state.State(clock=lambda: now[0])
        app = admin.application(st, key=adminkey.KeyFile(str(key)), lease=lambda: ("l", "u"))
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/activity"
        auth = {"Authorization": "Bearer " + "k" * 48}
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(base, params={"namespace": NS, "runtime": "tool"}) as r:
                    assert r.status == 401
                async with http.get(base, params={"namespace": NS, "runtime": "tool"},
                                    headers={"Authorization": "Bearer wrong"}) as r:
                    assert r.status == 401
                for params, missing in (({"runtime": "tool"}, "namespace"), ({"namespace": NS}, "runtime"), ({}, "namespace")):
                    async with http.get(base, params=params, headers=auth) as r:
                        assert r.status == 400 and f"'{missing}'" in (await r.json())["error"], params
                now[0] = 512.5
                async with http.get(base, params={"namespace": NS, "runtime": "tool"}, headers=auth) as r:
                    assert r.status == 200 and await r.json() == {"idleSeconds": 12.5, "inflight": 0, "held": 0}
                st.active(KEY)
                st.call_begin(KEY)
                st.held[KEY] += 2
                now[0] = 520.0
                async with http.get(base, params={"namespace": NS, "runtime": "tool"}, headers=auth) as r:
                    assert await r.json() == {"idleSeconds": 7.5, "inflight": 1, "held": 2}
        finally:
            await runner.cleanup()
    tp.run(go)


def test_an_idle_runtime_holds_a_call_for_wake_seconds_then_wake_timeout() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        changes: list[list[str]] = []
        st.on_demand_change = lambda: changes.append(st.wake_demand())
        vw.runtimes.apply(idle_runtime(wake=1, admission=30))
        px, gw, port = await tp.gateway(vw, st)
        refused_before = _wake_hold_count("refused")
        try:
            held = asyncio.create_task(tp.post(port, CALL))
            await asyncio.sleep(0.3)
            assert not held.done() and st.held[KEY] == 1
            assert st.wake_demand() == [f"{NS}/tool"], "a held call for an idle runtime is demand"
            status, headers, body, seconds = await held
            assert status == 503 and headers["Baton-Reason"] == "WakeTimeout", (status, headers, body)
            assert 0.9 <= seconds < 5, "the bound is wakeSeconds (1), not admissionSeconds (30)"
            assert headers["Retry-After"] == "1"
            assert 900 <= int(headers["Baton-Held-Ms"]) < 5000
            doc = json.loads(body)
            assert doc["id"] == 7 and doc["error"]["data"]["reason"] == "WakeTimeout"
            assert st.wake_demand() == [] and changes == [[f"{NS}/tool"], []], "cleared once the call is answered"
            assert _wake_hold_count("refused") == refused_before + 1
        finally:
            await gw.cleanup()
            await px.close()
    tp.run(go)


def test_a_held_call_goes_to_the_woken_generation_with_its_held_time() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        seen: list[int] = []
        b2, p2 = await tp.backend(2, seen)
        vw.runtimes.apply(idle_runtime(wake=30))
        px, gw, port = await tp.gateway(vw, st)
        forwarded_before = _wake_hold_count("forwarded")
        try:
            held = asyncio.create_task(tp.post(port, CALL))
            await asyncio.sleep(0.5)
            assert not held.done() and st.wake_demand() == [f"{NS}/tool"]
            # The wake: the operator's next generation serves, idle.since cleared.
            vw.pods.apply(tp.pod("u2", p2, rv=2))
            vw.runtimes.apply(tp.runtime(gen=2, uid="u2", rv=3, idle={"afterSeconds": 60, "wakeSeconds": 30}))
            status, headers, body, _ = await held
            assert status == 200 and headers["Baton-Generation"] == "2" and json.loads(body)["gen"] == 2
            assert 400 <= int(headers["Baton-Held-Ms"]) < 5000
            assert seen == [2] and st.wake_demand() == [] and not st.held
            assert _wake_hold_count("forwarded") == forwarded_before + 1
            # A call that was never held carries no Baton-Held-Ms.
            status, headers, _, _ = await tp.post(port, CALL)
            assert status == 200 and "Baton-Held-Ms" not in headers
        finally:
            await gw.cleanup()
            await px.close()
            await b2.cleanup()
    tp.run(go)


def test_ping_and_health_checks_get_idle_at_once_and_are_no_demand() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        changes: list[list[str]] = []
        st.on_demand_change = lambda: changes.append(st.wake_demand())
        vw.runtimes.apply(idle_runtime(wake=20))
        px, gw, port = await tp.gateway(vw, st)
        try:
            status, headers, body, seconds = await tp.post(port, PING)
            assert status == 503 and headers["Baton-Reason"] == "Idle" and headers["Retry-After"] == "20"
            assert seconds < 0.5 and "Baton-Held-Ms" not in headers and json.loads(body)["id"] == 8
            for status, headers, seconds in (await get(port), await head(port)):
                assert status == 503 and headers["Baton-Reason"] == "Idle" and seconds < 0.5
            status, headers, _, _ = await tp.post(port, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
            assert status == 503 and headers["Baton-Reason"] == "Idle"
            # A large body that is no JSON-RPC (read while held: over 64 KiB): Idle once read.
            status, headers, _, seconds = await tp.post(port, b"x" * (70 * 1024))
            assert status == 503 and headers["Baton-Reason"] == "Idle" and seconds < 1.0
            assert changes == [] and not st.held
        finally:
            await gw.cleanup()
            await px.close()
    tp.run(go)


def test_a_failed_wakes_back_off_refuses_wake_failed_at_once() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        vw.runtimes.apply(idle_runtime(wake=20, retry_in=30))
        px, gw, port = await tp.gateway(vw, st)
        try:
            for body in (CALL, PING):
                status, headers, raw, seconds = await tp.post(port, body)
                assert status == 503 and headers["Baton-Reason"] == "WakeFailed" and seconds < 0.5
                assert 28 <= int(headers["Retry-After"]) <= 31
                assert "image pull" in json.loads(raw)["error"]["message"], "the runtime's Ready message"
            assert st.wake_demand() == [] and not st.held
            # The back-off over: held for the wake again.
            vw.runtimes.apply(idle_runtime(wake=1, rv=2, retry_in=-5))
            status, headers, _, seconds = await tp.post(port, CALL)
            assert status == 503 and headers["Baton-Reason"] == "WakeTimeout" and seconds >= 0.9
        finally:
            await gw.cleanup()
            await px.close()
    tp.run(go)


def test_a_held_calls_refusal_carries_baton_held_ms_whatever_the_reason() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(NS,), state=st)
        vw.runtimes.apply(tp.runtime(gen=None, uid=None, admission=1))  # not started: held
        px, gw, port = await tp.gateway(vw, st)
        try:
            status, headers, _, _ = await tp.post(port, CALL)
            assert status == 503 and headers["Baton-Reason"] == "Transitioning"
            assert 900 <= int(headers["Baton-Held-Ms"]) < 5000
            assert st.wake_demand() == [], "no demand for a runtime that is not idle"
        finally:
            await gw.cleanup()
            await px.close()
    tp.run(go)


# --- the demand on the registration Lease (the adapter replaced at our boundary) ---------------
class Leases:
    def __init__(self) -> None:
        self.writes: list[tuple[str, list[str]]] = []

    async def register(self, **kw: Any) -> dict[str, Any]:
        self.writes.append(("register", list(kw.get("wake_demand", ()))))
        return {"metadata": {"name": "l", "namespace": "ns", "uid": "1"}}

    async def renew(self, *, last: dict[str, Any], now: Any, wake_demand: list[str] | None = None) -> dict[str, Any]:
        self.writes.append(("renew", list(wake_demand or ())))
        return last


def test_demand_changes_are_written_promptly_and_coalesced(monkeypatch: pytest.MonkeyPatch) -> None:
    leases = Leases()
    monkeypatch.setattr(registration, "register_gateway", leases.register)
    monkeypatch.setattr(registration, "renew_gateway", leases.renew)

    async def go() -> None:
        st = state.State()

        async def relist() -> bool:
            return True
        reg = registrar.Registrar(namespace="ns", instance="g", admin="a", duration_seconds=30, relist=relist,
                                  on_change=lambda: None, demand=st.wake_demand)
        st.on_demand_change = reg.demand_changed
        await reg.start()
        task = asyncio.create_task(reg.run())
        try:
            await asyncio.sleep(0.3)  # the first renewal after the registration
            start = len(leases.writes)
            # Twenty calls for three runtimes held within a few ms: one write.
            for i in range(20):
                st.demand_add((NS, f"r{i % 3}"))
            await asyncio.sleep(0.5)
            writes = leases.writes[start:]
            assert writes == [("renew", [f"{NS}/r0", f"{NS}/r1", f"{NS}/r2"])], writes
            assert reg.demand_written == [f"{NS}/r0", f"{NS}/r1", f"{NS}/r2"]
            # A removal and an addition that cancel out within the window: nothing written.
            st.demand_add((NS, "r9"))
            for _ in range(7):
                st.demand_remove((NS, "r9"))
            await asyncio.sleep(0.5)
            assert leases.writes[start + 1:] == []
            for i in range(20):
                st.demand_remove((NS, f"r{i % 3}"))
            await asyncio.sleep(0.5)
            assert leases.writes[start + 1:] == [("renew", [])], "removed once no call is held"
        finally:
            reg.stopping = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    tp.run(go)
