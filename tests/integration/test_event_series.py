"""Events against the real API server: microsecond eventTime, and a repeated event (same runtime,
type, reason and message) is one Event object whose count grows, as client-go's correlator makes
it; a different message is an Event of its own."""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from kubernetes import client as k8s

from baton.execute import events as sender_mod
from baton.k8s import api, client
from harness.cluster import Cluster

MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _events(core: k8s.CoreV1Api, namespace: str) -> list[dict[str, Any]]:
    # Raw JSON: the client's datetime parsing would hide how many digits the server stored.
    resp = core.list_namespaced_event(namespace, field_selector="involvedObject.name=search",
                                      _preload_content=False)
    return list(json.loads(resp.data)["items"])


def test_a_repeated_event_is_one_object_with_a_count_and_microsecond_times(
        cluster: Cluster, namespace: str) -> None:
    event = dict(namespace=namespace, runtime="search", runtime_uid="uid-search-1", type_="Warning",
                 reason="ConnectTimeout", identity="baton-test")

    async def post() -> None:
        client._WORK = api.Api(cluster.api_client.configuration, name="work", pool_size=2)
        try:
            sender = sender_mod.EventSender()
            for _ in range(3):
                sender.post(**event, message="g2 not Ready within 30s")
            sender.post(**event, message="g3 not Ready within 30s")
            await sender.flush(timeout=60)
            assert not sender.sending()
        finally:
            await client.stop()

    asyncio.run(post())
    items = _events(k8s.CoreV1Api(cluster.api_client), namespace)
    by_message = {e["message"]: e for e in items}
    assert sorted(by_message) == ["g2 not Ready within 30s", "g3 not Ready within 30s"], items
    assert len(items) == 2, [e["metadata"]["name"] for e in items]
    repeated, single = by_message["g2 not Ready within 30s"], by_message["g3 not Ready within 30s"]
    print("repeated:", {k: repeated.get(k) for k in ("count", "series", "eventTime", "firstTimestamp", "lastTimestamp")})
    assert repeated["count"] == 3 and repeated["series"]["count"] == 3, repeated
    assert single["count"] == 1 and "series" not in single, single
    for e in (repeated, single):
        assert MICRO.match(e["eventTime"]), e["eventTime"]
        assert e["reportingComponent"] == "baton.dev/operator" and e["action"], e
    assert MICRO.match(repeated["series"]["lastObservedTime"]), repeated["series"]
    assert repeated["series"]["lastObservedTime"] >= repeated["eventTime"]
    # Each event has its own instant: the second message was seen after the first one started.
    assert single["eventTime"] > repeated["eventTime"]
