"""Issue 43: a gateway Lease's change enqueues, at once, each runtime its wake-demand annotation
lists now and did not before (baton.controller.wake_demanded)."""
from __future__ import annotations

import json
from typing import Any

from baton import controller
from baton.model import names


def lease(*demand: str, raw: str | None = None) -> dict[str, Any]:
    text = raw if raw is not None else json.dumps(list(demand))
    return {"metadata": {"name": "gw-a", "namespace": "baton-system", "annotations": {names.ANN_WAKE_DEMAND: text}}}


def test_newly_listed_runtimes_are_due_at_once_and_those_still_listed_are_not_again() -> None:
    assert controller.wake_demanded(None, lease("ns/a")) == [(("ns", "a"), 0.0)]
    assert controller.wake_demanded(lease("ns/a"), lease("ns/a", "other/b")) == [(("other", "b"), 0.0)]
    assert controller.wake_demanded(lease("ns/a", "other/b"), lease("ns/a", "other/b")) == [], "a renewal"
    assert controller.wake_demanded(lease("ns/a"), lease()) == [], "no longer held: nothing to wake"
    assert controller.wake_demanded(lease("ns/a"), None) == [], "the Lease deleted"
    assert controller.wake_demanded(None, lease(raw="not json")) == []
