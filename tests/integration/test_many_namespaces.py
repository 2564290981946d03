"""Many watched namespaces (issue 23): each namespace opens one long watch per kind; on the one
pool that also carried every write they took all its connections, every call timed out, and no
runtime became Ready (ten namespaces, 90 s). The informers now have a pool of their own, sized
by their number."""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


@pytest.mark.parametrize("count", [10, 50])
def test_every_runtime_of_many_watched_namespaces_is_ready_within_a_minute(
        cluster: Any, operators: Start, make_namespace: Callable[[], str], count: int) -> None:
    namespaces = [make_namespace() for _ in range(count)]
    op = operators("op-a", namespaces=namespaces)
    runtimes = [Runtimes(cluster.api_client, ns) for ns in namespaces]
    t0 = time.monotonic()
    for rts in runtimes:
        rts.create(runtime_manifest("rt"))
    for rts in runtimes:
        rts.wait_ready("rt", 1, timeout=max(1.0, 60 - (time.monotonic() - t0)))
    print(f"{count} namespaces: every runtime Ready {time.monotonic() - t0:.1f}s after the first create")
    # And each hands off: writes are not starved by the watches.
    for rts in runtimes[:5]:
        rts.set_image("rt", "example/tool:2")
    for rts in runtimes[:5]:
        rts.wait_ready("rt", 2, timeout=60)
    assert op.metric("baton_api_requests_total", client="watch", verb="WATCH", resource="pods", code="200") >= count
