"""The runtime's Service routed to the gateway (spec.service.gateway): the desired Service and
EndpointSlice, computed by the pure core (manifests, steady.service_actions, decide), as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from baton.lifecycle import dispatch
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.lifecycle import steady
from baton.model import names, shardhash
from baton.model import observed as obs
from baton.model import spec as sp
from .. import builders as b

GW_NS = "baton-system"
SLICE = names.gateway_slice_name(b.RT)


def gw(i: int, *, ip: str | None = None, port: int = 8000, node: str | None = "n1") -> obs.GatewayEndpoint:
    return obs.GatewayEndpoint(pod=f"gw-{i}", namespace=GW_NS, uid=f"gw-uid-{i}", ip=ip or f"10.0.0.{i}", port=port, node=node)


def svc(*, selector: bool, target: int = 8080, exists: bool = True) -> obs.ServiceInfo:
    return obs.ServiceInfo(exists=exists, uid="svc-uid", selector=mf.service_selector(b.RT) if selector else {},
                           ports=(sp.ServicePort(port=80, target_port=target, protocol="TCP"),), session_affinity="ClientIP")


def ours(endpoints: tuple[obs.GatewayEndpoint, ...]) -> obs.SliceInfo:
    manifest = mf.build_gateway_slice(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, service=b.SERVICE,
                                      endpoints=endpoints)
    return obs.SliceInfo(name=SLICE, uid="slice-uid", manager=names.SLICE_MANAGER, owned=True,
                         shape=mf.slice_shape(manifest))


CONTROLLER_SLICE = obs.SliceInfo(name=f"{b.RT}-x7k2p", uid="ctl-uid", manager=names.SLICE_CONTROLLER, owned=False,
                                 shape="{}")


def observed(*, gateway: bool, service: obs.ServiceInfo, endpoints: tuple[obs.GatewayEndpoint, ...] = (),
             known: bool = True, slices: tuple[obs.SliceInfo, ...] = (), **extra: Any) -> obs.Observed:
    return b.observed(spec_=b.spec(service=True, gateway=gateway), lease=b.lease_free(), service=service,
                      gateway_endpoints=endpoints, gateway_endpoints_known=known, slices=slices, **extra)


def kinds(actions: tuple[p.Action, ...]) -> list[str]:
    out = []
    for a in actions:
        match a:
            case p.EnsureService(manifest=m):
                out.append(f"EnsureService(selector={'selector' in m['spec']}, "
                           f"targetPort={[pt['targetPort'] for pt in m['spec']['ports']]})")
            case p.EnsureGatewaySlice(manifest=m, uid=uid):
                out.append(f"EnsureGatewaySlice({[e['addresses'][0] for e in m['endpoints']]}, "
                           f"ports={[pt['port'] for pt in m['ports']]}, uid={uid})")
            case p.DeleteEndpointSlice(name=n, uid=uid):
                out.append(f"DeleteEndpointSlice({n}, {uid})")
            case p.DeleteService():
                out.append("DeleteService")
            case _:
                out.append(type(a).__name__)
    return out


ONE, TWO = (gw(1),), (gw(1), gw(2))
CASES = [
    # (name, observed, expected actions in order)
    ("off: direct Service, nothing to do", observed(gateway=False, service=svc(selector=True)), []),
    ("on: slice first, then the selector goes", observed(gateway=True, service=svc(selector=True), endpoints=TWO),
     ["EnsureGatewaySlice(['10.0.0.1', '10.0.0.2'], ports=[8000], uid=None)", "EnsureService(selector=False, targetPort=[8000])"]),
    ("on, routed, slice current: nothing", observed(gateway=True, service=svc(selector=False, target=8000), endpoints=TWO,
                                                    slices=(ours(TWO),)), []),
    ("on: a gateway pod leaves: the slice follows, the Service stays",
     observed(gateway=True, service=svc(selector=False, target=8000), endpoints=ONE, slices=(ours(TWO),)),
     ["EnsureGatewaySlice(['10.0.0.1'], ports=[8000], uid=slice-uid)"]),
    ("on: a gateway pod joins", observed(gateway=True, service=svc(selector=False, target=8000), endpoints=TWO,
                                         slices=(ours(ONE),)),
     ["EnsureGatewaySlice(['10.0.0.1', '10.0.0.2'], ports=[8000], uid=slice-uid)"]),
    ("on: the controller's slice left from the selector is removed once the selector is gone",
     observed(gateway=True, service=svc(selector=False, target=8000), endpoints=ONE, slices=(ours(ONE), CONTROLLER_SLICE)),
     [f"DeleteEndpointSlice({b.RT}-x7k2p, ctl-uid)"]),
    ("on: the controller's slice waits while the selector is still there",
     observed(gateway=True, service=svc(selector=True), endpoints=ONE, slices=(ours(ONE), CONTROLLER_SLICE)),
     ["EnsureService(selector=False, targetPort=[8000])"]),
    ("off again: the selector comes back first, then Baton's slice goes",
     observed(gateway=False, service=svc(selector=False, target=8000), slices=(ours(ONE), CONTROLLER_SLICE)),
     ["EnsureService(selector=True, targetPort=[8080])", f"DeleteEndpointSlice({SLICE}, slice-uid)"]),
    ("on, no gateway pod Ready: direct (clients keep reaching the tool)",
     observed(gateway=True, service=svc(selector=False, target=8000), endpoints=(), slices=(ours(ONE),)),
     ["EnsureService(selector=True, targetPort=[8080])", f"DeleteEndpointSlice({SLICE}, slice-uid)"]),
    ("on, gateway pods' view not listed, routed: left as it stands",
     observed(gateway=True, service=svc(selector=False, target=8000), endpoints=(), known=False, slices=(ours(ONE),)), []),
    ("on, gateway pods' view not listed, direct: stays direct",
     observed(gateway=True, service=svc(selector=True), endpoints=TWO, known=False), []),
    ("on, no Service yet: slice then Service", observed(gateway=True, service=obs.ServiceInfo(), endpoints=ONE),
     ["EnsureGatewaySlice(['10.0.0.1'], ports=[8000], uid=None)", "EnsureService(selector=False, targetPort=[8000])"]),
    ("spec.service removed: Service and Baton's slice deleted",
     b.observed(spec_=b.spec(), lease=b.lease_free(), service=svc(selector=False), slices=(ours(ONE),)),
     ["DeleteService", f"DeleteEndpointSlice({SLICE}, slice-uid)"]),
    ("a foreign Service: nothing touched, its slices neither",
     observed(gateway=True, service=svc(selector=True).model_copy(update={"owned": False}), endpoints=ONE,
              slices=(CONTROLLER_SLICE,)), []),
    ("a foreign slice with Baton's name is never written or deleted",
     observed(gateway=False, service=svc(selector=True),
              slices=(obs.SliceInfo(name=SLICE, uid="other", manager="someone", owned=False),)), []),
]


@pytest.mark.parametrize("o,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_service_actions(o: obs.Observed, expected: list[str]) -> None:
    assert kinds(steady.service_actions(o)) == expected


@pytest.mark.parametrize("o,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_carries_them_idle(o: obs.Observed, expected: list[str]) -> None:
    """decide() on an idle runtime sends exactly these writes (no Lease needed)."""
    plan = dispatch.decide(o, b.NOW)
    routing = tuple(a for a in plan.actions if isinstance(a, (p.EnsureService, p.DeleteService, p.EnsureGatewaySlice,
                                                               p.DeleteEndpointSlice)))
    assert kinds(routing) == expected


@pytest.mark.parametrize("endpoints,family,port,listed", [
    ((), "IPv4", None, []),
    ((gw(2), gw(1)), "IPv4", 8000, ["10.0.0.1", "10.0.0.2"]),
    ((gw(1, port=9000), gw(2), gw(3)), "IPv4", 8000, ["10.0.0.2", "10.0.0.3"]),  # the port most use
    ((gw(1, port=9000), gw(2)), "IPv4", 8000, ["10.0.0.2"]),  # a tie: the lowest
    ((gw(1, ip="fd00::1"), gw(2)), "IPv4", 8000, ["10.0.0.2"]),  # one family per slice: IPv4 first
    ((gw(1, ip="fd00::2"), gw(2, ip="fd00::1")), "IPv6", 8000, ["fd00::1", "fd00::2"]),
])
def test_gateway_endpoints_choose_one_family_and_port(endpoints: tuple[obs.GatewayEndpoint, ...], family: str,
                                                      port: int | None, listed: list[str]) -> None:
    got_family, got_port, got = mf.gateway_endpoints(endpoints)
    assert (got_family, got_port, [e.ip for e in got]) == (family, port, listed)


def test_the_slice_is_labelled_for_the_service_and_owned_by_the_runtime() -> None:
    service = sp.ServiceSpec(ports=(sp.ServicePort(name="http", port=80, target_port=8080),
                                    sp.ServicePort(name="sse", port=81, target_port="sse")), gateway=True)
    m = mf.build_gateway_slice(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, service=service, endpoints=(gw(1),))
    assert m["metadata"]["name"] == SLICE and m["metadata"]["namespace"] == b.NS
    assert m["metadata"]["labels"] == {names.LABEL_RUNTIME: b.RT, "kubernetes.io/service-name": b.RT,
                                       "endpointslice.kubernetes.io/managed-by": names.SLICE_MANAGER,
                                       names.LABEL_HASH_BUCKET: shardhash.hash_bucket(b.RT_UID)}
    [owner] = m["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ToolRuntime", b.RT_UID, True)
    # Each Service port by its name, at the gateway's calls port.
    assert m["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}, {"name": "sse", "port": 8000, "protocol": "TCP"}]
    assert m["endpoints"] == [{"addresses": ["10.0.0.1"], "conditions": {"ready": True, "serving": True, "terminating": False},
                               "targetRef": {"kind": "Pod", "namespace": GW_NS, "name": "gw-1", "uid": "gw-uid-1"},
                               "nodeName": "n1"}]
    routed = mf.build_service(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, service=service, gateway_port=8000)
    assert "selector" not in routed["spec"]
    assert [pt["targetPort"] for pt in routed["spec"]["ports"]] == [8000, 8000]
    direct = mf.build_service(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID,
                              service=service.model_copy(update={"gateway": False}))
    assert direct["spec"]["selector"] == mf.service_selector(b.RT)
    assert [pt["targetPort"] for pt in direct["spec"]["ports"]] == [8080, "sse"]


def test_slice_shape_ignores_what_the_api_server_adds() -> None:
    m = mf.build_gateway_slice(namespace=b.NS, runtime=b.RT, runtime_uid=b.RT_UID, service=b.SERVICE, endpoints=(gw(1),))
    stored = json.loads(json.dumps(m))
    stored["metadata"].update({"uid": "u", "resourceVersion": "7", "generation": 2})
    stored["endpoints"][0]["zone"] = "z1"
    assert mf.slice_shape(stored) == mf.slice_shape(m)
    stored["endpoints"][0]["addresses"] = ["10.0.0.9"]
    assert mf.slice_shape(stored) != mf.slice_shape(m)


def test_deleting_runtime_removes_its_slice() -> None:
    from baton.lifecycle import deletion
    from baton.model import status as st
    t = st.Transition(kind=st.TransitionKind.DELETE, trigger=st.Trigger.DELETED, step=st.Step.FINALIZING,
                      started_at=b.NOW, step_started_at=b.NOW)
    o = b.observed(pods=(), service=svc(selector=False), slices=(ours(ONE), CONTROLLER_SLICE))
    plan = deletion.finalizing(o, t, b.NOW)
    assert kinds(plan.actions) == ["ConfirmNoPod", "DeleteService", f"DeleteEndpointSlice({SLICE}, slice-uid)",
                                   "DeleteLease", "RemoveFinalizer"]


def _retiring(step: Any, **extra: Any) -> obs.Observed:
    from .shapes import OLD_QUIET, retiring
    return b.observed(status_=retiring(step, deadline=20.0), pods=(OLD_QUIET,), spec_=b.spec(service=True, gateway=True),
                      desired_hash=b.HASH2, service=svc(selector=False, target=8000), gateway_endpoints_known=True, **extra)


@pytest.mark.parametrize("step,extra,expected", [
    # The seal waits for replica gw-2 (its Lease baton-gateway.gw-2): it leaves the slice meanwhile.
    ("StoppingAdmission", {"gateway_sealed": False, "gateway_unconfirmed": (names.gateway_lease_name("gw-2"),)},
     ["EnsureGatewaySlice(['10.0.0.1'], ports=[8000], uid=slice-uid)"]),
    ("Draining", {"gateway_sealed": True, "gateway_inflight": None,
                  "gateway_unconfirmed": (names.gateway_lease_name("gw-2"),)},
     ["EnsureGatewaySlice(['10.0.0.1'], ports=[8000], uid=slice-uid)"]),
    # Already out: nothing written again.
    ("StoppingAdmission", {"gateway_sealed": False, "gateway_unconfirmed": (names.gateway_lease_name("gw-2"),),
                           "slices": "one"}, []),
    # Every replica unanswered: the slice is never emptied.
    ("StoppingAdmission", {"gateway_sealed": False,
                           "gateway_unconfirmed": (names.gateway_lease_name("gw-1"), names.gateway_lease_name("gw-2"))}, []),
    # A replica that is not one of the slice's pods (a process without a pod): nothing to take out.
    ("StoppingAdmission", {"gateway_sealed": False, "gateway_unconfirmed": ("baton-gateway.elsewhere",)}, []),
    # Everyone answered: nothing.
    ("StoppingAdmission", {"gateway_sealed": False, "gateway_unconfirmed": ()}, []),
])
def test_a_replica_that_does_not_answer_leaves_the_slice_while_the_retire_waits(step: str, extra: dict[str, Any],
                                                                                 expected: list[str]) -> None:
    from baton.model import status as st
    slices = (ours(ONE),) if extra.pop("slices", None) == "one" else (ours(TWO),)
    o = _retiring(st.Step(step), gateway_endpoints=TWO, slices=slices, **extra)
    plan = dispatch.decide(o, b.NOW)
    assert kinds(tuple(a for a in plan.actions if isinstance(a, p.EnsureGatewaySlice))) == expected
    # It still waits: the step does not complete on a replica being out of the slice.
    assert not plan.find(p.DeletePod) and not plan.find(p.WriteStatus), plan.kinds()
