"""Issue 43 item 2: the operator watches the gateway replicas' registration Leases (label-selected,
system namespace); each write of one that lists runtimes in its wake-demand annotation enqueues
them at once; the demand a pass reads comes from that view, live replicas only, and only from a
replica this operator saw write (a killed replica's Lease keeps its last demand). Against the real
API server: the views' informer and the controller's trigger as the operator runs them, the Lease
written as a gateway writes it."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from kubernetes import client

from baton import clock as clock_mod
from baton import controller, sealing
from baton.cache import views as views_mod
from baton.k8s import api
from baton.model import names


def _lease(name: str, *, demand: list[str], labelled: bool = True) -> dict[str, Any]:
    labels = {names.LABEL_COMPONENT: names.COMPONENT_GATEWAY} if labelled else {"app": "other"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {names.ANN_GATEWAY_ADMIN: "127.0.0.1:9",
                                         names.ANN_WAKE_DEMAND: json.dumps(demand)}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 15}}


def test_a_runtime_newly_demanded_on_a_gateway_lease_is_enqueued_at_once(cluster: Any, namespace: str) -> None:
    coordination = client.CoordinationV1Api(cluster.api_client)

    async def run() -> None:
        views = views_mod.Views(namespaces=(namespace,), watch_configmaps=False, watch_secrets=False,
                                system_namespace=namespace)
        due: list[tuple[tuple[str, str], float]] = []
        clock = clock_mod.Clock()
        gateways = sealing.ApiGateways(namespace=namespace, clock=clock, leases=views.gateway_leases_listed)
        trigger = controller.gateway_lease_trigger(gateways.demand_sightings, clock.monotonic)
        views.gateway_leases.listeners.append(lambda old, new: due.extend(trigger(old, new)))
        watch_api = api.Api(cluster.api_client.configuration, name="watch", pool_size=views.informer_count() + 2)
        views.start(watch_api)
        try:
            async def until(check: Any, what: str, timeout: float = 20.0) -> None:
                deadline = time.monotonic() + timeout
                while not check():
                    assert time.monotonic() < deadline, f"timed out waiting for {what}"
                    await asyncio.sleep(0.05)

            await until(lambda: views.gateway_leases_listed() is not None, "the gateway Leases listed")
            assert await gateways.wake_demand(namespace="ns", runtime="rt") == ()
            # A Lease first seen with demand on it (as after an operator restart, a killed
            # replica's leftover): enqueued, but its demand not believed: no write seen yet.
            await asyncio.to_thread(coordination.create_namespaced_lease, namespace, _lease("gw-a", demand=["ns/rt"]))
            await until(lambda: due, "ns/rt enqueued")
            assert due == [(("ns", "rt"), 0.0)]
            assert await gateways.wake_demand(namespace="ns", runtime="rt") == ()
            # Its replica writes it (a renewal): the demand is believed now, and due again.
            await asyncio.to_thread(coordination.patch_namespaced_lease, "gw-a", namespace,
                                    {"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}})
            await until(lambda: len(due) >= 2, "ns/rt due again at the renewal")
            assert due == [(("ns", "rt"), 0.0)] * 2
            assert await gateways.wake_demand(namespace="ns", runtime="rt") == ("gw-a",)
            # A second runtime listed: both due.
            await asyncio.to_thread(coordination.patch_namespaced_lease, "gw-a", namespace,
                                    {"metadata": {"annotations": {names.ANN_WAKE_DEMAND: json.dumps(["ns/rt", "ns/two"])}}})
            await until(lambda: len(due) >= 4, "ns/two enqueued")
            assert due[2:] == [(("ns", "rt"), 0.0), (("ns", "two"), 0.0)]
            # A Lease without the gateway's label is not watched: its annotation wakes nothing.
            await asyncio.to_thread(coordination.create_namespaced_lease, namespace,
                                    _lease("not-a-gateway", demand=["ns/three"], labelled=False))
            await asyncio.to_thread(coordination.patch_namespaced_lease, "gw-a", namespace,
                                    {"metadata": {"annotations": {names.ANN_WAKE_DEMAND: json.dumps([])}}})
            await until(lambda: gateways.leases is not None and not any(
                json.loads(((l.get("metadata") or {}).get("annotations") or {}).get(names.ANN_WAKE_DEMAND) or "[]")
                for l in (views.gateway_leases_listed() or [])), "the demand removed from the view")
            assert len(due) == 4, "neither the Lease without the label nor an empty demand enqueues"
            assert await gateways.wake_demand(namespace="ns", runtime="rt") == ()
            assert [l["metadata"]["name"] for l in views.gateway_leases_listed() or []] == ["gw-a"]
        finally:
            await views.stop()
            await watch_api.close()

    asyncio.run(run())
