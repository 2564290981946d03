"""The direct path to the tool pods closed (issue 41 deliverable 9, review design concern 9;
docs/gateway.md, "Closing the direct path"), operator as a real process on the local plane.

With BATON_ISOLATE_TOOL_PODS a runtime routed through the gateway gets a NetworkPolicy in its
namespace, owned by the ToolRuntime, selecting its pods and admitting ingress only from the
gateway's pods and the operator's (drain probes) in the system namespace; an edit of it is put
back; turning `gateway` off removes it; a runtime without the gateway has none; with the setting
off none is made. What the API server stores is asserted: the local plane runs no CNI, so the
enforcement of the policy itself is not tested here.

No gateway process is needed: the operator routes a Service to the gateway when a Ready pod
labelled as the chart's gateway pods (baton.dev/component=gateway, a port "calls") is in the
system namespace, here a kwok stand-in that nobody dials.
"""
from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from dev.wait import wait_for
from harness.kwok import pod_manifest
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")

POLICY = "tool.baton-gateway-only"
OPERATOR_LABELS = {"app.kubernetes.io/name": "baton", "app.kubernetes.io/instance": "rel"}


def isolation_env(namespace: str) -> dict[str, str]:
    return {"BATON_SYSTEM_NAMESPACE": namespace, "BATON_ISOLATE_TOOL_PODS": "true",
            "BATON_OPERATOR_POD_LABELS": ",".join(f"{k}={v}" for k, v in OPERATOR_LABELS.items())}


def stand_in_gateway_pod(core: client.CoreV1Api, namespace: str) -> None:
    m = pod_manifest("gateway-a", labels={"baton.dev/component": "gateway"})
    m["spec"]["containers"][0]["ports"] = [{"name": "calls", "containerPort": 8000, "protocol": "TCP"}]
    core.create_namespaced_pod(namespace, m)
    wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                         for c in core.read_namespaced_pod("gateway-a", namespace).status.conditions or []),
             timeout=30, what="stand-in gateway pod Ready")


def gateway_runtime(name: str, *, gateway: bool) -> dict[str, Any]:
    m = runtime_manifest(name, service=True)
    m["spec"]["service"]["gateway"] = gateway
    return m


def policy(cluster: Any, namespace: str, name: str = POLICY) -> dict[str, Any] | None:
    try:
        obj = client.NetworkingV1Api(cluster.api_client).read_namespaced_network_policy(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    found: dict[str, Any] = cluster.api_client.sanitize_for_serialization(obj)
    return found


def policies(cluster: Any, namespace: str) -> list[str]:
    items = client.NetworkingV1Api(cluster.api_client).list_namespaced_network_policy(namespace).items
    return sorted(p.metadata.name for p in items)


def routed_to_gateway(cluster: Any, namespace: str, service: str) -> bool:
    svc = client.CoreV1Api(cluster.api_client).read_namespaced_service(service, namespace)
    return not svc.spec.selector


def test_a_gateway_routed_runtime_admits_only_the_gateway_and_the_operator(
        operators: Any, rts: Runtimes, namespace: str, cluster: Any) -> None:
    core = client.CoreV1Api(cluster.api_client)
    net = client.NetworkingV1Api(cluster.api_client)
    stand_in_gateway_pod(core, namespace)
    operators("op-a", env=isolation_env(namespace))

    rts.create(gateway_runtime("tool", gateway=True))
    rts.create(gateway_runtime("plain", gateway=False))
    rts.wait_ready("tool", 1)
    rts.wait_ready("plain", 1)
    uid = rts.get("tool")["metadata"]["uid"]

    found = wait_for(lambda: policy(cluster, namespace), timeout=30, what="the tool's NetworkPolicy")

    def peer(pods: dict[str, str]) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "podSelector": {"matchLabels": pods}}
    assert found["spec"] == {
        "podSelector": {"matchLabels": {"baton.dev/runtime": "tool"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [peer({"baton.dev/component": "gateway"}), peer(OPERATOR_LABELS)]}],
    }
    assert found["metadata"]["ownerReferences"] == [{
        "apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "name": "tool", "uid": uid,
        "controller": True, "blockOwnerDeletion": True}]
    assert found["metadata"]["labels"]["baton.dev/runtime"] == "tool"
    assert routed_to_gateway(cluster, namespace, "tool")

    # The runtime without the gateway: its Service selects its pod, and no policy shuts it.
    wait_for(lambda: not routed_to_gateway(cluster, namespace, "plain") or None, timeout=30, what="plain's Service")
    assert policies(cluster, namespace) == [POLICY]

    # An edit of the policy (someone opens it to all) is put back.
    net.patch_namespaced_network_policy(POLICY, namespace, {"spec": {"ingress": [{}]}})
    wait_for(lambda: (p := policy(cluster, namespace)) is not None and p["spec"] == found["spec"],
             timeout=30, what="the policy put back")

    # `gateway` turned off: the Service selects the pod again, and the policy goes.
    rts.patch("tool", {"spec": {"service": {"gateway": False}}})
    wait_for(lambda: policy(cluster, namespace) is None, timeout=30, what="the policy removed")
    assert not routed_to_gateway(cluster, namespace, "tool")
    assert policies(cluster, namespace) == []
    # And on again: back.
    rts.patch("tool", {"spec": {"service": {"gateway": True}}})
    again = wait_for(lambda: policy(cluster, namespace), timeout=30, what="the policy made again")
    assert again["spec"] == found["spec"]


def test_with_the_setting_off_no_policy_is_made(operators: Any, rts: Runtimes, namespace: str, cluster: Any) -> None:
    core = client.CoreV1Api(cluster.api_client)
    stand_in_gateway_pod(core, namespace)
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.create(gateway_runtime("tool", gateway=True))
    rts.wait_ready("tool", 1)
    # Routed to the gateway (the point where the setting on makes the policy), and still none.
    wait_for(lambda: routed_to_gateway(cluster, namespace, "tool") or None, timeout=30, what="routed to the gateway")
    assert policies(cluster, namespace) == []
