"""The tool-pod NetworkPolicy (BATON_ISOLATE_TOOL_PODS; docs/gateway.md, "Closing the direct
path"), computed by the pure core (manifests.build_tool_pod_policy, steady.service_actions), as
tables: made exactly while the Service routes to the gateway, in order with the Service's writes."""

from __future__ import annotations

import pytest

from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.lifecycle import steady
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as sp
from .. import builders as b

ISO = obs.ToolPodIsolation(system_namespace="baton-system",
                           operator_pod_labels=(("app.kubernetes.io/name", "baton"), ("app.kubernetes.io/instance", "rel")))
GW = (obs.GatewayEndpoint(pod="gw-1", namespace="baton-system", uid="gw-uid-1", ip="10.0.0.1", port=8000),)
POLICY = names.tool_pod_policy_name(b.RT)
WANT = mf.build_tool_pod_policy(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, isolation=ISO)


def test_the_policy_selects_the_runtimes_pods_and_admits_only_the_gateway_and_the_operator() -> None:
    def peer(pods: dict[str, str]) -> dict[str, object]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "baton-system"}},
                "podSelector": {"matchLabels": pods}}
    assert WANT["spec"] == {
        "podSelector": {"matchLabels": {names.LABEL_RUNTIME: b.RT}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [peer({names.LABEL_COMPONENT: names.COMPONENT_GATEWAY}),
                              peer({"app.kubernetes.io/name": "baton", "app.kubernetes.io/instance": "rel"})]}],
    }
    assert WANT["metadata"]["name"] == POLICY and WANT["metadata"]["namespace"] == b.NS
    assert WANT["metadata"]["labels"][names.LABEL_RUNTIME] == b.RT
    assert WANT["metadata"]["ownerReferences"] == [mf.owner_reference(name=b.RT, uid=b.RT_UID)]


def svc(*, routed: bool) -> obs.ServiceInfo:
    return obs.ServiceInfo(exists=True, uid="svc-uid", selector={} if routed else mf.service_selector(b.RT),
                           ports=(sp.ServicePort(port=80, target_port=8000 if routed else 8080, protocol="TCP"),),
                           session_affinity="ClientIP")


def have(*, shape: str = mf.policy_shape(WANT), owned: bool = True) -> obs.NetworkPolicyInfo:
    return obs.NetworkPolicyInfo(exists=True, owned=owned, uid="np-uid", shape=shape)


def observed(*, gateway: bool = True, routed: bool = True, endpoints: tuple[obs.GatewayEndpoint, ...] = GW,
             iso: obs.ToolPodIsolation | None = ISO, policy: obs.NetworkPolicyInfo | None = None,
             known: bool = True, gw_known: bool = True, service: bool = True) -> obs.Observed:
    slice_ = mf.build_gateway_slice(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, service=b.SERVICE, endpoints=endpoints)
    slices = (obs.SliceInfo(name=names.gateway_slice_name(b.RT), uid="slice-uid", manager=names.SLICE_MANAGER, owned=True,
                            shape=mf.slice_shape(slice_)),) if routed and endpoints else ()
    return b.observed(spec_=b.spec(service=service, gateway=gateway), lease=b.lease_free(),
                      service=svc(routed=routed), gateway_endpoints=endpoints, gateway_endpoints_known=gw_known,
                      slices=slices, tool_pod_isolation=iso, network_policy=policy or obs.NetworkPolicyInfo(),
                      network_policy_known=known)


def policy_actions(o: obs.Observed) -> list[str]:
    out = []
    for a in steady.service_actions(o):
        match a:
            case p.EnsureNetworkPolicy(manifest=m, uid=uid):
                assert m == WANT
                out.append(f"EnsureNetworkPolicy(uid={uid})")
            case p.DeleteNetworkPolicy(name=n, uid=uid):
                out.append(f"DeleteNetworkPolicy({n}, {uid})")
            case _:
                out.append(type(a).__name__)
    return out


CASES = [
    ("routed, none yet: made", observed(), ["EnsureNetworkPolicy(uid=None)"]),
    ("routed, as wanted: nothing", observed(policy=have()), []),
    ("routed, edited: patched by UID", observed(policy=have(shape="{}")), ["EnsureNetworkPolicy(uid=np-uid)"]),
    ("routed, a foreign policy of that name: never touched", observed(policy=have(shape="{}", owned=False)), []),
    ("setting off: nothing, even with one there", observed(iso=None, policy=have(shape="{}")), []),
    ("policy view not listed: nothing", observed(known=False), []),
    ("gateway pods' view not listed: left as it stands", observed(gw_known=False, policy=have()), []),
    ("gateway off: deleted before the selector comes back",
     observed(gateway=False, routed=True, policy=have()),
     [f"DeleteNetworkPolicy({POLICY}, np-uid)", "EnsureService", "DeleteEndpointSlice"]),
    ("gateway off, none there: nothing of ours", observed(gateway=False, routed=False), []),
    ("no gateway replica Ready: the Service selects the pod, the policy goes first",
     observed(endpoints=(), routed=True, policy=have()),
     [f"DeleteNetworkPolicy({POLICY}, np-uid)", "EnsureService"]),
    ("turned on: slice, Service, then the policy last",
     observed(routed=False),
     ["EnsureGatewaySlice", "EnsureService", "EnsureNetworkPolicy(uid=None)"]),
    ("spec.service dropped: the policy goes too", observed(service=False, gateway=False, policy=have()),
     [f"DeleteNetworkPolicy({POLICY}, np-uid)", "DeleteService", "DeleteEndpointSlice"]),
]


@pytest.mark.parametrize("o,expected", [(o, e) for _, o, e in CASES], ids=[n for n, _, _ in CASES])
def test_policy_actions(o: obs.Observed, expected: list[str]) -> None:
    assert policy_actions(o) == expected
