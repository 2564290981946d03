"""Fail static, the operator's side (issue #41, deliverable 9; docs/gateway.md, "When the API
server is away"): a replica whose Lease stopped changing may still forward for the static window
its Lease announces, so the operator keeps asking it that long (`lapsed`), and reads its answers:
a confirmed seal counts, a refused connection or a 409 (another process there) is gone, anything
else is unconfirmed. Before, a replica was dropped one duration after its last renewal, sealed or
not: the operator could retire N under a replica still forwarding to it."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Sequence

import pytest
from aiohttp import web

from baton import sealing
from baton.k8s import gateways as gw
from baton.model import names
from baton.model import status as st
from baton.sharding import ranges

from .test_gateways import observed
from .test_gateways_liveness import lease

pytestmark = pytest.mark.unit


def static_lease(name: str, *, version: int, static: Any, duration: int = 15) -> dict[str, Any]:
    out = lease(name, version=version, duration=duration)
    out["metadata"]["annotations"][names.ANN_GATEWAY_STATIC] = static
    return out


def test_a_lapsed_lease_is_still_listed_for_its_static_window_marked_lapsed() -> None:
    seen = ranges.Sightings()
    frozen = [static_lease("baton-gateway.a", version=7, static="120")]
    [r] = gw.live_replicas(frozen, sightings=seen, now=0.0)
    assert not r.lapsed
    [r] = gw.live_replicas(frozen, sightings=seen, now=14.9)
    assert not r.lapsed
    [r] = gw.live_replicas(frozen, sightings=seen, now=15.0)
    assert r.lapsed and r.uid == "u", "past its duration: still asked, as lapsed"
    [r] = gw.live_replicas(frozen, sightings=seen, now=134.9)
    assert r.lapsed
    assert gw.live_replicas(frozen, sightings=seen, now=135.0) == [], "duration + window over: gone"
    # It renews again: live, not lapsed.
    [r] = gw.live_replicas([static_lease("baton-gateway.a", version=8, static="120")], sightings=seen, now=140.0)
    assert not r.lapsed


@pytest.mark.parametrize("text,window", [(None, 0), ("0", 0), ("30", 30), ("-5", 0), ("abc", 0), ("", 0),
                                         (12, 0), ("999999", gw.MAX_STATIC_SECONDS)])
def test_the_window_is_read_from_the_annotation_zero_when_absent_or_malformed(text: Any, window: int) -> None:
    one = lease("baton-gateway.a", version=1) if text is None else static_lease("baton-gateway.a", version=1, static=text)
    assert gw.static_seconds(one) == window
    seen = ranges.Sightings()
    gw.live_replicas([one], sightings=seen, now=0.0)
    listed = gw.live_replicas([one], sightings=seen, now=15.0 + window - 0.1)
    assert [r.lapsed for r in listed] == ([True] if window else [False])
    assert gw.live_replicas([one], sightings=seen, now=15.0 + window) == []


class Stub:
    """The gateways at the adapter boundary: per replica, whether lapsed and its answer."""

    def __init__(self, answers: dict[str, tuple[bool, int | Exception]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str]] = []

    async def live(self) -> Sequence[gw.Replica]:
        return [gw.Replica(n, "127.0.0.1:9", uid="u", lapsed=lapsed) for n, (lapsed, _) in self.answers.items()]

    def _answer(self, what: str, replica: gw.Replica) -> gw.Counts:
        self.calls.append((what, replica.name))
        a = self.answers[replica.name][1]
        if isinstance(a, Exception):
            raise a
        return gw.Counts(a, 0)

    async def seal(self, replica: gw.Replica, *, namespace: str, runtime: str, uid: str) -> gw.Counts:
        return self._answer("seal", replica)

    async def inflight(self, replica: gw.Replica, *, uid: str, namespace: str, runtime: str) -> gw.Counts:
        return self._answer("inflight", replica)


REFUSED = gw.AdminGone("POST http://127.0.0.1:9/v1/seal: ClientConnectorError connection refused")
MISADDRESSED = gw.AdminGone("POST http://127.0.0.1:9/v1/seal: 409 (addressed to Lease a (uid u); this replica is b)")
TIMEOUT = gw.AdminError("POST http://127.0.0.1:9/v1/seal: TimeoutError")
UNAUTHORIZED = gw.AdminError("POST http://127.0.0.1:9/v1/seal: 401 (unauthorized)")


@pytest.mark.parametrize("step", [st.Step.STOPPING_ADMISSION, st.Step.DRAINING])
@pytest.mark.parametrize("lapsed,answer,counted", [
    # A lapsed replica: its answer decides.
    (True, 2, "answered"),
    (True, REFUSED, "gone"),
    (True, MISADDRESSED, "gone"),
    (True, TIMEOUT, "unconfirmed"),
    (True, UNAUTHORIZED, "unconfirmed"),
    # A live replica: as before, anything but an answer is unconfirmed (it renews: something there forwards).
    (False, 2, "answered"),
    (False, REFUSED, "unconfirmed"),
    (False, MISADDRESSED, "unconfirmed"),
    (False, TIMEOUT, "unconfirmed"),
])
def test_a_lapsed_replica_is_asked_and_its_answer_classified(step: st.Step, lapsed: bool, answer: int | Exception,
                                                            counted: str) -> None:
    stub = Stub({"baton-gateway.live": (False, 1), "baton-gateway.x": (lapsed, answer)})
    o = asyncio.run(sealing.observe(observed(step), gateways=stub, holds=True))
    asked = "seal" if step == st.Step.STOPPING_ADMISSION else "inflight"
    assert sorted(stub.calls) == [(asked, "baton-gateway.live"), (asked, "baton-gateway.x")], "a lapsed replica is asked"
    sealing_step = step == st.Step.STOPPING_ADMISSION
    if counted == "answered":
        assert (o.gateway_inflight, o.gateway_unconfirmed) == (3, ())
        assert o.gateway_sealed is (True if sealing_step else None)
        assert o.gateway_calls is not None and o.gateway_calls.replicas == 2
    elif counted == "gone":
        assert (o.gateway_inflight, o.gateway_unconfirmed) == (1, ()), "gone: forwards nothing, counts nothing"
        assert o.gateway_sealed is (True if sealing_step else None)
        assert o.gateway_calls is not None and o.gateway_calls.replicas == 1
    else:
        assert (o.gateway_inflight, o.gateway_unconfirmed) == (None, ("baton-gateway.x",))
        assert o.gateway_sealed is (False if sealing_step else None)


# --- the adapter's classification, against real sockets on loopback ----------------------------

def test_a_refused_connection_and_a_409_are_admin_gone_other_failures_are_not() -> None:
    async def run() -> None:
        status = [409]

        async def seal(request: web.Request) -> web.StreamResponse:
            if status[0] == 0:
                await asyncio.sleep(5)
            return web.json_response({"error": "addressed to Lease x"}, status=status[0] or 200)

        app = web.Application()
        app.router.add_post("/v1/seal", seal)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        replica = gw.Replica("baton-gateway.t", f"127.0.0.1:{port}", uid="u", lapsed=True)
        try:
            with pytest.raises(gw.AdminGone, match="409"):
                await gw.seal(replica, namespace="ns", runtime="rt", uid="p")
            for other in (503, 401):
                status[0] = other
                with pytest.raises(gw.AdminError) as info:
                    await gw.seal(replica, namespace="ns", runtime="rt", uid="p")
                assert not isinstance(info.value, gw.AdminGone), other
            status[0] = 0  # never answers within the deadline
            with pytest.raises(gw.AdminError) as info:
                await gw.seal(replica, namespace="ns", runtime="rt", uid="p", timeout=0.5)
            assert not isinstance(info.value, gw.AdminGone), "a timeout says nothing of who is there"
        finally:
            await runner.cleanup()
            await gw.close()
        # Nothing listens on a port just closed: refused.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        try:
            with pytest.raises(gw.AdminGone, match="ClientConnectorError"):
                await gw.seal(gw.Replica("baton-gateway.t", f"127.0.0.1:{closed}", uid="u", lapsed=True),
                              namespace="ns", runtime="rt", uid="p")
        finally:
            await gw.close()
    asyncio.run(run())
