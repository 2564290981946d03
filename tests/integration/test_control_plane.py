"""Proof that the local control plane behaves like a real cluster where Baton depends on it.

Every wait is bounded in time and count (dev.wait); the only traffic besides the API server
(127.0.0.1) is a TCP exchange with a pod IP inside 127.0.0.0/8.
"""
from __future__ import annotations

import ipaddress
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import stays, wait_for
from harness.cluster import Cluster
from harness.kwok import (
    LOOPBACK_CIDR, LOOPBACK_NODE, NEVER_READY, NODE, NODE_CIDR, assert_loopback, is_ready,
    pod_manifest,
)

pytestmark = pytest.mark.usefixtures("kwok_nodes")

CHARTS = Path(__file__).resolve().parent / "charts"
READY_S = 30  # a pod on a kwok node is scheduled and Ready within this
SLACK_S = 5   # "a few seconds" after a deadline


@pytest.fixture
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api_client)


def gone(core: client.CoreV1Api, ns: str, name: str, uid: str | None = None) -> bool:
    """GET 404 (or the name now belongs to another object)."""
    try:
        pod = core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return uid is not None and pod.metadata.uid != uid


def wait_ready(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod:
    return wait_for(lambda: (lambda p: p if is_ready(p) else None)(core.read_namespaced_pod(name, ns)),
                    timeout=READY_S, what=f"pod {ns}/{name} Ready")


def wait_running(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod:
    def check() -> client.V1Pod | None:
        p = core.read_namespaced_pod(name, ns)
        return p if p.status and p.status.phase == "Running" and p.status.pod_ip else None
    return wait_for(check, timeout=READY_S, what=f"pod {ns}/{name} Running with an IP")


def remove_finalizers(core: client.CoreV1Api, ns: str, name: str) -> None:
    core.patch_namespaced_pod(name, ns, [{"op": "remove", "path": "/metadata/finalizers"}])


# ---------------------------------------------------------------------------------------------


def test_pod_ready_on_kwok_node_then_gone_after_grace(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("web"))
    pod = wait_ready(core, namespace, "web")
    assert pod.spec.node_name == NODE  # kwok-loop's taint keeps ordinary pods off it
    assert ipaddress.ip_address(pod.status.pod_ip) in NODE_CIDR
    assert pod.status.phase == "Running"

    grace = 3
    t0 = time.monotonic()
    core.delete_namespaced_pod("web", namespace, grace_period_seconds=grace)
    deleting = core.read_namespaced_pod("web", namespace)
    assert deleting.metadata.deletion_timestamp is not None
    wait_for(lambda: gone(core, namespace, "web", pod.metadata.uid), timeout=grace + SLACK_S,
             what="deleted pod to 404 within grace + a few seconds")
    elapsed = time.monotonic() - t0
    # deletionTimestamp has a resolution of one second, so the end of the grace period can come
    # up to a second early; well before it would mean the pod did not wait for its grace at all.
    assert elapsed >= grace - 1.2, f"pod vanished after {elapsed:.1f}s, before its {grace}s grace"


def test_finalizer_keeps_pod_terminating_until_removed(core: client.CoreV1Api,
                                                       namespace: str) -> None:
    hold = "baton.dev/test-hold"
    core.create_namespaced_pod(namespace, pod_manifest("stuck", finalizers=[hold]))
    wait_ready(core, namespace, "stuck")
    core.delete_namespaced_pod("stuck", namespace, grace_period_seconds=1)
    # Past its grace period (and past kwok's confirming delete) it still stands, Terminating.
    stays(lambda: core.read_namespaced_pod("stuck", namespace).metadata.deletion_timestamp
          is not None, duration=4, what="finalizer pod Terminating")
    remove_finalizers(core, namespace, "stuck")
    wait_for(lambda: gone(core, namespace, "stuck"), timeout=SLACK_S,
             what="pod to vanish once its finalizer is removed")

    # The force path: gracePeriodSeconds=0, then finalizer removal.
    core.create_namespaced_pod(namespace, pod_manifest("stuck2", finalizers=[hold]))
    wait_ready(core, namespace, "stuck2")
    core.delete_namespaced_pod("stuck2", namespace, grace_period_seconds=0)
    stays(lambda: core.read_namespaced_pod("stuck2", namespace).metadata.deletion_timestamp
          is not None, duration=2, what="finalizer pod Terminating after a grace-0 delete")
    remove_finalizers(core, namespace, "stuck2")
    wait_for(lambda: gone(core, namespace, "stuck2"), timeout=SLACK_S,
             what="grace-0 pod to vanish once its finalizer is removed")


def test_lease_update_with_stale_resource_version_conflicts(cluster: Cluster,
                                                            namespace: str) -> None:
    coord = client.CoordinationV1Api(cluster.api_client)
    lease = coord.create_namespaced_lease(namespace, {
        "metadata": {"name": "baton-lock"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 10},
    })
    stale_rv = lease.metadata.resource_version
    fresh = coord.replace_namespaced_lease("baton-lock", namespace, {
        "metadata": {"name": "baton-lock", "resourceVersion": stale_rv},
        "spec": {"holderIdentity": "b", "leaseDurationSeconds": 10},
    })
    assert fresh.metadata.resource_version != stale_rv
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("baton-lock", namespace, {
            "metadata": {"name": "baton-lock", "resourceVersion": stale_rv},
            "spec": {"holderIdentity": "c", "leaseDurationSeconds": 10},
        })
    assert err.value.status == 409
    assert coord.read_namespaced_lease("baton-lock", namespace).spec.holder_identity == "b"


def test_crd_cel_transition_rule_rejects_lowering_status(cluster: Cluster, namespace: str) -> None:
    ext = client.ApiextensionsV1Api(cluster.api_client)
    custom = client.CustomObjectsApi(cluster.api_client)
    group = f"t{uuid.uuid4().hex[:8]}.test.baton.dev"
    plural = "fenced"
    message = "status.fencingToken must not decrease"
    crd_name = f"{plural}.{group}"
    ext.create_custom_resource_definition({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": "fence", "kind": "Fence"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object"},
                        "status": {"type": "object", "properties": {"fencingToken": {
                            "type": "integer", "format": "int64",
                            "x-kubernetes-validations": [
                                {"rule": "self >= oldSelf", "message": message}],
                        }}},
                    },
                }},
            }],
        },
    })
    try:
        def established() -> bool:
            crd = ext.read_custom_resource_definition(crd_name)
            return any(c.type == "Established" and c.status == "True"
                       for c in (crd.status.conditions or []))
        wait_for(established, timeout=30, what="CRD Established")
        wait_for(lambda: custom.create_namespaced_custom_object(
            group, "v1", namespace, plural,
            {"apiVersion": f"{group}/v1", "kind": "Fence", "metadata": {"name": "f"}, "spec": {}}),
            timeout=30, what="custom resource created", ignore=(ApiException,))

        def set_token(value: int) -> dict:
            obj = custom.get_namespaced_custom_object(group, "v1", namespace, plural, "f")
            obj["status"] = {"fencingToken": value}
            return custom.replace_namespaced_custom_object_status(
                group, "v1", namespace, plural, "f", obj)

        assert set_token(5)["status"]["fencingToken"] == 5
        assert set_token(7)["status"]["fencingToken"] == 7
        with pytest.raises(ApiException) as err:
            set_token(3)
        assert err.value.status == 422
        assert message in (err.value.body or "")
        obj = custom.get_namespaced_custom_object(group, "v1", namespace, plural, "f")
        assert obj["status"]["fencingToken"] == 7
    finally:
        ext.delete_custom_resource_definition(crd_name)


