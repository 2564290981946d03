"""The gateway's memory (baton.gateway.state), its admin API (baton.gateway.admin, over a real
loopback socket) and the registration's margin rule (baton.gateway.registrar, with the Lease
adapter replaced at our own boundary and the clock injected)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from baton.gateway import admin, registrar, state
from baton.k8s import api as k8s_api
from baton.k8s import registration


def test_sealed_set_is_bounded_and_forgets_gone_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    s = state.State(clock=lambda: now[0])
    monkeypatch.setattr(state, "SEALED_CAP", 3)
    for uid in "abcd":
        s.seal(uid, ("ns", "rt"))
    assert list(s.sealed) == ["b", "c", "d"]  # oldest first out
    s.forget_gone(lambda uid: uid == "c")
    now[0] = state.SEALED_FORGET_SECONDS - 1
    s.forget_gone(lambda uid: uid == "c")
    assert list(s.sealed) == ["b", "c", "d"]
    now[0] = state.SEALED_FORGET_SECONDS
    s.forget_gone(lambda uid: uid == "c")
    assert list(s.sealed) == ["c"]


def test_inflight_and_sessions() -> None:
    s = state.State()
    s.begin("u")
    s.begin("u")
    s.begin("v")
    s.end("u")
    assert s.inflight["u"] == 1 and s.total_inflight() == 2
    s.end("u")
    assert "u" not in s.inflight
    s.session_issued("sid", "u")
    assert s.session_uid("sid") == "u" and s.session_uid("other") is None


def test_wake_sets_the_event_a_waiter_holds() -> None:
    async def go() -> None:
        s = state.State()
        ev = s.event(("ns", "rt"))
        other = s.event(("ns", "other"))
        s.wake(("ns", "rt"))
        assert ev.is_set() and not other.is_set()
        assert s.event(("ns", "rt")) is not ev  # a new waiter waits for the next change
        s.seal("u", ("ns", "other"))
        assert other.is_set()
    asyncio.run(go())


def test_admin_api() -> None:
    async def go() -> None:
        s = state.State()
        runner = web.AppRunner(admin.application(s))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:
                s.begin("u1")
                async with http.post(f"{base}/v1/seal", json={"namespace": "ns", "runtime": "rt", "uid": "u1"}) as r:
                    assert r.status == 200 and await r.json() == {"sealed": True, "inflight": 1, "held": 0}
                assert "u1" in s.sealed
                async with http.get(f"{base}/v1/inflight", params={"uid": "u1"}) as r:
                    assert await r.json() == {"uid": "u1", "inflight": 1, "sealed": True}
                # With the runtime named, the calls held for it now (status shows them).
                s.held[("ns", "rt")] += 2
                async with http.get(f"{base}/v1/inflight", params={"uid": "u1", "namespace": "ns", "runtime": "rt"}) as r:
                    assert await r.json() == {"uid": "u1", "inflight": 1, "sealed": True, "held": 2}
                async with http.post(f"{base}/v1/seal", json={"namespace": "ns", "runtime": "rt", "uid": "u1"}) as r:
                    assert await r.json() == {"sealed": True, "inflight": 1, "held": 2}
                async with http.get(f"{base}/v1/inflight", params={"uid": "u1", "namespace": "ns", "runtime": "other"}) as r:
                    assert (await r.json())["held"] == 0
                s.held.clear()
                async with http.get(f"{base}/v1/inflight", params={"uid": "u2"}) as r:
                    assert await r.json() == {"uid": "u2", "inflight": 0, "sealed": False}
                for body, field in ((b"{", "JSON"), (b"[]", "object"), (json.dumps({"namespace": "ns", "uid": "x"}).encode(), "runtime"),
                                    (json.dumps({"namespace": "ns", "runtime": "rt", "uid": ""}).encode(), "uid")):
                    async with http.post(f"{base}/v1/seal", data=body) as r:
                        assert r.status == 400 and field in (await r.json())["error"], body
                async with http.get(f"{base}/v1/inflight") as r:
                    assert r.status == 400 and "uid" in (await r.json())["error"]
                for method, path in (("GET", "/v1/seal"), ("POST", "/v1/inflight"), ("GET", "/"), ("DELETE", "/v1/seal")):
                    async with http.request(method, f"{base}{path}") as r:
                        assert r.status == 404, (method, path)
        finally:
            await runner.cleanup()
    asyncio.run(go())


class FakeLeases:
    """The registration adapter replaced at our own boundary: records writes, fails on demand."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.fail = False

    async def register(self, **kw: Any) -> dict[str, Any]:
        if self.fail:
            raise k8s_api.ApiError(503, "Unavailable", "down")
        self.writes.append("register")
        return {"metadata": {"name": "l", "namespace": "ns", "uid": "1"}}

    async def renew(self, *, last: dict[str, Any], now: Any) -> dict[str, Any]:
        if self.fail:
            raise k8s_api.ApiError(503, "Unavailable", "down")
        self.writes.append("renew")
        return last


def test_margin_rule_stops_forwarding_and_relists_before_forwarding_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLeases()
    monkeypatch.setattr(registration, "register_gateway", fake.register)
    monkeypatch.setattr(registration, "renew_gateway", fake.renew)
    now = [100.0]
    relists: list[float] = []

    async def relist() -> bool:
        relists.append(now[0])
        return True

    async def go() -> None:
        r = registrar.Registrar(namespace="ns", instance="i", admin="a:1", duration_seconds=10,
                                relist=relist, on_change=lambda: None, mono=lambda: now[0])
        assert registrar.margin(10) == 2.0 and registrar.margin(5) == 1.0
        assert not r.forwarding()
        await r.start()
        assert fake.writes == ["register"] and not r.forwarding(), "registered, views not listed yet"
        assert await r._write() and not r.views_ok
        assert await r._relist()
        r.views_ok = True
        assert r.forwarding()
        now[0] += 7.9  # within duration - margin (8 s)
        assert r.forwarding()
        now[0] += 0.1  # at the margin: stop at once, by itself
        assert not r.forwarding()
        assert await r._write()  # the renewal after a lapse registers again...
        assert fake.writes[-1] == "register"
        assert not r.forwarding(), "...and does not forward before the views are listed again"
        # A failed renewal keeps last_ok: forwarding ends at the margin.
        r.views_ok = True
        fake.fail = True
        now[0] += 5
        assert not await r._write() and r.forwarding()
        now[0] += 3
        assert not r.forwarding()
    asyncio.run(go())
