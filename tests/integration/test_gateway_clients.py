"""Who may call through the gateway (tenant isolation, issue 41 item 5; docs/gateway.md "Who may
call"), operator and gateway as real processes: the caller's namespace is resolved from its
source address in the gateway's watch-fed view of pod IPs. A pod of another namespace is refused
403 ClientNotAllowed with the reason and reaches no tool; a pod of the runtime's own namespace,
and one of a namespace listed in spec.service.clients, are served; a bare Host (`tool`) is the
runtime of the caller's own namespace.

Callers on loopback: each "client pod" is a kwok-loop pod (a 127.0.100.x IP, on the loopback
interface) and the test's HTTP connection binds that IP as its source address before it
connects, so the gateway sees the call come from that pod.
"""
from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, ToolFleet, rpc
from harness.kwok import assert_loopback, is_ready, pod_manifest
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")


def call_from(source: str, port: int, host: str, *, rid: str) -> Reply:
    """One POST to the gateway on 127.0.0.1:`port`, from source address `source` (loopback)."""
    assert_loopback(source)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    t0 = time.monotonic()
    try:
        body = rpc(rid=rid)
        conn.request("POST", "/mcp", body=body, headers={"Host": host, "Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data, time.monotonic() - t0)
    finally:
        conn.close()


def client_pod(core: client.CoreV1Api, namespace: str) -> str:
    """A Ready kwok-loop pod in `namespace`; its IP (127.0.100.x)."""
    core.create_namespaced_pod(namespace, pod_manifest("client", loopback=True))
    pod = wait_for(lambda: (lambda p: p if p.status and p.status.pod_ip and is_ready(p) else None)(
        core.read_namespaced_pod("client", namespace)), timeout=30, what=f"client pod in {namespace} Ready")
    return assert_loopback(pod.status.pod_ip)


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


def test_only_the_runtimes_namespace_and_listed_ones_may_call(
        cluster: Any, operators: Callable[..., OperatorProcess], rts: Runtimes, namespace: str,
        make_namespace: Callable[[], str], fleet: ToolFleet, tmp_path: Path) -> None:
    core = client.CoreV1Api(cluster.api_client)
    intruder_ns, listed_ns = make_namespace(), make_namespace()
    operators("op-a")
    # One replica watching all three namespaces: it knows every client pod's address.
    gw = GatewayProcess(cluster, tmp_path, identity="gw-a", namespaces=[namespace, intruder_ns, listed_ns],
                        system_namespace=namespace)
    try:
        gw.start()
        m = runtime_manifest("tool", service=True, loopback=True)
        m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
        m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True,
                                "clients": {"namespaces": [listed_ns]}}
        rts.create(m)
        rts.wait_ready("tool", 1)
        tool = wait_for(lambda: fleet.of(1), timeout=30, what="the tool of generation 1 listening")
        own_ip, intruder_ip, listed_ip = (client_pod(core, ns) for ns in (namespace, intruder_ns, listed_ns))
        fqdn = f"tool.{namespace}.svc.cluster.local"
        print(f"client pods: own {own_ip}, intruder {intruder_ip} ({intruder_ns}), listed {listed_ip} ({listed_ns})")

        # The own namespace's pod is served (once the view lists its pod: until then it is no pod).
        own = wait_for(lambda: (lambda r: r if r.status == 200 else None)(call_from(own_ip, gw.port, fqdn, rid="own")),
                       timeout=30, what="a call from the runtime's own namespace served")
        assert own.generation == 1 and own.json()["result"]["gen"] == 1 and own.json()["id"] == "own"

        # A pod of another namespace: 403 ClientNotAllowed, naming who may call and how to allow it.
        before = tool.count()
        intruder = wait_for(lambda: (lambda r: r if f"a pod of namespace {intruder_ns}" in r.body.decode() else None)(
            call_from(intruder_ip, gw.port, fqdn, rid="intruder")), timeout=30,
            what="the gateway's view knowing the intruder's pod")
        print(f"intruder: {intruder.status} {intruder.headers.get('baton-reason')} {intruder.body.decode()}")
        assert intruder.status == 403 and intruder.headers["baton-reason"] == "ClientNotAllowed"
        error = intruder.json()["error"]
        assert error["code"] == -32000 and error["data"]["reason"] == "ClientNotAllowed"
        assert intruder.json()["id"] == "intruder"
        assert f"pods of namespace {namespace}" in error["message"] and f"pods of namespace {listed_ns}" in error["message"]
        assert f"add '{intruder_ns}' to spec.service.clients.namespaces" in error["message"]
        assert "baton-generation" not in intruder.headers

        # The same for every Host form naming the runtime, and for a caller that is no pod at all.
        for host in (f"tool.{namespace}", f"tool.{namespace}.svc:80"):
            r = call_from(intruder_ip, gw.port, host, rid="intruder-2")
            assert (r.status, r.headers.get("baton-reason")) == (403, "ClientNotAllowed"), host
        loop = call_from("127.0.0.1", gw.port, fqdn, rid="no-pod")
        print(f"no pod: {loop.status} {loop.body.decode()}")
        assert (loop.status, loop.headers.get("baton-reason")) == (403, "ClientNotAllowed")
        assert "no pod is known" in loop.json()["error"]["message"]

        # A namespace listed in spec.service.clients is served.
        listed = wait_for(lambda: (lambda r: r if r.status == 200 else None)(call_from(listed_ip, gw.port, fqdn, rid="listed")),
                          timeout=30, what="a call from a listed namespace served")
        assert listed.generation == 1 and listed.json()["result"]["gen"] == 1

        # A short name is the runtime of the caller's own namespace: served from the own
        # namespace (Host `tool`, `tool:80`); from another namespace it names that namespace's
        # runtime (none here: 404), never this one.
        for host in ("tool", "tool:80"):
            short = call_from(own_ip, gw.port, host, rid="short")
            assert short.status == 200 and short.generation == 1 and short.json()["result"]["gen"] == 1, host
        other = call_from(intruder_ip, gw.port, "tool", rid="short-other")
        assert (other.status, other.headers.get("baton-reason")) == (404, "UnknownRuntime")

        # None of the refused calls reached the tool: exactly the 2 short-name calls and the
        # listed one did (the intruder's and the no-pod caller's did not).
        with tool.lock:
            served_ids = [json.loads(r["body"]).get("id") for r in tool.requests[before:]]
        assert sorted(i for i in served_ids if i != "listed") == ["short", "short"], served_ids
        assert gw.metric("baton_gateway_calls_total", reason="ClientNotAllowed") >= 4
    finally:
        gw.kill()
