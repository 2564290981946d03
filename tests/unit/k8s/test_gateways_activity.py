"""Issue 43 (spec.idle): the gateway adapter's activity call against a real aiohttp server on
loopback (an older gateway's 404 is unknown, a malformed answer an error), the wake demand read
from the replicas' Leases, and baton.sealing's idle observation with the replicas stubbed at the
adapter boundary (the combining is pure)."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any, Sequence

import pytest
from aiohttp import web

from baton import clock as clock_mod
from baton import sealing
from baton.k8s import gateways as gw
from baton.model import names
from baton.model import spec as sp
from baton.model import status as st
from baton.sharding import ranges

from .. import builders as b

pytestmark = pytest.mark.unit


class Admin:
    """A real admin listener on 127.0.0.1 answering /v1/activity with what the test says."""

    def __init__(self) -> None:
        self.answer: Any = {"idleSeconds": 12.5, "inflight": 1, "held": 2}
        self.status = 200
        self.requests: list[tuple[str, str | None]] = []

    async def activity(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path_qs, request.headers.get("Authorization")))
        return web.json_response(self.answer, status=self.status)


async def _serve(admin: Admin, *, with_activity: bool = True) -> tuple[web.AppRunner, gw.Replica]:
    app = web.Application()
    if with_activity:
        app.router.add_get("/v1/activity", admin.activity)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, gw.Replica("baton-gateway.t", f"127.0.0.1:{port}", uid="lease-uid")


def test_the_activity_call_sends_the_contract_and_reads_the_answer() -> None:
    async def run() -> None:
        admin = Admin()
        runner, replica = await _serve(admin)
        try:
            got = await gw.activity(replica, namespace="ns", runtime="rt", key=b"k3y")
            assert got == gw.Activity(idle_seconds=12.5, inflight=1, held=2)
            # Authenticated and addressed as /v1/inflight is.
            assert admin.requests == [("/v1/activity?namespace=ns&runtime=rt&lease=baton-gateway.t&leaseUID=lease-uid",
                                       "Bearer k3y")]
            admin.answer = {"idleSeconds": 0, "inflight": 0, "held": 0}
            assert await gw.activity(replica, namespace="ns", runtime="rt") == gw.Activity(0.0, 0, 0)
            for bad in ({"inflight": 0, "held": 0}, {"idleSeconds": -1, "inflight": 0, "held": 0},
                        {"idleSeconds": True, "inflight": 0, "held": 0}, {"idleSeconds": "3", "inflight": 0, "held": 0},
                        {"idleSeconds": 3, "inflight": -1, "held": 0}, {"idleSeconds": 3, "inflight": 0},
                        {"idleSeconds": 3, "inflight": 0, "held": False}, [1]):
                admin.answer = bad
                with pytest.raises(gw.AdminError):
                    await gw.activity(replica, namespace="ns", runtime="rt")
            admin.answer, admin.status = {"error": "unauthorized"}, 401
            with pytest.raises(gw.AdminError, match="401"):
                await gw.activity(replica, namespace="ns", runtime="rt")
        finally:
            await gw.close()
            await runner.cleanup()
    asyncio.run(run())


def test_an_older_gateway_without_the_endpoint_answers_not_found() -> None:
    async def run() -> None:
        runner, replica = await _serve(Admin(), with_activity=False)
        try:
            with pytest.raises(gw.AdminNotFound):
                await gw.activity(replica, namespace="ns", runtime="rt")
        finally:
            await gw.close()
            await runner.cleanup()
    asyncio.run(run())


def lease(name: str, *, demand: Any = None, version: str = "1", duration: int = 15) -> dict[str, Any]:
    annotations = {names.ANN_GATEWAY_ADMIN: "127.0.0.1:9"}
    if demand is not None:
        annotations[names.ANN_WAKE_DEMAND] = demand if isinstance(demand, str) else json.dumps(demand)
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version, "annotations": annotations},
            "spec": {"leaseDurationSeconds": duration}}


def test_the_wake_demand_annotation_is_read_and_a_malformed_one_is_none() -> None:
    assert gw.wake_demand(lease("a", demand=["ns/rt", "ns/other"])) == frozenset({"ns/rt", "ns/other"})
    assert gw.wake_demand(lease("a")) == frozenset()
    assert gw.wake_demand(None) == frozenset()
    for bad in ("not json", json.dumps({"ns/rt": 1}), json.dumps("ns/rt")):
        assert gw.wake_demand(lease("a", demand=bad)) == frozenset(), bad
    # Entries that are no "namespace/name" are skipped, the others kept.
    assert gw.wake_demand(lease("a", demand=["ns/rt", 3, "noslash", "a/b/c", "/x", "ns/"])) == frozenset({"ns/rt"})
    # At most WAKE_DEMAND_MAX entries are read.
    many = [f"ns/rt{i:04d}" for i in range(names.WAKE_DEMAND_MAX + 10)]
    assert len(gw.wake_demand(lease("a", demand=many))) == names.WAKE_DEMAND_MAX


def test_only_live_replicas_seen_writing_that_list_the_runtime_demand_its_wake() -> None:
    sightings = ranges.Sightings()
    leases = [lease("a", demand=["ns/rt"]), lease("b", demand=["ns/other"]), lease("c", demand=["ns/rt"])]
    live = gw.live_replicas(leases, sightings=sightings, now=0.0)
    # First sight (this process just started): a killed replica's Lease keeps its last demand,
    # so none is believed before its replica is seen writing.
    assert sealing.demanding(live, namespace="ns", runtime="rt") == ()
    leases = [lease("a", demand=["ns/rt"], version="2"), leases[1], lease("c", demand=["ns/rt"], version="2")]
    live = gw.live_replicas(leases, sightings=sightings, now=3.0)
    assert sealing.demanding(live, namespace="ns", runtime="rt") == ("a", "c")
    # c stops renewing: lapsed past its duration (no static window), then not listed at all.
    leases = [lease("a", demand=["ns/rt"], version="3"), leases[1], leases[2]]
    live = gw.live_replicas(leases, sightings=sightings, now=20.0)
    assert sealing.demanding(live, namespace="ns", runtime="rt") == ("a",)
    # A lapsed replica (within its static window) forwards, but what it lists is not known now.
    lapsed = [gw.Replica("a", "x", wake_demand=frozenset({"ns/rt"}), lapsed=True)]
    assert sealing.demanding(lapsed, namespace="ns", runtime="rt") == ()


def test_the_activity_of_the_replicas_combines_into_one() -> None:
    assert sealing.combined_activity([]) is None, "no live replica: nothing counted, unknown"
    got = sealing.combined_activity([gw.Activity(300.0, 1, 0), gw.Activity(40.5, 0, 2), gw.Activity(900.0, 3, 1)])
    assert got is not None and (got.idle_seconds, got.inflight, got.held) == (40.5, 4, 3)


def test_a_person_wake_counts_only_when_newer_than_the_idle() -> None:
    since = b.at(-60)
    newer = (since + datetime.timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    older = (since - datetime.timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    assert sealing.person_wake({names.ANN_WAKE: newer}, idle_since=since) == since + datetime.timedelta(seconds=5)
    assert sealing.person_wake({names.ANN_WAKE: older}, idle_since=since) is None
    assert sealing.person_wake({names.ANN_WAKE: "tomorrow"}, idle_since=since) is None
    assert sealing.person_wake({names.ANN_WAKE: "2026-01-01T00:00:00"}, idle_since=since) is None, "no zone: not RFC 3339"
    assert sealing.person_wake({}, idle_since=since) is None
    assert sealing.wake_demand_text(replicas=(), asked_at=None) is None
    assert sealing.wake_demand_text(replicas=("gw-a",), asked_at=None) == "calls held at gateway replica gw-a"
    text = sealing.wake_demand_text(replicas=("gw-a", "gw-b"), asked_at=datetime.datetime(2026, 1, 2, 3, 4, 5,
                                                                                          tzinfo=datetime.timezone.utc))
    assert text == "calls held at gateway replicas gw-a, gw-b; kubectl baton wake at 2026-01-02T03:04:05Z"


class Stub:
    """The gateways, stubbed at the adapter boundary: per replica an activity or an exception,
    and the replicas the Leases name as demanding."""

    def __init__(self, answers: dict[str, gw.Activity | Exception], *, demand: tuple[str, ...] = (),
                 lapsed: Sequence[str] = ()) -> None:
        self.answers, self.demand, self.lapsed = answers, demand, set(lapsed)
        self.calls: list[str] = []

    async def live(self) -> Sequence[gw.Replica]:
        return [gw.Replica(n, "127.0.0.1:9", lapsed=n in self.lapsed) for n in self.answers]

    async def seal(self, replica: gw.Replica, *, namespace: str, runtime: str, uid: str) -> gw.Counts:
        raise AssertionError("no seal at rest")

    async def inflight(self, replica: gw.Replica, *, uid: str, namespace: str, runtime: str) -> gw.Counts:
        raise AssertionError("no in-flight count at rest")

    async def activity(self, replica: gw.Replica, *, namespace: str, runtime: str) -> gw.Activity:
        assert (namespace, runtime) == (b.NS, b.RT)
        self.calls.append(f"activity {replica.name}")
        a = self.answers[replica.name]
        if isinstance(a, Exception):
            raise a
        return a

    async def wake_demand(self, *, namespace: str, runtime: str) -> tuple[str, ...]:
        self.calls.append("demand")
        return self.demand


def idle_spec(*, wake_on_request: bool = True) -> sp.ToolRuntimeSpec:
    return b.spec(gateway=True).model_copy(update={"idle": sp.Idle(after_seconds=60, wake_on_request=wake_on_request)})


def serving(**extra: Any) -> Any:
    return b.observed(spec_=extra.pop("spec_", idle_spec()), **extra)


def idle(*, annotations: dict[str, str] | None = None, wake_on_request: bool = True) -> Any:
    status = b.status(gen=None, idle=st.IdleStatus(since=b.at(-600)))
    return b.observed(spec_=idle_spec(wake_on_request=wake_on_request), status_=status, pods=(),
                      annotations=annotations)


def observe(o: Any, stub: Stub, *, holds: bool = False) -> Any:
    return asyncio.run(sealing.observe(o, gateways=stub, holds=holds))


def test_a_serving_runtime_with_spec_idle_gets_the_activity_of_every_live_replica() -> None:
    stub = Stub({"a": gw.Activity(100.0, 0, 0), "b": gw.Activity(30.0, 1, 0)})
    o = observe(serving(), stub)
    assert o.activity is not None and (o.activity.idle_seconds, o.activity.inflight, o.activity.held) == (30.0, 1, 0)
    assert sorted(stub.calls) == ["activity a", "activity b"]
    assert o.wake_demand is None


def test_one_replica_unread_makes_the_activity_unknown() -> None:
    for failure in (gw.AdminNotFound("404: an older gateway"), gw.AdminError("timeout"), OSError("refused")):
        o = observe(serving(), Stub({"a": gw.Activity(100.0, 0, 0), "b": failure}))
        assert o.activity is None, failure
    # A lapsed replica whose address refuses is gone: not one of the replicas any more.
    o = observe(serving(), Stub({"a": gw.Activity(100.0, 0, 0), "b": gw.AdminGone("refused")}, lapsed=["b"]))
    assert o.activity is not None and o.activity.idle_seconds == 100.0
    assert observe(serving(), Stub({})).activity is None, "no live replica: unknown"


def test_activity_is_asked_only_of_a_serving_runtime_at_rest_with_spec_idle() -> None:
    transition = b.in_flight(b.transition(st.Step.CREATING))
    for o in (b.observed(spec_=b.spec(gateway=True)),  # no spec.idle
              serving(status_=transition),  # a transition under way
              serving(pods=()),  # no current pod
              serving(spec_=idle_spec().model_copy(update={"suspend": True})),
              serving(annotations={names.ANN_KEEP_AWAKE: "true"})):
        stub = Stub({"a": gw.Activity(1.0, 0, 0)})
        assert observe(o, stub) is o
        assert stub.calls == []


def test_an_idle_runtime_reads_who_demands_its_wake() -> None:
    assert observe(idle(), Stub({}, demand=())).wake_demand is None
    o = observe(idle(), Stub({}, demand=("gw-a",)))
    assert o.wake_demand == "calls held at gateway replica gw-a" and o.activity is None
    # wakeOnRequest off: calls held are no demand; a person's wake still is.
    stub = Stub({}, demand=("gw-a",))
    assert observe(idle(wake_on_request=False), stub).wake_demand is None and stub.calls == []
    asked = b.at(-10).isoformat().replace("+00:00", "Z")
    o = observe(idle(annotations={names.ANN_WAKE: asked}, wake_on_request=False), Stub({}))
    assert o.wake_demand is not None and o.wake_demand.startswith("kubectl baton wake at ")
    # One asked before the idle began was answered already.
    old = b.at(-700).isoformat().replace("+00:00", "Z")
    assert observe(idle(annotations={names.ANN_WAKE: old}), Stub({})).wake_demand is None


def test_the_api_gateways_read_the_demand_from_the_watched_view() -> None:
    clock = clock_mod.Manual(b.NOW)
    view: list[dict[str, Any]] = [lease("a", demand=["ns/rt"]), lease("b", demand=[])]
    api = sealing.ApiGateways(namespace="baton-system", clock=clock, leases=lambda: view)
    assert asyncio.run(api.wake_demand(namespace="ns", runtime="rt")) == (), "not seen writing yet"
    view[0] = lease("a", demand=["ns/rt"], version="2")  # its renewal
    assert asyncio.run(api.wake_demand(namespace="ns", runtime="rt")) == ("a",)
    # a stops renewing (its Lease unchanged past its duration): its demand is no longer believed.
    clock.t = 20.0
    assert asyncio.run(api.wake_demand(namespace="ns", runtime="rt")) == ()
    view[0] = lease("a", demand=["ns/rt"], version="3")
    assert asyncio.run(api.wake_demand(namespace="ns", runtime="rt")) == ("a",)
