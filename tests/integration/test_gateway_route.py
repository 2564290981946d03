"""The runtime's Service routed to the gateway (issue 24 item 2), operator and gateway as real
processes: with spec.service.gateway true the Service loses its selector and Baton keeps an
EndpointSlice listing the Ready gateway pods at their calls port; a call through that address
reaches the tool through the gateway; a gateway pod going away leaves the slice; turning the
field off brings the selector back and removes the slice.

Beside the local plane a gateway replica is a process on loopback, and an EndpointSlice cannot
hold a loopback address (the API server refuses it). So each replica gets a stand-in pod on
kwok-a (a 192.0.2.x address, listed, never dialled) labelled as the chart labels gateway pods,
whose container port "calls" is the process's port (both replicas listen on the same port, on
127.0.0.1 and 127.0.0.2, as the chart's replicas share theirs); the test plays kube-proxy: it
sends the call for a slice endpoint to the loopback address of the replica that pod stands for,
at the slice's port, with the Service's DNS name as Host.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
from kubernetes import client

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, ToolFleet, call, rpc
from harness.kwok import pod_manifest
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")
SLICE_NAME = "tool.baton-gateway"


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


def gateway_pod(core: client.CoreV1Api, namespace: str, name: str, gw: GatewayProcess, address: str) -> dict[str, Any]:
    """A stand-in pod for gateway replica `gw`: labelled as the chart's gateway pods, its port
    "calls" the process's port. On kwok-a: Ready at once, a 192.0.2.x IP that nobody dials."""
    m = pod_manifest(name, labels={"baton.dev/component": "gateway"})
    m["spec"]["containers"][0]["ports"] = [{"name": "calls", "containerPort": gw.port, "protocol": "TCP"}]
    core.create_namespaced_pod(namespace, m)
    pod = wait_for(lambda: (lambda p: p if p.status.pod_ip and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) else None)(
        core.read_namespaced_pod(name, namespace)), timeout=30, what=f"stand-in gateway pod {name} Ready")
    return {"name": name, "uid": pod.metadata.uid, "ip": pod.status.pod_ip, "gw": gw, "address": address}


def slices(disc: client.DiscoveryV1Api, namespace: str) -> list[Any]:
    return disc.list_namespaced_endpoint_slice(namespace, label_selector="kubernetes.io/service-name=tool").items


def ours(disc: client.DiscoveryV1Api, namespace: str) -> Any | None:
    return next((s for s in slices(disc, namespace) if s.metadata.name == SLICE_NAME), None)


def endpoints(eps: Any) -> list[tuple[str, str]]:
    return sorted((e.addresses[0], e.target_ref.uid) for e in eps.endpoints or [])


def test_gateway_routing_on_follows_the_gateway_pods_and_off_restores_the_selector(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet, cluster: Any) -> None:
    core, disc = client.CoreV1Api(cluster.api_client), client.DiscoveryV1Api(cluster.api_client)
    gw_a = gateways("gw-a")
    gw_b = gateways("gw-b", env={"BATON_GATEWAY_BIND": f"127.0.0.2:{gw_a.port}"})
    gw_b.port = gw_a.port
    pod_a = gateway_pod(core, namespace, "gateway-a", gw_a, "127.0.0.1")
    pod_b = gateway_pod(core, namespace, "gateway-b", gw_b, "127.0.0.2")
    by_ip = {pod_a["ip"]: pod_a, pod_b["ip"]: pod_b}
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})

    m = runtime_manifest("tool", service=True, loopback=True)
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"name": "mcp", "port": 80, "targetPort": "http"}]}
    rts.create(m)
    rts.wait_ready("tool", 1)
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    svc = wait_for(lambda: core.read_namespaced_service("tool", namespace), timeout=30, what="the Service",
                   ignore=(client.ApiException,))
    assert svc.spec.selector == {"baton.dev/runtime": "tool", "baton.dev/serving": "true"}
    assert ours(disc, namespace) is None

    # On: the slice lists both gateway pods at their calls port, then the selector goes.
    rts.patch("tool", {"spec": {"service": {"gateway": True}}})
    want = sorted((p["ip"], p["uid"]) for p in (pod_a, pod_b))
    eps = wait_for(lambda: (lambda s: s if s is not None and endpoints(s) == want else None)(ours(disc, namespace)),
                   timeout=60, what="Baton's EndpointSlice listing both gateway pods")
    svc = wait_for(lambda: (lambda s: s if not s.spec.selector else None)(core.read_namespaced_service("tool", namespace)),
                   timeout=30, what="the Service without a selector")
    print(f"slice {eps.metadata.name}: {endpoints(eps)} ports {[(p.name, p.port) for p in eps.ports]}; "
          f"Service ports {[(p.name, p.port, p.target_port) for p in svc.spec.ports]}")
    assert eps.metadata.labels["endpointslice.kubernetes.io/managed-by"] == "operator.baton.dev"
    assert [(o.kind, o.name, o.controller) for o in eps.metadata.owner_references] == [("ToolRuntime", "tool", True)]
    assert eps.address_type == "IPv4"
    assert all(e.conditions.ready for e in eps.endpoints)
    assert [(p.name, p.port, p.protocol) for p in eps.ports] == [("mcp", gw_a.port, "TCP")]
    assert [(p.name, p.port, str(p.target_port)) for p in svc.spec.ports] == [("mcp", 80, str(gw_a.port))]

    # A call through the slice's address (kube-proxy's part played here: the endpoint's process
    # on loopback) with the Service's DNS name reaches the tool through the gateway.
    tool = fleet.of(1)
    assert tool is not None
    before = tool.count()
    for e in eps.endpoints:
        target = by_ip[e.addresses[0]]
        reply = call(eps.ports[0].port, f"tool.{namespace}.svc.cluster.local", body=rpc(rid="via-slice"), timeout=30,
                     address=target["address"])
        print(f"call via slice endpoint {e.addresses[0]}:{eps.ports[0].port} ({target['name']}, played by "
              f"{target['address']}): {reply.status} g{reply.generation} {reply.json()}")
        assert reply.status == 200 and reply.generation == 1 and reply.json()["result"]["gen"] == 1
        assert reply.json()["id"] == "via-slice"
    assert tool.count() == before + 2, "each call reached the tool once"

    # A gateway replica goes away: the slice follows, the Service stays selector-less.
    core.delete_namespaced_pod("gateway-b", namespace, grace_period_seconds=0)
    wait_for(lambda: (lambda s: s is not None and endpoints(s) == [(pod_a["ip"], pod_a["uid"])])(ours(disc, namespace)),
             timeout=60, what="the slice without gateway-b")
    assert not core.read_namespaced_service("tool", namespace).spec.selector
    print("gateway-b deleted: the slice lists", endpoints(ours(disc, namespace)))

    # Off: the selector comes back (direct to the pod) and Baton's slice is deleted.
    rts.patch("tool", {"spec": {"service": {"gateway": False}}})
    svc = wait_for(lambda: (lambda s: s if s.spec.selector else None)(core.read_namespaced_service("tool", namespace)),
                   timeout=60, what="the selector back")
    assert svc.spec.selector == {"baton.dev/runtime": "tool", "baton.dev/serving": "true"}
    assert [(p.name, p.port, str(p.target_port)) for p in svc.spec.ports] == [("mcp", 80, "http")]
    wait_for(lambda: ours(disc, namespace) is None, timeout=60, what="Baton's EndpointSlice deleted")
    print("gateway off: selector", svc.spec.selector, "; slices left:", [s.metadata.name for s in slices(disc, namespace)])
    core.delete_namespaced_pod("gateway-a", namespace, grace_period_seconds=0)


