"""Gateway replica liveness judged by the operator's own monotonic clock (review item 10): a Lease
is live while this process saw it change (uid or resourceVersion) less than its duration ago;
renewTime, the replica's wall clock, is never compared with ours. Pure: `now` is passed in."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.k8s import gateways as gw
from baton.model import names
from baton.sharding import ranges

pytestmark = pytest.mark.unit

WALL = datetime.datetime(2026, 12, 2, 1, 0, 0, tzinfo=datetime.timezone.utc)


def lease(name: str, *, version: int, renewed: float = 0.0, uid: str = "u", duration: Any = 15,
          admin: str | None = "127.0.0.1:9") -> dict[str, Any]:
    ann = {names.ANN_GATEWAY_ADMIN: admin} if admin is not None else {}
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": str(version), "annotations": ann,
                         "labels": {names.LABEL_COMPONENT: names.COMPONENT_GATEWAY}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration,
                     "renewTime": (WALL + datetime.timedelta(seconds=renewed)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def names_of(replicas: list[gw.Replica]) -> list[str]:
    return [r.name for r in replicas]


def test_a_lease_that_keeps_changing_is_live_whatever_its_renew_time_says() -> None:
    """The writer's clock an hour behind, or a day ahead: renewals still seen, still live."""
    seen = ranges.Sightings()
    for i in range(10):
        leases = [lease("baton-gateway.behind", version=100 + i, renewed=-3600 + 5 * i),
                  lease("baton-gateway.ahead", version=200 + i, renewed=86400 + 5 * i)]
        live = gw.live_replicas(leases, sightings=seen, now=1000.0 + 5 * i)
        assert names_of(live) == ["baton-gateway.ahead", "baton-gateway.behind"], i


def test_a_lease_that_stops_changing_expires_after_its_duration_by_the_local_clock() -> None:
    """Its renewTime says 'just now' (a clock far ahead): that never keeps it live."""
    seen = ranges.Sightings()
    frozen = [lease("baton-gateway.a", version=7, renewed=86400, duration=15)]
    assert names_of(gw.live_replicas(frozen, sightings=seen, now=50.0)) == ["baton-gateway.a"], \
        "a Lease seen for the first time is live (a replica that just started must be sealed)"
    assert names_of(gw.live_replicas(frozen, sightings=seen, now=64.9)) == ["baton-gateway.a"]
    assert gw.live_replicas(frozen, sightings=seen, now=65.0) == []
    # It renews again: live again from that sighting on.
    assert names_of(gw.live_replicas([lease("baton-gateway.a", version=8, renewed=86400)], sightings=seen,
                                     now=70.0)) == ["baton-gateway.a"]


def test_a_recreated_lease_is_a_change_and_carries_its_new_uid() -> None:
    seen = ranges.Sightings()
    assert gw.live_replicas([lease("baton-gateway.a", version=7, uid="old")], sightings=seen, now=0.0)[0].uid == "old"
    assert gw.live_replicas([lease("baton-gateway.a", version=7, uid="old")], sightings=seen, now=20.0) == []
    # Deleted and created again (same name): a new uid, whatever the resourceVersion.
    [r] = gw.live_replicas([lease("baton-gateway.a", version=7, uid="new")], sightings=seen, now=21.0)
    assert r == gw.Replica("baton-gateway.a", "127.0.0.1:9", uid="new")


def test_leases_not_listed_are_forgotten_and_malformed_ones_skipped() -> None:
    seen = ranges.Sightings()
    gw.live_replicas([lease("baton-gateway.a", version=1)], sightings=seen, now=0.0)
    gw.live_replicas([], sightings=seen, now=100.0)
    # Forgotten: seen again, it is a first sighting (live), not a Lease unchanged for 100 s.
    assert names_of(gw.live_replicas([lease("baton-gateway.a", version=1)], sightings=seen, now=100.0)) == ["baton-gateway.a"]
    bad = [lease("baton-gateway.noadmin", version=1, admin=None),
           lease("baton-gateway.noduration", version=1, duration=None),
           lease("baton-gateway.boolduration", version=1, duration=True),
           lease("baton-gateway.nouid", version=1, uid=""),
           {"metadata": {"name": "baton-gateway.nothing"}}]
    assert gw.live_replicas(bad, sightings=seen, now=0.0) == []
