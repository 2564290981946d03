"""`kubectl baton list --owner`, the pure part: which replica holds the range a runtime's UID
falls in, from the range Leases as the API server returns them."""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.cli import owners
from baton.model import names, shardhash
from baton.sharding import ranges as ranges_mod

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 12, 2, 8, 0, 0, tzinfo=datetime.timezone.utc)


def lease(index: int, count: int, holder: str | None, *, renewed: float = -1.0, duration: Any = 15,
          namespace: str = "baton-system") -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    if holder is not None:
        spec["renewTime"] = (NOW + datetime.timedelta(seconds=renewed)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"name": names.shard_range_lease_name(index=index, ranges=count), "namespace": namespace,
                         "labels": {names.LABEL_COMPONENT: names.COMPONENT_SHARD_RANGE}}, "spec": spec}


def uid_in(index: int, count: int) -> str:
    """A UID whose hash falls in range `index` of `count`."""
    return next(u for u in (f"uid-{i}" for i in range(10000)) if shardhash.range_of(u, ranges=count) == index)


def test_the_plugin_hashes_as_the_operator_does() -> None:
    assert ranges_mod.range_of is shardhash.range_of and ranges_mod.fnv1a64 is shardhash.fnv1a64
    assert shardhash.fnv1a64(b"foobar") == 0x85944171F73967E8


def test_each_runtime_is_owned_by_the_holder_of_its_range() -> None:
    leases = [lease(0, 4, "op-a"), lease(1, 4, "op-b"), lease(2, 4, "op-a", renewed=-20), lease(3, 4, None)]
    r = owners.ranges_from(leases, now=NOW)
    assert r is not None and r.total == 4 and r.namespaces == ("baton-system",)
    assert owners.owner(uid_in(0, 4), r) == "op-a"
    assert owners.owner(uid_in(1, 4), r) == "op-b"
    assert owners.owner(uid_in(2, 4), r) == "op-a (expired)", "renewed 20 s ago with a 15 s duration"
    assert owners.owner(uid_in(3, 4), r) == owners.NONE, "released"
    assert owners.owner("", r) == owners.NONE


def test_a_range_without_a_lease_has_no_owner_and_no_lease_means_sharding_is_off() -> None:
    r = owners.ranges_from([lease(0, 2, "op-a")], now=NOW)
    assert r is not None and owners.owner(uid_in(1, 2), r) == owners.NONE
    assert owners.ranges_from([], now=NOW) is None
    other = {"metadata": {"name": "baton-member.op-a"}, "spec": {"holderIdentity": "op-a"}}
    assert owners.ranges_from([other], now=NOW) is None


def test_leases_of_an_older_range_count_are_ignored() -> None:
    """The count was changed: the Leases cut for the old one stay until removed; the count renewed
    last is the one the replicas run with."""
    leases = [lease(0, 2, "old", renewed=-600), lease(1, 2, "old", renewed=-600),
              lease(0, 4, "op-a"), lease(1, 4, "op-a"), lease(2, 4, "op-b"), lease(3, 4, "op-b")]
    r = owners.ranges_from(leases, now=NOW)
    assert r is not None and r.total == 4
    assert {owners.owner(uid_in(i, 4), r) for i in range(4)} == {"op-a", "op-b"}


@pytest.mark.parametrize("name, parsed", [
    ("baton-range.8.3", (3, 8)), ("baton-range.8.8", None), ("baton-range.8", None), ("baton-member.x", None),
    ("baton-range.x.1", None), ("baton-range.8.-1", None), ("baton-search", None),
])
def test_range_lease_names_parse_back(name: str, parsed: tuple[int, int] | None) -> None:
    assert names.parse_shard_range_lease_name(name) == parsed


class _Connection:
    default_namespace = "agents"
    server = "https://127.0.0.1:6443"


def _run_list(monkeypatch: pytest.MonkeyPatch, leases: Any, **flags: Any) -> tuple[int, str, str]:
    """verbs.run_list with the plugin's API adapter (baton.cli.cluster) answered at its boundary."""
    import argparse
    import io

    from baton.cli import cluster, verbs
    table = {"kind": "Table", "columnDefinitions": [{"name": "Name"}, {"name": "Ready"}],
             "rows": [{"cells": ["a", "True"], "object": {"metadata": {"namespace": "agents", "uid": uid_in(0, 2)}}},
                      {"cells": ["b", "True"], "object": {"metadata": {"namespace": "agents", "uid": uid_in(1, 2)}}}]}
    asked: list[str | None] = []

    def list_range_leases(_: Any, *, namespace: str | None) -> Any:
        asked.append(namespace)
        if isinstance(leases, Exception):
            raise leases
        return leases
    monkeypatch.setattr(cluster, "list_table", lambda _, *, namespace: table)
    monkeypatch.setattr(cluster, "list_range_leases", list_range_leases)
    args = argparse.Namespace(verb="list", output="text", owner=True, **flags)
    out, err = io.StringIO(), io.StringIO()
    code = verbs.run_list(args, _Connection(), verbs.Io(io.StringIO(), out, err))  # type: ignore[arg-type]
    assert asked == [flags.get("operator_namespace")]
    return code, out.getvalue(), err.getvalue()


def test_list_owner_adds_the_column(monkeypatch: pytest.MonkeyPatch) -> None:
    later = 10 * 365 * 24 * 3600.0  # renewed ten years after NOW: live by the plugin's own clock too
    leases = [lease(0, 2, "op-a", renewed=later), lease(1, 2, "op-b", renewed=later)]
    code, out, _ = _run_list(monkeypatch, leases, operator_namespace="baton-system")
    assert code == 0
    assert out.splitlines() == ["NAME   READY   OWNER", "a      True    op-a", "b      True    op-b"], out


def test_list_owner_refuses_what_it_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    from baton.cli import cluster, requests
    two = [lease(0, 2, "op-a"), lease(1, 2, "other", namespace="elsewhere")]
    with pytest.raises(requests.Refused, match="several installations"):
        _run_list(monkeypatch, two)
    with pytest.raises(requests.Refused, match="pass --operator-namespace"):
        _run_list(monkeypatch, cluster.ApiException(403, "Forbidden"))
    code, out, err = _run_list(monkeypatch, [], operator_namespace="baton-system")
    assert code == 0 and "sharding is off" in err and [ln.split()[-1] for ln in out.splitlines()[1:]] == ["-", "-"]
