"""The gateway adapter: the admin calls against a real
aiohttp server on loopback (bounded; anything but a confirmed answer is an AdminError), and
baton.sealing's observation with the replicas stubbed at that adapter boundary."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import pytest
from aiohttp import web

from baton import sealing
from baton.k8s import gateways as gw
from baton.model import status as st

from .. import builders as b
from ..lifecycle.shapes import OLD_QUIET, retiring

pytestmark = pytest.mark.unit

# Which Leases are live: tests/unit/k8s/test_gateways_liveness.py (by this process's own clock).


class Admin:
    """A real admin listener on 127.0.0.1 answering what the test says."""

    def __init__(self) -> None:
        self.seal_answer: Any = {"sealed": True, "inflight": 2}
        self.inflight_answer: Any = {"uid": "u", "inflight": 1, "sealed": True}
        self.status = 200
        self.delay = 0.0
        self.requests: list[tuple[str, str, Any]] = []
        self.peers: set[Any] = set()  # the client ends of the connections calls came on

    async def seal(self, request: web.Request) -> web.StreamResponse:
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        self.requests.append(("POST", request.path_qs, await request.json()))
        await asyncio.sleep(self.delay)
        return web.json_response(self.seal_answer, status=self.status)

    async def inflight(self, request: web.Request) -> web.StreamResponse:
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        self.requests.append(("GET", request.path_qs, None))
        await asyncio.sleep(self.delay)
        return web.json_response(self.inflight_answer, status=self.status)


async def _serve(admin: Admin) -> tuple[web.AppRunner, gw.Replica]:
    app = web.Application()
    app.router.add_post("/v1/seal", admin.seal)
    app.router.add_get("/v1/inflight", admin.inflight)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, gw.Replica("baton-gateway.t", f"127.0.0.1:{port}")


def test_admin_calls_send_the_contract_and_read_the_count() -> None:
    async def run() -> None:
        admin = Admin()
        runner, replica = await _serve(admin)
        try:
            assert await gw.seal(replica, namespace="ns", runtime="rt", uid="uid-7") == gw.Counts(2, None)
            assert await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt") == gw.Counts(1, None)
            assert admin.requests == [("POST", "/v1/seal", {"namespace": "ns", "runtime": "rt", "uid": "uid-7",
                                                            "lease": {"name": "baton-gateway.t", "uid": ""}}),
                                      ("GET", "/v1/inflight?uid=uid-7&namespace=ns&runtime=rt", None)]
            # The held count, when the replica says it (a malformed one is unknown, never an error).
            admin.seal_answer = {"sealed": True, "inflight": 0, "held": 3}
            assert await gw.seal(replica, namespace="ns", runtime="rt", uid="uid-7") == gw.Counts(0, 3)
            for bad in (-1, True, "2", None):
                admin.inflight_answer = {"inflight": 1, "held": bad}
                assert await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt") == gw.Counts(1, None)
            admin.seal_answer = {"sealed": False, "inflight": 0}
            with pytest.raises(gw.AdminError, match="not confirmed"):
                await gw.seal(replica, namespace="ns", runtime="rt", uid="uid-7")
            admin.inflight_answer = {"inflight": -1}
            with pytest.raises(gw.AdminError, match="no in-flight count"):
                await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt")
            admin.inflight_answer = [1]
            with pytest.raises(gw.AdminError, match="not a JSON object"):
                await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt")
            admin.status = 500
            with pytest.raises(gw.AdminError, match="500"):
                await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt")
            admin.status, admin.delay = 200, 3.0
            started = time.monotonic()
            with pytest.raises(gw.AdminError, match="Timeout"):
                await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt", timeout=0.3)
            assert time.monotonic() - started < 2.0
        finally:
            await gw.close()
            await runner.cleanup()
    asyncio.run(run())


def test_an_unreachable_or_malformed_admin_address_is_an_admin_error() -> None:
    async def run() -> None:
        with pytest.raises(gw.AdminError):
            await gw.inflight(gw.Replica("x", "127.0.0.1:1"), uid="u", namespace="ns", runtime="rt", timeout=1.0)  # nothing listens on port 1
        with pytest.raises(gw.AdminError, match="not host:port"):
            await gw.inflight(gw.Replica("x", "no-port"), uid="u", namespace="ns", runtime="rt")
        await gw.close()
    asyncio.run(run())


def test_admin_calls_share_one_session_and_reuse_its_connections() -> None:
    """One session per process, bounded: two calls to a replica use one kept-alive connection."""
    async def run() -> None:
        admin = Admin()
        runner, replica = await _serve(admin)
        try:
            await gw.inflight(replica, uid="a", namespace="ns", runtime="rt")
            first = gw._admin_session()
            await gw.seal(replica, namespace="ns", runtime="rt", uid="a")
            await gw.inflight(replica, uid="a", namespace="ns", runtime="rt")
            assert gw._admin_session() is first
            connector = first.connector
            assert connector is not None and connector.limit == gw.ADMIN_CONNECTIONS
            assert connector.limit_per_host == gw.ADMIN_CONNECTIONS_PER_REPLICA
            assert len(admin.peers) == 1, f"a new connection per call: {admin.peers}"
        finally:
            await gw.close()
            await runner.cleanup()
        assert first.closed
    asyncio.run(run())


def test_the_sessions_an_inflight_answer_lists_are_read_and_a_malformed_list_is_unknown() -> None:
    async def run() -> None:
        admin = Admin()
        runner, replica = await _serve(admin)
        try:
            async def sessions() -> tuple[frozenset[str] | None, bool]:
                c = await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt")
                return c.sessions, c.sessions_truncated
            admin.inflight_answer = {"inflight": 0, "sessions": ["a", "b", "a"], "sessionsTruncated": False}
            assert await sessions() == (frozenset({"a", "b"}), False)
            admin.inflight_answer = {"inflight": 0, "sessions": ["a"], "sessionsTruncated": True}
            assert await sessions() == (frozenset({"a"}), True)
            # An older gateway (no field) or a malformed list: unknown, never an error.
            for bad in (None, "a", [1], [""], ["x" * (gw.MAX_FINGERPRINT_CHARS + 1)],
                        [f"{i}" for i in range(gw.MAX_SESSIONS_LISTED + 1)]):
                admin.inflight_answer = {"inflight": 0} if bad is None else {"inflight": 0, "sessions": bad}
                assert await sessions() == (None, False), bad
            # The longest list a gateway may send is read whole; a longer answer is refused.
            admin.inflight_answer = {"inflight": 0, "sessions": ["f" * gw.MAX_FINGERPRINT_CHARS] * gw.MAX_SESSIONS_LISTED}
            assert (await sessions())[0] == frozenset({"f" * gw.MAX_FINGERPRINT_CHARS})
            admin.inflight_answer = {"inflight": 0, "pad": "x" * gw.MAX_INFLIGHT_RESPONSE_BYTES}
            with pytest.raises(gw.AdminError, match="answer over"):
                await gw.inflight(replica, uid="uid-7", namespace="ns", runtime="rt")
        finally:
            await gw.close()
            await runner.cleanup()
    asyncio.run(run())


class Stub:
    """The gateways, stubbed at the adapter boundary: per replica, a count (in flight, or in
    flight and held, or a whole answer) or an exception."""

    def __init__(self, answers: dict[str, int | tuple[int, int | None] | gw.Counts | Exception], *,
                 listing: Exception | None = None) -> None:
        self.answers = answers
        self.listing = listing
        self.calls: list[tuple[str, str]] = []

    async def live(self) -> Sequence[gw.Replica]:
        if self.listing is not None:
            raise self.listing
        return [gw.Replica(n, "127.0.0.1:9") for n in self.answers]

    def _answer(self, what: str, replica: gw.Replica) -> gw.Counts:
        self.calls.append((what, replica.name))
        a = self.answers[replica.name]
        if isinstance(a, Exception):
            raise a
        if isinstance(a, gw.Counts):
            return a
        return gw.Counts(*a) if isinstance(a, tuple) else gw.Counts(a)

    async def seal(self, replica: gw.Replica, *, namespace: str, runtime: str, uid: str) -> gw.Counts:
        assert uid == "uid-7"
        return self._answer("seal", replica)

    async def inflight(self, replica: gw.Replica, *, uid: str, namespace: str, runtime: str) -> gw.Counts:
        assert uid == "uid-7" and runtime == b.RT
        return self._answer("inflight", replica)


def observed(step: st.Step, *, gateway: bool = True, serving: bool = False) -> Any:
    pod = OLD_QUIET if not serving else b.pod(7)
    return b.observed(status_=retiring(step), pods=(pod,), spec_=b.spec(gateway=gateway, service=True),
                      desired_hash=b.HASH2)


def test_sealing_asks_every_live_replica_and_names_those_that_did_not_confirm() -> None:
    stub = Stub({"a": 1, "b": gw.AdminError("b: timeout"), "c": 2})
    o = asyncio.run(sealing.observe(observed(st.Step.STOPPING_ADMISSION), gateways=stub, holds=True))
    assert (o.gateway_sealed, o.gateway_inflight, o.gateway_unconfirmed) == (False, None, ("b",))
    assert sorted(stub.calls) == [("seal", "a"), ("seal", "b"), ("seal", "c")]
    o = asyncio.run(sealing.observe(observed(st.Step.STOPPING_ADMISSION), gateways=Stub({"a": 1, "c": 2}), holds=True))
    assert (o.gateway_sealed, o.gateway_inflight, o.gateway_unconfirmed) == (True, 3, ())
    # No live replica: nobody can forward, sealed.
    o = asyncio.run(sealing.observe(observed(st.Step.STOPPING_ADMISSION), gateways=Stub({}), holds=True))
    assert (o.gateway_sealed, o.gateway_inflight) == (True, 0)


def test_draining_sums_the_counts_and_an_unreadable_replica_makes_it_unknown() -> None:
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=Stub({"a": 0, "c": 4}), holds=True))
    assert (o.gateway_sealed, o.gateway_inflight) == (None, 4)
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=Stub({"a": 0, "c": OSError("refused")}),
                                    holds=True))
    assert (o.gateway_inflight, o.gateway_unconfirmed) == (None, ("c",))
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=Stub({}, listing=TimeoutError()), holds=True))
    assert o.gateway_inflight is None and o.gateway_error and "could not be listed" in o.gateway_error


def test_nothing_is_asked_unless_the_holder_retires_a_gateway_runtime_at_the_right_moment() -> None:
    for o, holds in [
        (observed(st.Step.STOPPING_ADMISSION), False),  # not the Lease holder
        (observed(st.Step.STOPPING_ADMISSION, gateway=False), True),  # not routed through the gateway
        (observed(st.Step.STOPPING_ADMISSION, serving=True), True),  # the label flip has not landed
        (observed(st.Step.TERMINATING), True),
    ]:
        stub = Stub({"a": 0})
        assert asyncio.run(sealing.observe(o, gateways=stub, holds=holds)) is o
        assert stub.calls == []
    stub = Stub({}, listing=TimeoutError())
    o = asyncio.run(sealing.observe(observed(st.Step.STOPPING_ADMISSION), gateways=stub, holds=True))
    assert o.gateway_sealed is False and o.gateway_error is not None


def test_the_answers_reach_status_as_sums_of_those_that_answered() -> None:
    """gateway_calls (what `kubectl baton status` shows) sums what the replicas that answered
    said; decide()'s gateway_inflight stays unknown while one did not answer."""
    stub = Stub({"a": (1, 2), "b": (0, None), "c": (3, 1)})
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=stub, holds=True))
    assert o.gateway_calls == st.GatewayCalls(inflight=4, held=3, replicas=3, unconfirmed=0)
    o = asyncio.run(sealing.observe(observed(st.Step.STOPPING_ADMISSION), gateways=Stub({"a": (1, 2), "b": OSError("x")}),
                                    holds=True))
    assert o.gateway_inflight is None
    assert o.gateway_calls == st.GatewayCalls(inflight=1, held=2, replicas=2, unconfirmed=1)
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=Stub({"a": OSError("x")}), holds=True))
    assert o.gateway_calls == st.GatewayCalls(inflight=None, held=None, replicas=1, unconfirmed=1)
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=Stub({"a": 0}), holds=True))
    assert o.gateway_calls == st.GatewayCalls(inflight=0, held=None, replicas=1, unconfirmed=0), "an older gateway: held unknown"
    o = asyncio.run(sealing.observe(observed(st.Step.DRAINING), gateways=Stub({}), holds=True))
    assert o.gateway_calls == st.GatewayCalls(inflight=0, held=0, replicas=0, unconfirmed=0)


