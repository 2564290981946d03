"""The chart's gateway (gateway.enabled) against the local plane: installed in a namespace that
enforces Pod Security "restricted", its objects created, and its account exactly enough.

kwok runs no containers, so the gateway pods never serve; the gateway runs instead as a local
process (harness.gateway.GatewayProcess, loopback binds) that authenticates with a token of the
chart's gateway ServiceAccount and nothing else: it becoming ready proves its views' list and
watch and its Lease create are granted; its clean exit deleting the Lease proves delete. The
`kubectl auth can-i` matrix proves the account can do nothing more.
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.chart import CHART, adopt_crd, can_i, sa_kubeconfig
from harness.gateway import GatewayProcess

INSTANCE = "app.kubernetes.io/instance"



def test_gateway_install_objects_restricted_pods_and_least_privilege(
        cluster: Any, crd: None, namespace: str, release_ns: str, tmp_path: Path) -> None:
    release = "baton-gwi"
    gw_name = f"{release}-gateway"
    adopt_crd(cluster, release, release_ns)
    cluster.helm("install", release, str(CHART), "-n", release_ns, "--wait", "--timeout", "120s",
                 "--set", "gateway.enabled=true", "--set", "gateway.networkPolicy.enabled=true", timeout=180)
    try:
        apps = client.AppsV1Api(cluster.api_client)
        core = client.CoreV1Api(cluster.api_client)
        dep = apps.read_namespaced_deployment(gw_name, release_ns)
        [c] = dep.spec.template.spec.containers
        assert c.args == ["gateway"] and dep.spec.replicas == 2
        assert dep.spec.template.spec.service_account_name == gw_name
        # Both pods were admitted by a namespace enforcing "restricted" (kwok marks them running).
        wait_for(lambda: (apps.read_namespaced_deployment(gw_name, release_ns).status.ready_replicas or 0) == 2,
                 timeout=90, what="the gateway Deployment's 2 replicas ready", interval=1)
        pods = core.list_namespaced_pod(release_ns, label_selector=f"app.kubernetes.io/name=baton-gateway,{INSTANCE}={release}")
        assert len([p for p in pods.items if p.metadata.deletion_timestamp is None]) == 2
        assert client.PolicyV1Api(cluster.api_client).read_namespaced_pod_disruption_budget(gw_name, release_ns)
        assert core.read_namespaced_service(gw_name, release_ns).spec.ports[0].target_port == "calls"
        assert core.read_namespaced_service(f"{gw_name}-metrics", release_ns)
        assert core.read_namespaced_service_account(gw_name, release_ns)
        assert client.NetworkingV1Api(cluster.api_client).read_namespaced_network_policy(gw_name, release_ns)

        # The account: read-only on the views anywhere, its Lease in the release namespace only.
        user = f"system:serviceaccount:{release_ns}:{gw_name}"
        granted = [("list", "toolruntimes.baton.dev", namespace), ("watch", "toolruntimes.baton.dev", "*"),
                   ("list", "pods", namespace), ("watch", "pods", "*"),
                   *[(v, "leases.coordination.k8s.io", release_ns) for v in ("get", "create", "update", "delete")]]
        denied = [("patch", "toolruntimes.baton.dev", namespace), ("patch", "toolruntimes.baton.dev/status", namespace),
                  ("get", "pods", namespace), ("create", "pods", namespace), ("patch", "pods", namespace),
                  ("delete", "pods", namespace), ("list", "services", namespace), ("patch", "services", namespace),
                  ("get", "secrets", release_ns), ("list", "configmaps", namespace),
                  ("create", "leases.coordination.k8s.io", namespace), ("delete", "leases.coordination.k8s.io", namespace),
                  ("update", "leases.coordination.k8s.io", "kube-node-lease"),
                  ("list", "leases.coordination.k8s.io", release_ns), ("create", "events", namespace),
                  ("patch", "endpointslices.discovery.k8s.io", namespace), ("*", "*", namespace)]
        wrong = [(v, r, ns, exp) for exp, rows in ((True, granted), (False, denied)) for v, r, ns in rows
                 if can_i(cluster, user, v, r, ns) != exp]
        print(f"can-i as {user}: {len(granted)} granted, {len(denied)} denied; wrong: {wrong}")
        assert not wrong, f"the gateway's RBAC differs from least privilege (verb, resource, ns, expected): {wrong}"

        # The gateway process on the chart's token alone: ready (views listed, Lease written),
        # then a clean exit deletes its Lease.
        token = cluster.sa_token(release_ns, gw_name, expiration_seconds=1800)
        kubeconfig = sa_kubeconfig(cluster, token, tmp_path / "gateway-sa.kubeconfig")
        gw = GatewayProcess(cluster, tmp_path, identity="chart-sa", namespaces=[namespace],
                            system_namespace=release_ns, env={"KUBECONFIG": kubeconfig})
        try:
            gw.start(timeout=90)
            coord = client.CoordinationV1Api(cluster.api_client)
            lease = coord.read_namespaced_lease("baton-gateway.chart-sa", release_ns)
            assert lease.spec.holder_identity == "chart-sa"
            assert "Forbidden" not in gw.log_text() and " 403" not in gw.log_text(), gw.log_tail(40)
            gw.signal(signal.SIGTERM)
            assert gw.wait_exit(timeout=60) == 0, gw.log_tail(40)

            def lease_gone() -> bool:
                try:
                    coord.read_namespaced_lease("baton-gateway.chart-sa", release_ns)
                    return False
                except ApiException as e:
                    return e.status == 404
            wait_for(lease_gone, timeout=30, what="the gateway's Lease deleted on its clean exit", interval=0.5)
        finally:
            gw.kill()
    finally:
        cluster.helm("uninstall", release, "-n", release_ns, "--wait", "--timeout", "60s", timeout=90)
    selector = f"{INSTANCE}={release}"

    def leftovers() -> list[str]:
        got = cluster.kubectl("get", "deploy,svc,sa,role,rolebinding,pdb,networkpolicy", "-n", release_ns,
                              "-l", selector, "-o", "name").stdout.split()
        return got + cluster.kubectl("get", "clusterrole,clusterrolebinding", "-l", selector, "-o", "name").stdout.split()
    wait_for(lambda: not leftovers(), timeout=60, what=f"no object of release {release} left", interval=1)
