"""The admin API's control path (review item 5, design concern 4): every request authenticated by
the admin key, a seal addressed to this replica's Lease (name and uid), a seal past the bounds
refused with a reason. A real aiohttp server on loopback; the operator's side (baton.sealing's
ApiGateways over baton.k8s.gateways) is the client where the test is about what it sends."""

from __future__ import annotations

import asyncio
import os
import pathlib
from typing import Any, Callable

import aiohttp
import pytest
from aiohttp import web

from baton import adminkey, sealing
from baton import clock as clock_mod
from baton.gateway import admin, state
from baton.k8s import gateways as gw

pytestmark = pytest.mark.unit

KEY = "a" * 20 + "B" * 20 + "0123456789"
NS_RT = {"namespace": "ns", "runtime": "rt"}
MINE = ("baton-gateway.g1", "lease-uid-1")


class Server:
    def __init__(self, base: str, st: state.State, lease: list[tuple[str, str] | None]) -> None:
        self.base, self.state, self.lease = base, st, lease


async def _start(tmp_path: pathlib.Path, *, present: Callable[[str], bool] = lambda _uid: True) -> tuple[web.AppRunner, Server]:
    key = tmp_path / "admin.key"
    key.write_text(KEY + "\n")
    st = state.State()
    lease: list[tuple[str, str] | None] = [MINE]
    runner = web.AppRunner(admin.application(st, key=adminkey.KeyFile(str(key)), lease=lambda: lease[0], present=present))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, Server(f"http://127.0.0.1:{runner.addresses[0][1]}", st, lease)


def _seal(uid: str, lease: tuple[str, str] = MINE) -> dict[str, Any]:
    return {**NS_RT, "uid": uid, "lease": {"name": lease[0], "uid": lease[1]}}


def test_an_unauthenticated_or_wrongly_keyed_request_gets_401_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    async def go() -> None:
        runner, srv = await _start(tmp_path)
        try:
            async with aiohttp.ClientSession() as http:
                srv.state.begin("u1")
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + KEY[:-1]},
                                {"Authorization": "Basic " + KEY}, {"Authorization": KEY}):
                    async with http.post(f"{srv.base}/v1/seal", json=_seal("u1"), headers=headers) as r:
                        assert r.status == 401, headers
                        assert r.headers["WWW-Authenticate"].startswith("Bearer")
                    async with http.get(f"{srv.base}/v1/inflight", params={"uid": "u1"}, headers=headers) as r:
                        assert r.status == 401, headers
                assert not srv.state.sealed, "an unauthenticated seal sealed"
                ok = {"Authorization": "Bearer " + KEY}
                async with http.post(f"{srv.base}/v1/seal", json=_seal("u1"), headers=ok) as r:
                    assert r.status == 200 and await r.json() == {"sealed": True, "inflight": 1, "held": 0}
                async with http.get(f"{srv.base}/v1/inflight", params={"uid": "u1"}, headers=ok) as r:
                    assert await r.json() == {"uid": "u1", "inflight": 1, "sealed": True, "sessions": [],
                                              "sessionsTruncated": False}
        finally:
            await runner.cleanup()
    asyncio.run(go())


def test_a_seal_addressed_to_another_lease_is_refused_with_409(tmp_path: pathlib.Path) -> None:
    async def go() -> None:
        runner, srv = await _start(tmp_path)
        try:
            async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + KEY}) as http:
                for other in (("baton-gateway.g2", MINE[1]), (MINE[0], "an-older-uid")):
                    async with http.post(f"{srv.base}/v1/seal", json=_seal("u1", other)) as r:
                        assert r.status == 409 and other[0] in (await r.json())["error"]
                    async with http.get(f"{srv.base}/v1/inflight",
                                        params={"uid": "u1", "lease": other[0], "leaseUID": other[1]}) as r:
                        assert r.status == 409
                srv.lease[0] = None  # not registered yet: nothing is addressed to it
                async with http.post(f"{srv.base}/v1/seal", json=_seal("u1")) as r:
                    assert r.status == 409 and "no Lease yet" in (await r.json())["error"]
                assert not srv.state.sealed
                srv.lease[0] = MINE
                async with http.post(f"{srv.base}/v1/seal", json=_seal("u1")) as r:
                    assert r.status == 200
                async with http.get(f"{srv.base}/v1/inflight",
                                    params={"uid": "u1", "lease": MINE[0], "leaseUID": MINE[1]}) as r:
                    assert r.status == 200 and (await r.json())["sealed"] is True
                async with http.get(f"{srv.base}/v1/inflight", params={"uid": "u1", "lease": MINE[0]}) as r:
                    assert r.status == 400 and "leaseUID" in (await r.json())["error"]
        finally:
            await runner.cleanup()
    asyncio.run(go())


def test_a_seal_past_the_bound_gets_503_with_the_reason(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state, "SEALED_PER_RUNTIME", 2)

    async def go() -> None:
        runner, srv = await _start(tmp_path)  # every pod in the view
        try:
            async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + KEY}) as http:
                for uid in ("p1", "p2"):
                    async with http.post(f"{srv.base}/v1/seal", json=_seal(uid)) as r:
                        assert r.status == 200
                async with http.post(f"{srv.base}/v1/seal", json=_seal("p3")) as r:
                    assert r.status == 503 and (await r.json())["reason"] == "SealLimit"
                assert list(srv.state.sealed) == ["p1", "p2"]
        finally:
            await runner.cleanup()
    asyncio.run(go())


