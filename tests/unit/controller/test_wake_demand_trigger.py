"""Issue 43: a gateway Lease's write enqueues, at once, each runtime its wake-demand annotation
lists (baton.controller.wake_demanded)."""
from __future__ import annotations

import json
from typing import Any

from baton import controller
from baton.model import names


def lease(*demand: str, raw: str | None = None, version: str = "1") -> dict[str, Any]:
    text = raw if raw is not None else json.dumps(list(demand))
    return {"metadata": {"name": "gw-a", "namespace": "baton-system", "resourceVersion": version,
                         "annotations": {names.ANN_WAKE_DEMAND: text}}}


def test_every_write_of_a_lease_listing_demand_makes_those_runtimes_due_at_once() -> None:
    assert controller.wake_demanded(None, lease("ns/a")) == [(("ns", "a"), 0.0)]
    assert controller.wake_demanded(lease("ns/a"), lease("ns/a", "other/b", version="2")) == [
        (("ns", "a"), 0.0), (("other", "b"), 0.0)]
    # A renewal with the demand unchanged: due again (a demand first seen before its replica was
    # seen writing is believed from this write on: sealing.demanding).
    assert controller.wake_demanded(lease("ns/a", version="2"), lease("ns/a", version="3")) == [(("ns", "a"), 0.0)]
    assert controller.wake_demanded(lease("ns/a", version="3"), lease("ns/a", version="3")) == [], "no write (a resync)"
    assert controller.wake_demanded(lease("ns/a"), lease(version="2")) == [], "no longer held: nothing to wake"
    assert controller.wake_demanded(lease("ns/a"), None) == [], "the Lease deleted"
    assert controller.wake_demanded(None, lease(raw="not json")) == []