def test_the_sessions_reach_status_counted_once_over_the_replicas() -> None:
    """Issue 42 item 4: the sessions the replicas last forwarded to the retiring pod, counted
    distinct (a session whose calls went through two replicas is one); a replica that answered
    without the list (an older gateway) makes the count unknown; one that did not answer is left
    out, as from the other sums; the seal's answers carry no list."""
    def calls(answers: dict[str, int | tuple[int, int | None] | gw.Counts | Exception],
              step: st.Step = st.Step.DRAINING) -> st.GatewayCalls | None:
        return asyncio.run(sealing.observe(observed(step), gateways=Stub(answers), holds=True)).gateway_calls
    a, b = gw.Counts(0, 0, sessions=frozenset({"s1", "s2"})), gw.Counts(1, 0, sessions=frozenset({"s2", "s3"}))
    assert calls({"a": a, "b": b}) == st.GatewayCalls(inflight=1, held=0, replicas=2, sessions=3)
    assert calls({"a": a, "b": gw.Counts(0, 0, sessions=frozenset())}) == st.GatewayCalls(
        inflight=0, held=0, replicas=2, sessions=2)
    got = calls({"a": a, "b": gw.Counts(0, 0)})
    assert got is not None and got.sessions is None, "an older gateway: unknown"
    got = calls({"a": a, "b": OSError("x")})
    assert got is not None and (got.sessions, got.unconfirmed) == (2, 1)
    got = calls({"a": OSError("x")})
    assert got is not None and got.sessions is None
    got = calls({})
    assert got is not None and got.sessions is None, "no live replica to ask: unknown"
    got = calls({"a": a}, st.Step.STOPPING_ADMISSION)
    assert got is not None and got.sessions is None
