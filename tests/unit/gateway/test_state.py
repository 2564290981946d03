"""The gateway's memory (baton.gateway.state), its admin API (baton.gateway.admin, over a real
loopback socket) and the registration's margin rule (baton.gateway.registrar, with the Lease
adapter replaced at our own boundary and the clock injected)."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from baton import adminkey
from baton.gateway import admin, registrar, state
from baton.k8s import api as k8s_api
from baton.k8s import registration


def test_sealed_set_forgets_gone_pods_after_a_while() -> None:
    now = [0.0]
    s = state.State(clock=lambda: now[0])
    for uid in "bcd":
        s.seal(uid, ("ns", "rt"))
    s.forget_gone(lambda uid: uid == "c")
    now[0] = state.SEALED_FORGET_SECONDS - 1
    s.forget_gone(lambda uid: uid == "c")
    assert list(s.sealed) == ["b", "c", "d"]
    now[0] = state.SEALED_FORGET_SECONDS
    s.forget_gone(lambda uid: uid == "c")
    assert list(s.sealed) == ["c"]


def test_a_seal_of_a_pod_still_in_the_view_is_never_evicted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's flood (item 5b): seals of random UIDs once evicted the real ones oldest first.
    Now, past a bound, only a seal of a pod out of the view makes room; else the new seal is
    refused and nothing changes."""
    monkeypatch.setattr(state, "SEALED_CAP", 6)
    s = state.State()
    in_view = {"real"}
    present = in_view.__contains__
    s.seal("real", ("ns", "rt"), present=present)
    for i in range(100):  # a flood of seals of UIDs no pod has, for many runtimes
        try:
            s.seal(f"fake-{i}", ("ns", f"other-{i % 3}"), present=present)
        except state.SealRefused:
            pass
    assert "real" in s.sealed, "a seal of a pod in the view was evicted"
    assert len(s.sealed) <= state.SEALED_CAP
    # Every entry in the view: the next seal is refused, nothing changes.
    in_view.update(s.sealed)
    before = dict(s.sealed)
    with pytest.raises(state.SealRefused, match="at most 6"):
        s.seal("new", ("ns", "rt2"), present=present)
    assert dict(s.sealed) == before
    # Sealing again what is sealed is no new entry: never refused.
    s.seal("real", ("ns", "rt"), present=present)


def test_seals_are_bounded_per_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    s = state.State()
    monkeypatch.setattr(state, "SEALED_PER_RUNTIME", 3)
    in_view = {"a", "b", "c"}
    for uid in "abc":
        s.seal(uid, ("ns", "rt"), present=in_view.__contains__)
    with pytest.raises(state.SealRefused, match="ns/rt has 3 sealed pods still in the view"):
        s.seal("d", ("ns", "rt"), present=in_view.__contains__)
    assert list(s.sealed) == ["a", "b", "c"]
    s.seal("x", ("ns", "other"), present=in_view.__contains__)  # another runtime has its own bound
    in_view.discard("b")  # b's pod left the view: its seal is the one that makes room
    s.seal("d", ("ns", "rt"), present=in_view.__contains__)
    assert list(s.sealed) == ["a", "c", "x", "d"]


def test_inflight_and_sessions() -> None:
    s = state.State()
    s.begin("u")
    s.begin("u")
    s.begin("v")
    s.end("u")
    assert s.inflight["u"] == 1 and s.total_inflight() == 2
    s.end("u")
    assert "u" not in s.inflight
    s.session_issued(("ns", "a"), "sid", "u")
    assert s.session_uid(("ns", "a"), "sid") == "u" and s.session_uid(("ns", "a"), "other") is None
    # Another runtime's server may issue the same id: it is not this one's.
    assert s.session_uid(("ns", "b"), "sid") is None


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


LEASE = {"name": "l", "uid": "1"}


def test_admin_api(tmp_path: pathlib.Path) -> None:
    async def go() -> None:
        s = state.State()
        key = tmp_path / "admin.key"
        key.write_text("k" * 40)
        runner = web.AppRunner(admin.application(s, key=adminkey.KeyFile(str(key)), lease=lambda: ("l", "1")))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + "k" * 40}) as http:
                s.begin("u1")
                async with http.post(f"{base}/v1/seal", json={"namespace": "ns", "runtime": "rt", "uid": "u1", "lease": LEASE}) as r:
                    assert r.status == 200 and await r.json() == {"sealed": True, "inflight": 1, "held": 0}
                assert "u1" in s.sealed
                async with http.get(f"{base}/v1/inflight", params={"uid": "u1"}) as r:
                    assert await r.json() == {"uid": "u1", "inflight": 1, "sealed": True, "sessions": [], "sessionsTruncated": False}
                # With the runtime named, the calls held for it now (status shows them).
                s.held[("ns", "rt")] += 2
                async with http.get(f"{base}/v1/inflight", params={"uid": "u1", "namespace": "ns", "runtime": "rt"}) as r:
                    assert await r.json() == {"uid": "u1", "inflight": 1, "sealed": True, "held": 2, "sessions": [], "sessionsTruncated": False}
                async with http.post(f"{base}/v1/seal", json={"namespace": "ns", "runtime": "rt", "uid": "u1", "lease": LEASE}) as r:
                    assert await r.json() == {"sealed": True, "inflight": 1, "held": 2}
                async with http.get(f"{base}/v1/inflight", params={"uid": "u1", "namespace": "ns", "runtime": "other"}) as r:
                    assert (await r.json())["held"] == 0
                s.held.clear()
                async with http.get(f"{base}/v1/inflight", params={"uid": "u2"}) as r:
                    assert await r.json() == {"uid": "u2", "inflight": 0, "sealed": False, "sessions": [], "sessionsTruncated": False}
                for body, field in ((b"{", "JSON"), (b"[]", "object"), (json.dumps({"namespace": "ns", "uid": "x"}).encode(), "runtime"),
                                    (json.dumps({"namespace": "ns", "runtime": "rt", "uid": ""}).encode(), "uid"),
                                    (json.dumps({"namespace": "ns", "runtime": "rt", "uid": "x"}).encode(), "lease"),
                                    (json.dumps({"namespace": "ns", "runtime": "rt", "uid": "x", "lease": {"name": "l"}}).encode(),
                                     "lease.uid")):
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


@pytest.mark.parametrize("status", [404, 409])
def test_a_lease_changed_by_someone_else_stops_forwarding_until_relisted(monkeypatch: pytest.MonkeyPatch,
                                                                       status: int) -> None:
    """Design concern 4: a second process with the same instance id (or a person) rewrote or
    deleted our Lease; the operator may have sealed through a listing without us. Before, the
    replica re-registered and kept forwarding on its old views."""
    fake = FakeLeases()
    monkeypatch.setattr(registration, "register_gateway", fake.register)

    async def taken(*, last: dict[str, Any], now: Any) -> dict[str, Any]:
        raise k8s_api.ApiError(status, "Conflict", "changed")
    monkeypatch.setattr(registration, "renew_gateway", taken)

    async def relist() -> bool:
        return True

    async def go() -> None:
        r = registrar.Registrar(namespace="ns", instance="i", admin="a:1", duration_seconds=10,
                                relist=relist, on_change=lambda: None, mono=lambda: 100.0)
        await r.start()
        r.views_ok = True
        assert r.forwarding() and r.lease_id() == ("l", "1")
        assert await r._write() and fake.writes == ["register", "register"]
        assert not r.forwarding(), "forwarding on views listed before the Lease was taken"
    asyncio.run(go())
