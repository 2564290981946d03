"""The gateway's pure rules (baton.gateway.route): Host parsing, refusal bodies, and the
forwarding decision from a view. Hop-by-hop headers and request smuggling: test_hygiene.py."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from baton.gateway import clients as callers
from baton.gateway import route

LOOP = (ipaddress.ip_network("127.0.0.0/8"),)
DOMAIN = "cluster.local"


@pytest.mark.parametrize("host,expected", [
    ("tool.ns", ("ns", "tool", None)),
    ("tool.ns:8080", ("ns", "tool", 8080)),
    ("tool.ns.svc", ("ns", "tool", None)),
    ("tool.ns.svc:80", ("ns", "tool", 80)),
    ("tool.ns.svc.cluster.local", ("ns", "tool", None)),
    ("tool.ns.svc.cluster.local.", ("ns", "tool", None)),
    ("TOOL.NS.SVC.CLUSTER.LOCAL:9000", ("ns", "tool", 9000)),
])
def test_host_names_a_runtime(host: str, expected: tuple[str, str, int | None]) -> None:
    t = route.parse_host(host, cluster_domain=DOMAIN)
    assert t is not None and (t.namespace, t.runtime, t.port) == expected


@pytest.mark.parametrize("host", [
    "", "tool", "127.0.0.1", "127.0.0.1:80", "10.0.0.1", "[::1]:80", "tool.ns.svc.other.domain",
    "tool.ns.example.com", "tool.ns:0", "tool.ns:65536", "tool.ns:http", "-x.ns", "tool.ns.pod",
    "a.b.c.d.e.f", "tool_x.ns", "tool.ns.svc.cluster", "localhost", "kubernetes.default.svc:443x",
])
def test_anything_else_names_nothing(host: str) -> None:
    assert route.parse_host(host, cluster_domain=DOMAIN) is None


def test_other_cluster_domain() -> None:
    assert route.parse_host("t.n.svc.corp.example", cluster_domain="corp.example") is not None
    assert route.parse_host("t.n.svc.cluster.local", cluster_domain="corp.example") is None


def test_jsonrpc_refusal_carries_the_request_id() -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {}}).encode()
    doc = json.loads(route.refusal_body(reason=route.Reason.SUSPENDED, message="suspended", namespace="ns",
                                        runtime="tool", generation=3, body=body))
    assert doc == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": "suspended",
                   "data": {"reason": "Suspended", "runtime": "ns/tool", "generation": 3}}}


@pytest.mark.parametrize("body", [None, b"", b"not json", b'{"a": 1}', b'[1, 2]'])
def test_plain_refusal_when_not_jsonrpc(body: bytes | None) -> None:
    doc = json.loads(route.refusal_body(reason=route.Reason.TRANSITIONING, message="m", namespace="ns",
                                        runtime="tool", generation=None, body=body))
    assert doc == {"error": "m", "reason": "Transitioning", "runtime": "ns/tool", "generation": None}


def test_jsonrpc_string_id_and_notification() -> None:
    assert route.jsonrpc_id(b'{"jsonrpc":"2.0","id":"x1","method":"m"}') == (True, "x1")
    assert route.jsonrpc_id(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == (True, None)


# --- the forwarding decision ---------------------------------------------------------------

def runtime(**kw: Any) -> dict[str, Any]:
    rt: dict[str, Any] = {
        "metadata": {"name": "tool", "namespace": "ns"},
        "spec": {"service": {"ports": [{"port": 80, "targetPort": 8080}], "gateway": True},
                 "budgets": {"admissionSeconds": 7}},
        "status": {"current": {"generation": 2, "uid": "u2", "pod": "tool"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "GenerationReady"}]},
    }
    for k, v in kw.items():
        section, _, field = k.partition("__")
        rt[section][field] = v
    return rt


def pod(uid: str = "u2", *, serving: str = "true", ready: bool = True, ip: str = "127.0.100.5",
        deleting: bool = False, ports: list[dict[str, Any]] | None = None, generation: int = 2) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "tool", "namespace": "ns", "uid": uid,
                            "labels": {"baton.dev/runtime": "tool", "baton.dev/serving": serving,
                                       "baton.dev/generation": str(generation)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta,
            "spec": {"containers": [{"name": "c", "ports": ports or [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def decide(rt: dict[str, Any] | None, pods: list[dict[str, Any]], *, port: int | None = None,
           sealed: set[str] = set(), excluded: set[str] = set()) -> route.Decision:
    return route.decide(rt, pods, port=port, sealed=sealed, excluded=excluded, allowed=LOOP)


def test_forward_to_the_serving_pod() -> None:
    assert decide(runtime(), [pod()]) == route.Forward(uid="u2", ip="127.0.100.5", port=8080, generation=2)


@pytest.mark.parametrize("why,pods,sealed,excluded", [
    ("another uid", [pod("u9")], set(), set()),
    ("serving=false", [pod(serving="false")], set(), set()),
    ("not ready", [pod(ready=False)], set(), set()),
    ("deleting", [pod(deleting=True)], set(), set()),
    ("sealed", [pod()], {"u2"}, set()),
    ("excluded for a held call", [pod()], set(), {"u2"}),
    ("no pod", [], set(), set()),
])
def test_no_forward_without_every_condition(why: str, pods: list[dict[str, Any]], sealed: set[str], excluded: set[str]) -> None:
    rt = runtime(status__transition={"kind": "Handoff", "from": 2, "fromUid": "u2", "step": "Draining"})
    assert isinstance(decide(rt, pods, sealed=sealed, excluded=excluded), route.Hold), why


def test_unknown_runtime_and_gateway_off_and_port() -> None:
    assert decide(None, []) == route.Refuse(route.Reason.UNKNOWN_RUNTIME, 0, "no runtime of that name is served by the gateway")
    off = runtime(spec__service={"ports": [{"port": 80}], "gateway": False})
    assert isinstance(decide(off, [pod()]), route.Refuse)
    d = decide(runtime(), [pod()], port=81)
    assert isinstance(d, route.Refuse) and d.reason == route.Reason.UNKNOWN_RUNTIME


def test_ports() -> None:
    two = runtime(spec__service={"gateway": True, "ports": [{"port": 9000, "targetPort": "mcp"}, {"port": 9001, "targetPort": 7001}]})
    p = pod(ports=[{"name": "mcp", "containerPort": 7000}])
    assert isinstance(decide(two, [p]), route.Refuse)  # no port 80 and two ports: the Host must say
    d = decide(two, [p], port=9000)
    assert isinstance(d, route.Forward) and d.port == 7000
    d = decide(two, [p], port=9001)
    assert isinstance(d, route.Forward) and d.port == 7001
    one = runtime(spec__service={"gateway": True, "ports": [{"port": 9000}]})
    d = decide(one, [pod()])
    assert isinstance(d, route.Forward) and d.port == 9000  # the only port; no targetPort: the port itself


def test_address_outside_the_allowed_cidrs_is_refused() -> None:
    d = decide(runtime(), [pod(ip="10.1.2.3")])
    assert isinstance(d, route.Refuse) and d.reason == route.Reason.ADDRESS_NOT_ALLOWED


@pytest.mark.parametrize("rt,reason", [
    (runtime(metadata__deletionTimestamp="2026-01-01T00:00:00Z"), route.Reason.DELETING),
    (runtime(spec__suspend=True), route.Reason.SUSPENDED),
    (runtime(status__conditions=[{"type": "CleanupFailed", "status": "True", "message": "stuck"}]), route.Reason.CLEANUP_FAILED),
    (runtime(status__current=None, status__conditions=[
        {"type": "Ready", "status": "False", "reason": "BackingOff"},
        {"type": "Degraded", "status": "True", "reason": "ConnectTimeout", "message": "not Ready within connectSeconds"}]),
     route.Reason.CONNECT_TIMEOUT),
    (runtime(status__current=None, status__transition={"kind": "Create", "step": "Creating"}, status__conditions=[
        {"type": "Degraded", "status": "True", "reason": "PodRejected", "message": "quota"}]), route.Reason.POD_REJECTED),
    (runtime(status__current=None, status__transition={"kind": "Retire", "trigger": "ConnectTimeout", "step": "Draining", "fromUid": "u2"}),
     route.Reason.CONNECT_TIMEOUT),
    # A missed wake being retired (idle.since is written once the pod is gone): the caller is
    # told the wake failed, as during the back-off that follows, not ConnectTimeout.
    (runtime(status__current=None, spec__idle={"afterSeconds": 60, "wakeSeconds": 20},
             status__transition={"kind": "Retire", "trigger": "ConnectTimeout", "step": "Draining", "fromUid": "u2"},
             status__conditions=[{"type": "Ready", "status": "False", "reason": "WakeFailed"},
                                 {"type": "Degraded", "status": "True", "reason": "WakeFailed",
                                  "message": "generation 3 not Ready within spec.idle.wakeSeconds=20"}]),
     route.Reason.WAKE_FAILED),
])
def test_refused_at_once(rt: dict[str, Any], reason: route.Reason) -> None:
    d = decide(rt, [pod()])
    assert isinstance(d, route.Refuse) and d.reason == reason and d.retry_after > 0


def test_held_while_a_transition_is_under_way_and_before_the_first_generation() -> None:
    assert isinstance(decide(runtime(status__current=None, status__transition={"kind": "Create", "step": "Creating"}), []), route.Hold)
    assert isinstance(decide(runtime(status__current=None, status__conditions=[]), []), route.Hold)


def test_a_call_held_for_n_plus_1_is_never_forwarded_to_n() -> None:
    rt = runtime(status__transition={"kind": "Handoff", "from": 2, "fromUid": "u2", "step": "StoppingAdmission"})
    excluded = route.retiring_uids(rt, [pod()], set())
    assert excluded == {"u2"}
    # The view goes back to showing N serving (say a status write of N's era replayed): still not N.
    assert isinstance(decide(runtime(), [pod()], excluded=excluded), route.Hold)
    n1 = runtime(status__current={"generation": 3, "uid": "u3"})
    assert decide(n1, [pod("u3", ip="127.0.100.6")], excluded=excluded) == route.Forward("u3", "127.0.100.6", 8080, 3)


def test_retiring_uids() -> None:
    assert route.retiring_uids(runtime(), [pod("a", serving="false"), pod("b", deleting=True), pod("c"), pod("s")],
                               {"s", "elsewhere"}) == {"a", "b", "s"}
    # No generation label (not a pod Baton made as it does now): retiring when serving=false.
    unlabelled = pod("d", serving="false")
    del unlabelled["metadata"]["labels"]["baton.dev/generation"]
    assert route.retiring_uids(runtime(), [unlabelled], set()) == {"d"}


def test_a_call_held_while_n_plus_1_connects_is_forwarded_to_it() -> None:
    """N+1's pod exists, created serving=false, while N retires: a call held then must not
    exclude it (found by make bench-gateway: such calls waited out admissionSeconds)."""
    handoff = runtime(status__transition={"kind": "Handoff", "from": 2, "fromUid": "u2", "step": "Connecting", "to": 3})
    excluded = route.retiring_uids(handoff, [pod("u2", serving="false", deleting=True),
                                             pod("u3", serving="false", ready=False, generation=3)], set())
    assert excluded == {"u2"}
    n1 = runtime(status__current={"generation": 3, "uid": "u3"})
    assert decide(n1, [pod("u3", ip="127.0.100.6", generation=3)], excluded=excluded) == route.Forward("u3", "127.0.100.6", 8080, 3)
    # The first generation connecting (nothing current yet) is not retiring either.
    first = runtime(status__current=None, status__transition={"kind": "Create", "step": "Connecting", "to": 1})
    assert route.retiring_uids(first, [pod("u1", serving="false", generation=1)], set()) == set()
    # N itself labelled serving=false (StoppingAdmission) is.
    stopping = runtime(status__transition={"kind": "Handoff", "from": 2, "step": "StoppingAdmission"})
    assert route.retiring_uids(stopping, [pod("u2", serving="false")], set()) == {"u2"}


def test_admission_seconds() -> None:
    assert route.admission_seconds(runtime()) == 7
    assert route.admission_seconds(None) == 60  # the CRD default


# --- who may call (tenant isolation) ------------------------------------------------------------

def served(namespace: str = "b", clients: dict[str, Any] | None = None, *, gateway: bool = True) -> dict[str, Any]:
    service: dict[str, Any] = {"ports": [{"port": 80}], "gateway": gateway}
    if clients is not None:
        service["clients"] = clients
    return {"metadata": {"name": "tool", "namespace": namespace}, "spec": {"service": service}}


@pytest.mark.parametrize("clients,client_ns,ip,allowed", [
    (None, "b", "10.0.0.5", True),                                   # the runtime's own namespace
    (None, "a", "10.0.0.5", False),                                  # another namespace: refused
    (None, None, "10.0.0.5", False),                                 # no pod there, no cidrs
    ({"namespaces": ["a"]}, "a", "10.0.0.5", True),                  # listed
    ({"namespaces": ["a"]}, "c", "10.0.0.5", False),
    ({"namespaces": ["a"]}, "b", "10.0.0.5", True),                  # own stays allowed when others are listed
    ({"namespaces": ["*"]}, "zz", "10.0.0.5", True),                 # any namespace
    ({"namespaces": ["*"]}, None, "10.0.0.5", False),                # "*" is pods only, not any address
    ({"cidrs": ["192.168.0.0/16"]}, None, "192.168.3.4", True),      # a non-pod caller in range
    ({"cidrs": ["192.168.0.0/16"]}, None, "10.0.0.5", False),        # out of range
    ({"cidrs": ["10.0.0.0/8"]}, "a", "10.0.0.5", False),             # a pod is judged by its namespace, never by cidrs
    ({"cidrs": ["fd00::/64"]}, None, "fd00::7", True),
    ({"cidrs": ["fd00::/64"]}, None, "", False),                     # no address at all
    ({"cidrs": ["not-a-cidr", "127.0.0.0/8"]}, None, "127.0.0.1", True),  # a bad entry admits nothing, the rest still apply
])
def test_client_allowed(clients: dict[str, Any] | None, client_ns: str | None, ip: str, allowed: bool) -> None:
    refusal = callers.client_allowed(served(clients=clients), client_namespace=client_ns, client_ip=ip)
    if allowed:
        assert refusal is None
    else:
        assert refusal is not None and refusal.reason == route.Reason.CLIENT_NOT_ALLOWED
        assert route.status_of(refusal.reason) == 403 and refusal.retry_after == 0
        assert "spec.service.clients" in refusal.message and ip in refusal.message


def test_the_refusal_says_who_may_call_and_how_to_allow_it() -> None:
    r = callers.client_allowed(served(clients={"namespaces": ["c"], "cidrs": ["192.168.0.0/16"]}),
                             client_namespace="a", client_ip="10.0.0.5")
    assert r is not None
    assert r.message == ("the caller at 10.0.0.5 is a pod of namespace a; b/tool admits pods of namespace b, "
                         "pods of namespace c, non-pod addresses in 192.168.0.0/16 (spec.service.clients): "
                         "add 'a' to spec.service.clients.namespaces to allow it")
    r = callers.client_allowed(served(), client_namespace=None, client_ip="203.0.113.9")
    assert r is not None and "no pod is known" in r.message and "spec.service.clients.cidrs" in r.message


def test_a_runtime_the_gateway_does_not_serve_is_left_to_decide() -> None:
    """Absent or gateway off: decide() refuses it UnknownRuntime, whoever calls."""
    assert callers.client_allowed(None, client_namespace="a", client_ip="10.0.0.5") is None
    assert callers.client_allowed(served(gateway=False), client_namespace="a", client_ip="10.0.0.5") is None


@pytest.mark.parametrize("host,client_ns,expected", [
    ("tool", "a", ("a", "tool", None)),
    ("tool:8080", "a", ("a", "tool", 8080)),
    ("TOOL.", "a", ("a", "tool", None)),
    ("tool", None, None),             # the caller is no pod: no namespace to resolve in
    ("tool.b", "a", None),            # qualified: parse_host's, not a short name
    ("10.0.0.1", "a", None),          # an IP literal (a ClusterIP: unsupported, docs/gateway.md)
    ("10.0.0.1:80", "a", None),
    ("[::1]:80", "a", None),
    ("tool:http", "a", None),
    ("tool:0", "a", None),
    ("-x", "a", None),
    ("", "a", None),
])
def test_short_host_is_resolved_in_the_callers_namespace(host: str, client_ns: str | None,
                                                         expected: tuple[str, str, int | None] | None) -> None:
    t = callers.short_host(host, client_namespace=client_ns)
    assert (None if t is None else (t.namespace, t.runtime, t.port)) == expected


@pytest.mark.parametrize("peername,ip", [
    (("10.1.2.3", 40000), "10.1.2.3"),
    (("::ffff:10.1.2.3", 40000, 0, 0), "10.1.2.3"),  # a dual-stack listener: the IPv4 address pods are listed by
    (("fd00::5", 40000, 0, 0), "fd00::5"),
    (("fe80::1%eth0", 40000, 0, 2), "fe80::1"),
    (None, ""), ("", ""), (("not-an-ip", 1), ""),
])
def test_peer_ip(peername: Any, ip: str) -> None:
    assert callers.peer_ip(peername) == ip


@pytest.mark.parametrize("pod,addresses", [
    ({"status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]}},
     ("10.0.0.5", "fd00::5")),
    ({"status": {"phase": "Pending", "podIP": "10.0.0.6"}}, ("10.0.0.6",)),
    ({"status": {"phase": "Running"}}, ()),
    ({"spec": {"hostNetwork": True}, "status": {"phase": "Running", "podIP": "192.168.1.1"}}, ()),  # the node's IP
    ({"status": {"phase": "Succeeded", "podIP": "10.0.0.7"}}, ()),  # ended: its IP may be another pod's now
    ({"status": {"phase": "Failed", "podIP": "10.0.0.7"}}, ()),
])
def test_client_addresses(pod: dict[str, Any], addresses: tuple[str, ...]) -> None:
    assert callers.client_addresses(pod) == addresses