def test_a_gateway_replica_that_does_not_answer_the_seal_leaves_the_slice_while_the_retire_waits(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet, cluster: Any) -> None:
    """gw-b paused (SIGSTOP) just before a handoff: the seal cannot reach it, so while the retire
    waits for it (within drainSeconds, until its Lease lapses) Baton takes its pod out of the
    runtime's EndpointSlice; after the handoff the slice lists both again (both pods are Ready)."""
    import signal
    import threading
    core, disc = client.CoreV1Api(cluster.api_client), client.DiscoveryV1Api(cluster.api_client)
    gw_a = gateways("gw-a")
    gw_b = gateways("gw-b", env={"BATON_GATEWAY_BIND": f"127.0.0.2:{gw_a.port}"})
    gw_b.port = gw_a.port  # one calls port, as the chart's replicas share theirs
    # Named as the chart names them: the replica's Lease is baton-gateway.<pod name>.
    pod_a = gateway_pod(core, namespace, "gw-a", gw_a, "127.0.0.1")
    pod_b = gateway_pod(core, namespace, "gw-b", gw_b, "127.0.0.2")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    # The retire waits for gw-b's seal until drainSeconds: past its Lease (6 s) and far past the
    # ~2 s in which its pod leaves the slice (the test's window to see it out); 30 s added nothing.
    m = runtime_manifest("tool", service=True, loopback=True, budgets={"drainSeconds": 12})
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    rts.create(m)
    rts.wait_ready("tool", 1)
    both = sorted((p["ip"], p["uid"]) for p in (pod_a, pod_b))
    wait_for(lambda: (lambda s: s is not None and endpoints(s) == both)(ours(disc, namespace)),
             timeout=60, what="the slice listing both gateway pods")

    seen: list[tuple[float, list[tuple[str, str]]]] = []
    stop = threading.Event()

    def watch_slice() -> None:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            s = ours(disc, namespace)
            seen.append((time.monotonic(), endpoints(s) if s is not None else []))
            stop.wait(0.1)

    watcher = threading.Thread(target=watch_slice, daemon=True)
    watcher.start()
    gw_b.signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rts.set_image("tool", "example/tool:2")
        rts.wait_ready("tool", 2, timeout=90)
        wait_for(lambda: (lambda s: s is not None and endpoints(s) == both)(ours(disc, namespace)),
                 timeout=60, what="both gateway pods listed again after the handoff")
    finally:
        gw_b.signal(signal.SIGCONT)
        stop.set()
        watcher.join(10)
    only_a = [t - t0 for t, e in seen if e == [(pod_a["ip"], pod_a["uid"])]]
    history = rts.status("tool").get("history") or []
    print(f"slice without gw-b for {len(only_a)} of {len(seen)} looks, from {min(only_a, default=-1):.2f}s to "
          f"{max(only_a, default=-1):.2f}s after the change; never empty: {all(e for _, e in seen)}; "
          f"g1's history: {history[-1] if history else None}")
    assert only_a, "gw-b was never taken out of the slice while the seal waited for it"
    assert all(e for _, e in seen), "the slice was emptied"