def test_the_key_file_is_checked_and_reread_when_it_changes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "k"
    with pytest.raises(adminkey.AdminKeyError, match="BATON_GATEWAY_ADMIN_KEY_FILE: cannot read"):
        adminkey.KeyFile(str(path))
    path.write_text("short")
    with pytest.raises(adminkey.AdminKeyError, match="at least 32"):
        adminkey.KeyFile(str(path))
    path.write_text("x" * 20 + " " + "y" * 20)
    with pytest.raises(adminkey.AdminKeyError, match="visible ASCII"):
        adminkey.KeyFile(str(path))
    path.write_text(KEY + "\n")
    kf = adminkey.KeyFile(str(path))
    assert kf.key() == KEY.encode()
    path.write_text("z" * 40)
    os.utime(path, ns=(1, 1))  # a change the stat sees, whatever the file system's time granularity
    assert kf.key() == b"z" * 40
    path.write_text("half")
    os.utime(path, ns=(2, 2))
    assert kf.key() == b"z" * 40, "a half-written file keeps the last good key"


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, Any]] = []

    async def seal(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path_qs, request.headers.get("Authorization"), await request.json()))
        return web.json_response({"sealed": True, "inflight": 0})

    async def inflight(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path_qs, request.headers.get("Authorization"), None))
        return web.json_response({"inflight": 0})


def test_the_operator_presents_the_key_and_names_the_lease(tmp_path: pathlib.Path) -> None:
    """ApiGateways reads BATON_GATEWAY_ADMIN_KEY_FILE and sends it as a bearer token; the seal and
    the in-flight question name the Lease (name, uid) the replica was listed under."""
    key = tmp_path / "admin.key"
    key.write_text(KEY + "\n")

    async def go() -> None:
        rec = _Recorder()
        app = web.Application()
        app.router.add_post("/v1/seal", rec.seal)
        app.router.add_get("/v1/inflight", rec.inflight)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        replica = gw.Replica("baton-gateway.g1", f"127.0.0.1:{runner.addresses[0][1]}", uid="lease-uid-1")
        gateways = sealing.ApiGateways(namespace="ns", clock=clock_mod.Clock(), admin_key_file=str(key))
        try:
            await gateways.seal(replica, namespace="ns", runtime="rt", uid="pod-1")
            await gateways.inflight(replica, uid="pod-1", namespace="ns", runtime="rt")
        finally:
            await gateways.close()
            await runner.cleanup()
        assert rec.seen == [
            ("/v1/seal", "Bearer " + KEY,
             {"namespace": "ns", "runtime": "rt", "uid": "pod-1", "lease": {"name": "baton-gateway.g1", "uid": "lease-uid-1"}}),
            ("/v1/inflight?uid=pod-1&namespace=ns&runtime=rt&lease=baton-gateway.g1&leaseUID=lease-uid-1",
             "Bearer " + KEY, None)]
    asyncio.run(go())


def test_the_operator_without_a_usable_key_file_reports_the_seal_unconfirmed(tmp_path: pathlib.Path) -> None:
    async def go() -> None:
        gateways = sealing.ApiGateways(namespace="ns", clock=clock_mod.Clock(), admin_key_file=str(tmp_path / "none"))
        with pytest.raises(gw.AdminError, match="BATON_GATEWAY_ADMIN_KEY_FILE: cannot read"):
            await gateways.seal(gw.Replica("g", "127.0.0.1:1", uid="u"), namespace="ns", runtime="rt", uid="p")
        await gateways.close()
    asyncio.run(go())


def test_the_inflight_answer_lists_the_sessions_seen_on_the_pod_and_the_operator_reads_them(
        tmp_path: pathlib.Path) -> None:
    """Issue 42 item 4: GET /v1/inflight carries the fingerprints of the sessions this replica last
    forwarded to the pod (state.sessions_seen), `sessionsTruncated` once the list reached its
    bound; the operator's client (ApiGateways over baton.k8s.gateways) reads them back, a full
    list included (4096 fingerprints: far past the 4 KiB of a plain answer)."""
    key = tmp_path / "admin.key"
    key.write_text(KEY + "\n")

    async def go() -> None:
        runner, srv = await _start(tmp_path)
        replica = gw.Replica(MINE[0], srv.base.removeprefix("http://"), uid=MINE[1])
        gateways = sealing.ApiGateways(namespace="ns", clock=clock_mod.Clock(), admin_key_file=str(key))
        try:
            for fp, uid in (("fp-a", "p1"), ("fp-b", "p2"), ("fp-c", "p1")):
                srv.state.session_seen(fp, uid)
            async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + KEY}) as http:
                async with http.get(f"{srv.base}/v1/inflight", params={"uid": "p1"}) as r:
                    answer = await r.json()
            assert answer == {"uid": "p1", "inflight": 0, "sealed": False, "sessions": ["fp-c", "fp-a"],
                              "sessionsTruncated": False}
            counts = await gateways.inflight(replica, uid="p1", namespace="ns", runtime="rt")
            assert counts.sessions == frozenset({"fp-a", "fp-c"}) and not counts.sessions_truncated
            # A pod nobody forwarded a session to: an empty list (known: none), not an unknown.
            counts = await gateways.inflight(replica, uid="p9", namespace="ns", runtime="rt")
            assert counts.sessions == frozenset()
            for i in range(state.SESSIONS_SEEN_REPORTED + 5):
                srv.state.session_seen(f"{i:016x}", "p3")
            counts = await gateways.inflight(replica, uid="p3", namespace="ns", runtime="rt")
            assert counts.sessions is not None and len(counts.sessions) == state.SESSIONS_SEEN_REPORTED
            assert counts.sessions_truncated
        finally:
            await gateways.close()
            await runner.cleanup()
    asyncio.run(go())
