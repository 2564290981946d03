"""Many watched namespaces (issue 23): each namespace opens one long watch per kind; on the one
pool that also carried every write they took all its connections, every call timed out, and no
runtime became Ready (ten namespaces, 90 s). The informers now have a pool of their own, sized
by their number."""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


@pytest.fixture
def make_namespaces(cluster: Any) -> Iterator[Callable[[int], list[str]]]:
    core = client.CoreV1Api(cluster.api_client)
    custom = client.CustomObjectsApi(cluster.api_client)
    made: list[str] = []

    def make(n: int) -> list[str]:
        tag = uuid.uuid4().hex[:6]
        for i in range(n):
            name = f"baton-many-{tag}-{i}"
            core.create_namespace({"metadata": {"name": name, "labels": {"baton.dev/test": "true"}}})
            made.append(name)
        return list(made)

    yield make
    for name in made:
        try:
            for rt in custom.list_namespaced_custom_object(GROUP, VERSION, name, PLURAL)["items"]:
                custom.patch_namespaced_custom_object(GROUP, VERSION, name, PLURAL, rt["metadata"]["name"],
                                                      {"metadata": {"finalizers": None}})
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.mark.parametrize("count", [10, 50])
def test_every_runtime_of_many_watched_namespaces_is_ready_within_a_minute(
        cluster: Any, operators: Start, make_namespaces: Callable[[int], list[str]], count: int) -> None:
    namespaces = make_namespaces(count)
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