def test_service_account_forbidden_until_role_binding(cluster: Cluster, core: client.CoreV1Api,
                                                      namespace: str) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    token = cluster.sa_token(namespace, "reader")
    as_sa = client.CoreV1Api(cluster.client_for_token(token))
    with pytest.raises(ApiException) as err:
        as_sa.list_namespaced_pod(namespace)
    assert err.value.status == 403

    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    })
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "reader-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    })
    wait_for(lambda: as_sa.list_namespaced_pod(namespace) is not None, timeout=10,
             what="pod list allowed after the RoleBinding", ignore=(ApiException,))
    with pytest.raises(ApiException) as err:
        as_sa.list_namespaced_pod("default")  # the binding is namespaced
    assert err.value.status == 403


def test_endpointslice_lists_pod_and_drops_it_on_relabel(cluster: Cluster,
                                                         core: client.CoreV1Api,
                                                         namespace: str) -> None:
    discovery = client.DiscoveryV1Api(cluster.api_client)
    core.create_namespaced_pod(namespace, pod_manifest("backend", labels={"app": "web"}, port=8080))
    pod = wait_ready(core, namespace, "backend")
    assert ipaddress.ip_address(pod.status.pod_ip) in NODE_CIDR  # listed, never dialled
    core.create_namespaced_service(namespace, {
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })

    def endpoints() -> list[tuple[str, bool]]:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=web").items
        return [(e.target_ref.name, bool(e.conditions and e.conditions.ready))
                for s in slices for e in (s.endpoints or []) if e.target_ref]

    wait_for(lambda: ("backend", True) in endpoints(), timeout=20,
             what="EndpointSlice listing the pod as ready")
    core.patch_namespaced_pod("backend", namespace, {"metadata": {"labels": {"app": "other"}}})
    wait_for(lambda: all(name != "backend" for name, _ in endpoints()), timeout=20,
             what="relabelled pod removed from the EndpointSlice")


