"""Shared pieces of the execute tests: a clock the test moves, the views, and a pass's snapshot."""
from __future__ import annotations

from baton import clock
from baton.cache import snapshot, views
from baton.model import names

from .. import builders


def new_clock() -> clock.Manual:
    """Both clocks stand still at builders.NOW until the test moves them."""
    return clock.Manual(builders.NOW)


def new_views() -> views.Views:
    return views.Views(namespaces=(builders.NS,), watch_configmaps=False, watch_secrets=False)


def snap(*, lease: dict[str, object] | None = None) -> snapshot.Snapshot:
    """A just-applied runtime's snapshot (no pods, no Lease unless given)."""
    runtime = {"kind": "ToolRuntime", "metadata": {"namespace": builders.NS, "name": builders.RT, "uid": builders.RT_UID,
                                                   "resourceVersion": "10", "finalizers": []}}
    return snapshot.Snapshot(observed=builders.fresh(), runtime=runtime, pods=[], lease=lease)


def lease_object(*, holder: str, token: int, rv: str = "20") -> dict[str, object]:
    return {"kind": "Lease", "metadata": {"namespace": builders.NS, "name": names.lease_name(builders.RT),
                                          "uid": "lease-uid", "resourceVersion": rv,
                                          "labels": {"baton.dev/runtime": builders.RT}},
            "spec": {"holderIdentity": holder, "leaseTransitions": token, "leaseDurationSeconds": 15}}


def stored_runtime(*, uid: str, token: int) -> dict[str, object]:
    """The runtime as a GET returns it, with the fencing token its status carries."""
    return {"kind": "ToolRuntime", "metadata": {"namespace": builders.NS, "name": builders.RT, "uid": uid,
                                                "resourceVersion": "30"},
            "status": {"fencingToken": token}}
