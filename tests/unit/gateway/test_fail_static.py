"""Fail static, the gateway's side (issue #41, deliverable 9; docs/gateway.md, "When the API
server is away"): a replica whose Lease renewals fail keeps forwarding, for its static window, to
runtimes its view shows in steady state, and holds the others; past the window it stops as
before. Before, every call of every runtime was held from duration - margin on."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from baton.gateway import proxy, registrar, route, state
from baton.k8s import registration

from .test_proxy import settings
from .test_route import pod, runtime
from .test_state import FakeLeases

pytestmark = pytest.mark.unit

LOOP = (ipaddress.ip_network("127.0.0.0/8"),)
FORWARD = route.Forward(uid="u2", ip="127.0.100.5", port=8080, generation=2)


def steady(**status: Any) -> dict[str, Any]:
    rt = runtime()
    rt["metadata"]["generation"] = 3
    rt["status"].update({"observedGeneration": 3, **status})
    return rt


@pytest.mark.parametrize("rt,decision,expected", [
    # Steady state: forwarded as a live replica would.
    (steady(), FORWARD, FORWARD),
    (steady(observedGeneration=None), FORWARD, FORWARD),  # no observedGeneration written: no claim either way
    # A transition in the view: held (the operator may be moving it on without this replica).
    (steady(transition={"kind": "Replace", "step": "Starting", "fromUid": "u2"}), FORWARD, "held"),
    (steady(transition={"kind": "Retire", "step": "Draining"}), FORWARD, "held"),
    # A spec change the operator has not acted on yet: a transition is about to start.
    (steady(observedGeneration=2), FORWARD, "held"),
    # Holds and refusals stand (nothing is dialled either way).
    (steady(), route.Hold("no generation serves yet"), route.Hold("no generation serves yet")),
    (steady(), route.Refuse(route.Reason.SUSPENDED, 30, "suspended"), route.Refuse(route.Reason.SUSPENDED, 30, "suspended")),
    (None, route.Refuse(route.Reason.UNKNOWN_RUNTIME, 0, "x"), route.Refuse(route.Reason.UNKNOWN_RUNTIME, 0, "x")),
])
def test_static_forwarding_decision_table(rt: dict[str, Any] | None, decision: route.Decision, expected: Any) -> None:
    got = route.fail_static(rt, decision)
    if expected == "held":
        assert isinstance(got, route.Hold) and got.why.startswith(route.STATIC_HOLD), got
    else:
        assert got == expected


def test_the_rest_of_steady_state_is_decide_s_a_sealed_or_not_ready_pod_is_never_forwarded() -> None:
    """The static gate sits on top of decide(): the serving pod current, serving=true, Ready,
    not sealed here (a seal the operator sends to a static replica applies at once)."""
    rt = steady()
    for pods, sealed in (([pod()], {"u2"}), ([pod(ready=False)], set()), ([pod(serving="false")], set()),
                         ([pod("u9")], set())):
        d = route.decide(rt, pods, port=None, sealed=sealed, excluded=set(), allowed=LOOP)
        assert not isinstance(route.fail_static(rt, d), route.Forward), (pods, sealed)
    d = route.decide(rt, [pod()], port=None, sealed=set(), excluded=set(), allowed=LOOP)
    assert route.fail_static(rt, d) == FORWARD


class Views:
    """The two reads decide() makes of the views."""

    def __init__(self, rt: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
        self.rt, self.pods = rt, pods

    def runtime(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.rt

    def pods_of(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.pods


@pytest.mark.parametrize("mode,rt,forwarded", [
    (registrar.Mode.FORWARDING, steady(), True),
    (registrar.Mode.FORWARDING, steady(transition={"kind": "Replace", "step": "Starting"}), True),
    (registrar.Mode.STATIC, steady(), True),
    (registrar.Mode.STATIC, steady(transition={"kind": "Replace", "step": "Starting"}), False),
    (registrar.Mode.HOLDING, steady(), False),
    (True, steady(transition={"kind": "Replace", "step": "Starting"}), True),
    (False, steady(), False),
])
def test_the_proxy_decides_by_the_registrar_s_mode(mode: Any, rt: dict[str, Any], forwarded: bool) -> None:
    px = proxy.Proxy(settings=settings(), views=Views(rt, [pod()]), state=state.State(),  # type: ignore[arg-type]
                     forwarding=lambda: mode)
    d = px.decide(route.Target("ns", "tool", None), set())
    assert isinstance(d, route.Forward) is forwarded, d


def test_the_registrar_fails_static_for_its_window_then_holds_and_relists_after_a_lapse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLeases()
    written: list[dict[str, Any]] = []

    async def register(**kw: Any) -> dict[str, Any]:
        written.append(kw)
        return await fake.register(**kw)
    monkeypatch.setattr(registration, "register_gateway", register)
    monkeypatch.setattr(registration, "renew_gateway", fake.renew)
    now = [100.0]

    async def relist() -> bool:
        return True

    async def go() -> None:
        r = registrar.Registrar(namespace="ns", instance="i", admin="a:1", duration_seconds=10, static_seconds=30,
                                relist=relist, on_change=lambda: None, mono=lambda: now[0])
        assert r.mode() is registrar.Mode.HOLDING
        await r.start()
        assert written[-1]["static_seconds"] == 30, "the window is announced in the Lease"
        r.views_ok = True
        assert r.mode() is registrar.Mode.FORWARDING
        fake.fail = True  # the API server goes away
        now[0] += 5
        r.heartbeat = now[0]  # the event loop ran meanwhile (renewals failing, not paused)
        assert not await r._write() and r.mode() is registrar.Mode.FORWARDING
        now[0] += 3  # at duration - margin (8 s): static, not holding
        r.heartbeat = now[0]  # the event loop ran meanwhile (renewals failing, not paused)
        assert r.mode() is registrar.Mode.STATIC and r.forwarding()
        now[0] += 29.9  # just within 8 + 30 s
        r.heartbeat = now[0]  # the event loop ran meanwhile (renewals failing, not paused)
        assert r.mode() is registrar.Mode.STATIC
        now[0] += 0.1  # the window is over: holding, the views dropped
        r.heartbeat = now[0]  # the event loop ran meanwhile (renewals failing, not paused)
        assert r.mode() is registrar.Mode.HOLDING and not r.views_ok and not r.forwarding()
        # A second lapse: static again only after a renewal and a relist.
        fake.fail = False
        assert await r._write() and written[-1]["static_seconds"] == 30
        assert r.mode() is registrar.Mode.HOLDING
        r.views_ok = True
        assert r.mode() is registrar.Mode.FORWARDING
        # The API server returns within the window: the first write ends static mode at once;
        # nothing is forwarded until the views are listed again.
        fake.fail = True
        now[0] += 20
        r.heartbeat = now[0]  # the event loop ran meanwhile (renewals failing, not paused)
        assert r.mode() is registrar.Mode.STATIC
        fake.fail = False
        assert await r._write()
        assert r.mode() is registrar.Mode.HOLDING, "a registration after a lapse: held until re-listed"
    asyncio.run(go())


def test_without_a_window_the_registrar_stops_at_the_margin_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLeases()
    monkeypatch.setattr(registration, "register_gateway", fake.register)
    monkeypatch.setattr(registration, "renew_gateway", fake.renew)
    now = [100.0]

    async def relist() -> bool:
        return True

    async def go() -> None:
        r = registrar.Registrar(namespace="ns", instance="i", admin="a:1", duration_seconds=10, static_seconds=0,
                                relist=relist, on_change=lambda: None, mono=lambda: now[0])
        await r.start()
        r.views_ok = True
        now[0] += 8
        assert r.mode() is registrar.Mode.HOLDING and not r.views_ok
    asyncio.run(go())


def test_a_replica_that_did_not_run_is_never_static(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lapse with the heartbeat stale is a pause (SIGSTOP), not the API server away: the old
    view is dropped at once, as without a static window (the operator may have gone on)."""
    fake = FakeLeases()
    monkeypatch.setattr(registration, "register_gateway", fake.register)
    monkeypatch.setattr(registration, "renew_gateway", fake.renew)
    now = [100.0]

    async def relist() -> bool:
        return True

    async def go() -> None:
        r = registrar.Registrar(namespace="ns", instance="i", admin="a:1", duration_seconds=10, static_seconds=30,
                                relist=relist, on_change=lambda: None, mono=lambda: now[0])
        await r.start()
        r.views_ok = True
        r.heartbeat = now[0]
        now[0] += 12  # paused: no heartbeat, no renewal, for longer than the Lease
        assert r.mode() is registrar.Mode.HOLDING and not r.views_ok
        # Running again but the views not yet listed: still holding.
        r.heartbeat = now[0]
        assert r.mode() is registrar.Mode.HOLDING
    asyncio.run(go())