def test_loopback_pod_gets_127_ip_and_answers_tcp(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("loop", loopback=True))
    pod = wait_ready(core, namespace, "loop")
    assert pod.spec.node_name == LOOPBACK_NODE
    ip = assert_loopback(pod.status.pod_ip)
    assert ipaddress.ip_address(ip) in LOOPBACK_CIDR

    # The test plays the pod's server: a listener bound on the pod's IP, which is on loopback.
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.settimeout(10)
    server.bind((ip, 0))
    server.listen(1)
    port = server.getsockname()[1]
    received: list[bytes] = []

    def serve() -> None:
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(10)
                received.append(conn.recv(64))
                conn.sendall(b"pong from " + ip.encode())
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with socket.create_connection((assert_loopback(pod.status.pod_ip), port), timeout=10) as c:
            c.sendall(b"ping")
            reply = c.recv(64)
    finally:
        t.join(timeout=10)
        server.close()
    assert received == [b"ping"]
    assert reply == b"pong from " + ip.encode()


def test_helm_install_and_uninstall(cluster: Cluster, core: client.CoreV1Api,
                                    namespace: str) -> None:
    apps = client.AppsV1Api(cluster.api_client)
    cluster.helm("install", "tiny", str(CHARTS / "tiny"), "--namespace", namespace,
                 "--wait", "--timeout", "60s", timeout=90)
    assert core.read_namespaced_config_map("tiny-config", namespace).data == {"message": "hello"}
    dep = apps.read_namespaced_deployment("tiny", namespace)
    assert dep.status.ready_replicas == 1
    assert "tiny" in cluster.helm("list", "--namespace", namespace, "--short").stdout.split()

    cluster.helm("uninstall", "tiny", "--namespace", namespace, "--wait", "--timeout", "60s",
                 timeout=90)

    def removed() -> bool:
        left = []
        for read in (lambda: core.read_namespaced_config_map("tiny-config", namespace),
                     lambda: core.read_namespaced_service("tiny", namespace),
                     lambda: apps.read_namespaced_deployment("tiny", namespace)):
            try:
                left.append(read())
            except ApiException as e:
                if e.status != 404:
                    raise
        return not left
    wait_for(removed, timeout=20, what="chart objects removed by helm uninstall")
    # Its pods go too (garbage collector: Deployment -> ReplicaSet -> Pod).
    wait_for(lambda: not core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/instance=tiny").items,
        timeout=30, what="the release's pods garbage-collected")
    assert "tiny" not in cluster.helm("list", "--namespace", namespace, "--short").stdout.split()


def test_deleting_namespace_removes_its_pods(cluster: Cluster, core: client.CoreV1Api,
                                             namespace: str) -> None:
    for i in range(2):
        core.create_namespaced_pod(namespace, pod_manifest(f"p{i}", grace_seconds=1))
    for i in range(2):
        wait_ready(core, namespace, f"p{i}")
    core.delete_namespace(namespace)

    def ns_gone() -> bool:
        try:
            core.read_namespace(namespace)
            return False
        except ApiException as e:
            if e.status == 404:
                return True
            raise
    wait_for(ns_gone, timeout=60, what="namespace finalized (its pods deleted first)")
    assert not core.list_namespaced_pod(namespace).items


def test_never_ready_annotation(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("lazy", never_ready=True))
    pod = wait_running(core, namespace, "lazy")
    assert not is_ready(pod)
    stays(lambda: not is_ready(core.read_namespaced_pod("lazy", namespace)), duration=3,
          what="annotated pod not Ready")
    # Removing the annotation makes it Ready; adding it to a Ready pod takes readiness away.
    core.patch_namespaced_pod("lazy", namespace, [
        {"op": "remove", "path": "/metadata/annotations/" + NEVER_READY.replace("/", "~1")}])
    ready = wait_ready(core, namespace, "lazy")
    assert ready.status.pod_ip == pod.status.pod_ip
    core.patch_namespaced_pod("lazy", namespace,
                              {"metadata": {"annotations": {NEVER_READY: "true"}}})
    wait_for(lambda: not is_ready(core.read_namespaced_pod("lazy", namespace)), timeout=10,
             what="pod un-Ready after the annotation is added")


def test_terminate_after_annotation(core: client.CoreV1Api, namespace: str) -> None:
    # Slower than its grace period: grace 1 s, but it takes 6 s to go.
    core.create_namespaced_pod(namespace, pod_manifest("slow", terminate_after="6s",
                                                       grace_seconds=1))
    # Faster than its grace period: grace 30 s, gone after 2 s.
    core.create_namespaced_pod(namespace, pod_manifest("quick", terminate_after="2s",
                                                       grace_seconds=30))
    wait_ready(core, namespace, "slow")
    wait_ready(core, namespace, "quick")
    t0 = time.monotonic()
    core.delete_namespaced_pod("slow", namespace)
    core.delete_namespaced_pod("quick", namespace)
    wait_for(lambda: gone(core, namespace, "quick"), timeout=2 + SLACK_S,
             what="terminate-after 2s pod gone well before its 30 s grace")
    stays(lambda: not gone(core, namespace, "slow"), duration=max(0.0, 4 - (time.monotonic() - t0)),
          what="terminate-after 6s pod still there past its 1 s grace")
    wait_for(lambda: gone(core, namespace, "slow"), timeout=6 + SLACK_S,
             what="terminate-after 6s pod gone")
    assert time.monotonic() - t0 >= 5.5
