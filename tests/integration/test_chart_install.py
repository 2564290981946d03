"""The Helm chart against the local plane: install, least privilege, the operator on the chart's
ServiceAccount, uninstall.

kwok plays the operator's pods (no container runs), so the operator runs as a local process
that authenticates with a token of the chart's ServiceAccount and nothing else: the lifecycle
scenarios passing with it proves the RBAC is enough; the `kubectl auth can-i` matrix proves it
is not more. The release namespace enforces Pod Security "restricted": the Deployment's pods
being admitted there proves the securityContext passes it.
"""
from __future__ import annotations

import base64
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.chart import CHART, CRD_NAME, adopt_crd, can_i, classify_denials, sa_kubeconfig
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.scenarios import cleanup_failure_scenario, handoff_scenario
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]
INSTANCE = "app.kubernetes.io/instance"



def install(cluster: Any, release: str, ns: str, *args: str) -> str:
    adopt_crd(cluster, release, ns)
    proc = cluster.helm("install", release, str(CHART), "-n", ns, "--wait", "--timeout", "90s",
                        *args, timeout=150)
    return proc.stdout


def uninstall_leaves_nothing(cluster: Any, release: str, namespaces: list[str]) -> None:
    """`helm uninstall`: no object of the release is left in any namespace nor cluster-wide; the
    CRD stays (crds.keep default)."""
    cluster.helm("uninstall", release, "-n", namespaces[0], "--wait", "--timeout", "60s", timeout=90)
    selector = f"{INSTANCE}={release}"

    core = client.CoreV1Api(cluster.api_client)

    def leftovers() -> list[str]:
        out = []
        for ns in namespaces:
            got = cluster.kubectl("get", "deploy,rs,svc,sa,role,rolebinding,pdb,cm,secret,lease",
                                  "-n", ns, "-l", selector, "-o", "name").stdout.split()
            out += [f"{ns}/{g}" for g in got]
            # Operator pods may still be within their grace period: deleted, going.
            out += [f"{ns}/pod/{p.metadata.name}" for p in
                    core.list_namespaced_pod(ns, label_selector=selector).items
                    if p.metadata.deletion_timestamp is None]
        out += cluster.kubectl("get", "clusterrole,clusterrolebinding,validatingadmissionpolicy,"
                               "validatingadmissionpolicybinding", "-l", selector, "-o", "name").stdout.split()
        return out

    wait_for(lambda: not leftovers(), timeout=60, what=f"no object of release {release} left",
             interval=1)
    crd = client.ApiextensionsV1Api(cluster.api_client).read_custom_resource_definition(CRD_NAME)
    assert crd.metadata.deletion_timestamp is None, "the CRD is kept on uninstall"


def deployment_env(cluster: Any, release_ns: str, name: str) -> dict[str, str]:
    dep = client.AppsV1Api(cluster.api_client).read_namespaced_deployment(name, release_ns)
    # An empty value comes back as None (omitted); valueFrom entries are left out.
    return {e.name: e.value or "" for e in dep.spec.template.spec.containers[0].env if e.value_from is None}


def operator_as_chart_sa(cluster: Any, operators: Start, tmp_path: Path, release_ns: str,
                         sa: str, env: dict[str, str], namespaces: list[str]) -> OperatorProcess:
    token = cluster.sa_token(release_ns, sa, expiration_seconds=1800)
    kubeconfig = sa_kubeconfig(cluster, token, tmp_path / "chart-sa.kubeconfig")
    # Settings as the chart sets them, except what a test must keep local: its ports, short
    # Leases, and probes only to loopback (tests never dial other addresses).
    keep = ("BATON_SHUTDOWN_GRACE_SECONDS", "BATON_LOG_LEVEL", "BATON_NAMESPACES",
            "BATON_WATCH_CONFIGMAPS", "BATON_WATCH_SECRETS", "BATON_SYSTEM_NAMESPACE")
    settings = {k: env[k] for k in keep}
    assert settings["BATON_NAMESPACES"] == ",".join(namespaces)
    return operators("chart-sa", namespaces=namespaces or None, kubeconfig=kubeconfig, env=settings)


def no_gaps(gaps: list[str]) -> None:
    assert not gaps, "the operator hit RBAC denials of a known kind: " + " | ".join(gaps)


def rbac_denials(op: OperatorProcess) -> list[str]:
    gaps, unknown = classify_denials(op.log_text())
    assert not unknown, "the operator hit RBAC denials:\n" + "\n".join(unknown[:20])
    return gaps


# --- the can-i matrix --------------------------------------------------------------------------

Row = tuple[str, str, str, bool]  # verb, resource, where, expected


def check_matrix(cluster: Any, user: str, rows: list[Row], where: dict[str, str | None],
                 title: str) -> str:
    lines = [f"can-i matrix: {title} (--as={user})",
             f"{'verb':8} {'resource':48} {'where':16} {'expect':6} got"]
    wrong = []
    for verb, resource, place, expected in rows:
        got = can_i(cluster, user, verb, resource, where[place])
        lines.append(f"{verb:8} {resource:48} {place:16} {'yes' if expected else 'no':6} "
                     f"{'yes' if got else 'no'}{'' if got == expected else '   <-- WRONG'}")
        if got != expected:
            wrong.append((verb, resource, place, expected, got))
    table = "\n".join(lines)
    print(table)
    assert not wrong, f"RBAC differs from the intended least privilege:\n{table}"
    return table


# Granted in each namespace the operator watches.
GRANTED = [
    ("list", "toolruntimes.baton.dev"),
    ("watch", "toolruntimes.baton.dev"), ("patch", "toolruntimes.baton.dev"),
    ("patch", "toolruntimes.baton.dev/status"), ("update", "toolruntimes.baton.dev/finalizers"),
    ("get", "pods"), ("list", "pods"), ("watch", "pods"), ("create", "pods"), ("patch", "pods"),
    ("delete", "pods"),
    ("get", "services"), ("list", "services"), ("watch", "services"), ("create", "services"),
    ("patch", "services"), ("delete", "services"),
    ("get", "leases.coordination.k8s.io"), ("list", "leases.coordination.k8s.io"),
    ("watch", "leases.coordination.k8s.io"), ("create", "leases.coordination.k8s.io"),
    ("update", "leases.coordination.k8s.io"), ("delete", "leases.coordination.k8s.io"),
    ("create", "events"), ("patch", "events"),
    ("list", "endpointslices.discovery.k8s.io"), ("watch", "endpointslices.discovery.k8s.io"),
    ("create", "endpointslices.discovery.k8s.io"), ("patch", "endpointslices.discovery.k8s.io"),
    ("delete", "endpointslices.discovery.k8s.io"),
    ("get", "configmaps"), ("list", "configmaps"), ("watch", "configmaps"),
    ("list", "toolruntimeclaims.baton.dev"), ("watch", "toolruntimeclaims.baton.dev"),
    ("patch", "toolruntimeclaims.baton.dev/status"),
]
# Never granted anywhere.
DENIED = [
    ("create", "toolruntimes.baton.dev"), ("update", "toolruntimes.baton.dev"),
    ("delete", "toolruntimes.baton.dev"), ("update", "toolruntimes.baton.dev/status"),
    # A claim is the consumer's: Baton writes only its status.
    ("create", "toolruntimeclaims.baton.dev"), ("patch", "toolruntimeclaims.baton.dev"),
    ("delete", "toolruntimeclaims.baton.dev"), ("update", "toolruntimeclaims.baton.dev/status"),
    ("create", "pods/exec"), ("get", "pods/log"), ("create", "pods/eviction"),
    ("update", "pods"), ("create", "pods/ephemeralcontainers"), ("update", "services"),
    ("update", "endpointslices.discovery.k8s.io"),
    ("create", "secrets"), ("update", "secrets"), ("create", "configmaps"),
    ("create", "serviceaccounts/token"), ("create", "deployments.apps"),
    ("create", "rolebindings.rbac.authorization.k8s.io"), ("patch", "leases.coordination.k8s.io"),
    ("*", "*"),
]
CLUSTER_DENIED = [
    ("delete", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "namespaces"), ("get", "nodes"), ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"), ("impersonate", "users"),
    ("*", "*"),
]


# --- namespaced scope: the recommended least-privilege install -----------------------------------


def test_namespaced_install_least_privilege_and_operator_on_its_token(
        cluster: Any, operators: Start, rts: Runtimes, pod_watch: PodWatch,
        namespace: str, release_ns: str, tmp_path: Path) -> None:
    release = "baton-ns"
    notes = install(cluster, release, release_ns, "--set-json", f'watch={{"namespaces":["{namespace}"]}}')
    assert f"kubectl -n {namespace} get toolruntimes" in notes, notes
    assert "apiVersion: baton.dev/v1alpha1" in notes

    # What was installed.
    crd = client.ApiextensionsV1Api(cluster.api_client).read_custom_resource_definition(CRD_NAME)
    assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    assert rbac.read_namespaced_role(release, namespace).rules
    binding = rbac.read_namespaced_role_binding(release, namespace)
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", release, release_ns)]
    assert not rbac.list_cluster_role(label_selector=f"{INSTANCE}={release}").items
    for role in [rbac.read_namespaced_role(release, namespace)]:
        for rule in role.rules:
            assert "*" not in rule.verbs and "*" not in rule.resources and "*" not in rule.api_groups
    # Two replicas admitted under Pod Security "restricted" (kwok runs them; no container runs).
    dep = client.AppsV1Api(cluster.api_client).read_namespaced_deployment(release, release_ns)
    assert dep.status.ready_replicas == 2
    env = deployment_env(cluster, release_ns, release)
    assert env["BATON_NAMESPACES"] == namespace
    assert dep.spec.template.spec.termination_grace_period_seconds == 70

    # Not more than needed.
    user = f"system:serviceaccount:{release_ns}:{release}"
    where = {"watched ns": namespace, "release ns": release_ns, "default ns": "default",
             "all namespaces": "*", "cluster": None}
    rows: list[Row] = [(v, r, "watched ns", True) for v, r in GRANTED]
    rows += [(v, "secrets", "watched ns", True) for v in ("get", "list", "watch")]  # readSecrets auto
    rows += [(v, r, "watched ns", False) for v, r in DENIED]
    for other in ("release ns", "default ns", "all namespaces"):
        rows += [("list", "toolruntimes.baton.dev", other, False), ("create", "pods", other, False),
                 ("get", "secrets", other, False), ("list", "secrets", other, False)]
    # Leases are written in the release namespace only (the per-runtime metrics reporter's,
    # baton.k8s.metricslease; sharding's when on), never deleted there while sharding is off.
    rows += [("create", "leases.coordination.k8s.io", "release ns", True),
             ("update", "leases.coordination.k8s.io", "release ns", True),
             ("delete", "leases.coordination.k8s.io", "release ns", False),
             ("create", "leases.coordination.k8s.io", "default ns", False),
             ("create", "leases.coordination.k8s.io", "all namespaces", False)]
    # The gateway's pods in the release namespace: watched (their Ready ones are the endpoints of
    # runtimes routed through the gateway), never read by name or written.
    rows += [("list", "pods", "release ns", True), ("watch", "pods", "release ns", True),
             ("get", "pods", "release ns", False), ("create", "endpointslices.discovery.k8s.io", "release ns", False)]
    rows += [(v, r, "cluster", False) for v, r in CLUSTER_DENIED]
    table = check_matrix(cluster, user, rows, where, "namespaced scope (watch.namespaces=[watched ns])")
    listing = cluster.kubectl("auth", "can-i", "--list", "--as", user, "-n", namespace).stdout
    print(f"kubectl auth can-i --list --as={user} -n <watched ns>\n{listing}")
    assert "*" not in [c for line in listing.splitlines()[1:] for c in line.split()[:1]]
    (tmp_path / "can-i-namespaced.txt").write_text(table + "\n\n" + listing)

    # Enough: the operator core's scenarios, run on the chart's token only.
    op = operator_as_chart_sa(cluster, operators, tmp_path, release_ns, release, env, [namespace])
    handoff_scenario(rts, pod_watch, op, first_ready_timeout=30)
    cleanup_failure_scenario(rts, pod_watch, op)
    gaps = rbac_denials(op)

    op.kill()
    uninstall_leaves_nothing(cluster, release, [release_ns, namespace])
    no_gaps(gaps)


# --- cluster scope --------------------------------------------------------------------------------


def test_cluster_wide_install_least_privilege(cluster: Any, namespace: str, release_ns: str,
                                              tmp_path: Path) -> None:
    release = "baton-cw"
    install(cluster, release, release_ns)
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    role = rbac.read_cluster_role(release)
    assert not [r for r in role.rules if "secrets" in r.resources], "readSecrets auto: no cluster-wide Secrets"
    assert rbac.read_cluster_role_binding(release).subjects[0].namespace == release_ns
    user = f"system:serviceaccount:{release_ns}:{release}"
    where = {"any ns": namespace, "release ns": release_ns, "all namespaces": "*", "cluster": None}
    rows: list[Row] = [(v, r, "any ns", True) for v, r in GRANTED]
    rows += [(v, r, "all namespaces", True) for v, r in
             (("list", "toolruntimes.baton.dev"), ("watch", "pods"), ("list", "configmaps"))]
    rows += [(v, "secrets", place, False) for v in ("get", "list", "watch")
             for place in ("any ns", "all namespaces")]
    rows += [(v, r, "any ns", False) for v, r in DENIED]
    rows += [(v, r, "cluster", False) for v, r in CLUSTER_DENIED]
    table = check_matrix(cluster, user, rows, where, "cluster scope (defaults: watch all, readSecrets auto)")
    (tmp_path / "can-i-cluster.txt").write_text(table)
    # The digest key: the chart's Secret, mounted (the operator itself may not read it), random,
    # and the same after an upgrade (lookup): a new key would hand off every runtime with config.
    core = client.CoreV1Api(cluster.api_client)
    key = core.read_namespaced_secret(f"{release}-digest-key", release_ns).data["key"]
    assert len(base64.b64decode(key)) == 64
    assert not can_i(cluster, user, "get", "secrets", release_ns)

    upgraded = cluster.helm("upgrade", release, str(CHART), "-n", release_ns, "--reuse-values",
                            "--set", "rbac.readSecrets=always", "--wait", "--timeout", "60s", timeout=90)
    assert upgraded.returncode == 0
    assert core.read_namespaced_secret(f"{release}-digest-key", release_ns).data["key"] == key, \
        "the upgrade kept the digest key"
    assert can_i(cluster, user, "list", "secrets", "*"), "readSecrets=always grants Secrets cluster-wide"
    assert not can_i(cluster, user, "create", "secrets", namespace)
    uninstall_leaves_nothing(cluster, release, [release_ns])


def test_cluster_wide_operator_on_its_token(cluster: Any, operators: Start, rts: Runtimes,
                                            pod_watch: PodWatch, namespace: str,
                                            release_ns: str, tmp_path: Path) -> None:
    """The default (all namespaces) install is enough for a handoff, and its log shows no 403."""
    release = "baton-cwop"
    install(cluster, release, release_ns)
    env = deployment_env(cluster, release_ns, release)
    assert env["BATON_NAMESPACES"] == ""
    op = operator_as_chart_sa(cluster, operators, tmp_path, release_ns, release, env, [])
    handoff_scenario(rts, pod_watch, op)
    # The default grants no Secret reads: a runtime referencing one still runs, and says that
    # the Secret's changes will start no handoff.
    rts.core.create_namespaced_secret(namespace, {"metadata": {"name": "api-key"}, "data": {"k": "dg=="}})
    m = runtime_manifest("sec")
    m["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "K", "valueFrom": {"secretKeyRef": {"name": "api-key", "key": "k"}}}]
    rts.create(m)
    rts.wait_ready("sec", 1, timeout=30)
    wait_for(lambda: (rts.condition("sec", "Degraded") or {}).get("reason") == "ConfigRefUnreadable",
             timeout=15, what="Degraded ConfigRefUnreadable")
    assert "Secret/api-key" in (rts.condition("sec", "Degraded") or {})["message"]
    time.sleep(2)  # let a late watch (re)start log its error, if it has one
    gaps = rbac_denials(op)
    op.kill()
    uninstall_leaves_nothing(cluster, release, [release_ns])
    no_gaps(gaps)


def test_values_typo_fails_helm_install_with_the_schema_message(cluster: Any, release_ns: str) -> None:
    proc = cluster.helm("install", "baton-typo", str(CHART), "-n", release_ns,
                        "--set", "replicaCont=3", check=False, timeout=60)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert "additional properties 'replicaCont' not allowed" in proc.stderr, proc.stderr
    listed = json.loads(cluster.helm("list", "-n", release_ns, "-a", "-o", "json").stdout)
    assert listed == [], "nothing was installed"


@pytest.mark.parametrize("values", [None, CHART / "ci" / "openshift-values.yaml"],
                         ids=["default", "openshift"])
def test_operator_and_helm_test_pods_pass_restricted_admission(cluster: Any, release_ns: str,
                                                               values: Path | None, tmp_path: Path) -> None:
    """The operator's pod (from the Deployment's template) and the `helm test` Pod, rendered with
    the default values and with OpenShift's (no fixed UID), are admitted by a namespace that
    enforces Pod Security "restricted" (server-side dry run: admission runs, nothing is stored).
    kwok runs no containers, so `helm test` itself cannot run here."""
    from harness.chart import by_kind, one, render

    objs = render(files=[values] if values else [], namespace=release_ns)
    template = one(objs, "Deployment")["spec"]["template"]
    operator_pod = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "operator-dry-run", "labels": template["metadata"]["labels"]},
                    "spec": template["spec"]}
    [test_pod] = [o for o in by_kind(objs, "Pod") if o["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    sa = tmp_path / "sa.json"  # the ServiceAccount admission looks up for the operator's pod
    sa.write_text(json.dumps(one(objs, "ServiceAccount")))
    cluster.kubectl("apply", "-n", release_ns, "-f", str(sa))
    for pod in (operator_pod, test_pod):
        path = tmp_path / f"{pod['metadata']['name']}.json"
        path.write_text(json.dumps(pod))
        res = cluster.kubectl("create", "--dry-run=server", "-n", release_ns, "-f", str(path), check=False)
        assert res.returncode == 0, f"{pod['metadata']['name']} refused: {res.stderr}"
        assert "violate" not in res.stderr and "Warning" not in res.stderr, res.stderr
    # The check is real: a pod with a fixed root UID is refused by the same namespace.
    rooted = json.loads(json.dumps(test_pod))
    rooted["spec"]["securityContext"] = {"runAsUser": 0}
    path = tmp_path / "rooted.json"
    path.write_text(json.dumps(rooted))
    res = cluster.kubectl("create", "--dry-run=server", "-n", release_ns, "-f", str(path), check=False)
    assert res.returncode != 0 and "violates PodSecurity" in res.stderr, res.stderr


def test_the_operators_account_may_write_only_batons_own_leases_pods_and_services(
        cluster: Any, namespace: str, release_ns: str) -> None:
    """RBAC lets the cluster-wide account update every Lease of the cluster; the chart's
    ValidatingAdmissionPolicy (rbac.confineWrites) confines it to Baton's own objects. Turned off,
    the same write to a node Lease goes through: the policy is what refuses it."""
    release = "baton-vap"
    install(cluster, release, release_ns)
    admin_coord = client.CoordinationV1Api(cluster.api_client)
    admin_core = client.CoreV1Api(cluster.api_client)
    node_lease = admin_coord.create_namespaced_lease("kube-node-lease", {
        "metadata": {"name": f"vap-node-{uuid.uuid4().hex[:6]}"}, "spec": {"holderIdentity": "kwok-a"}})
    name = node_lease.metadata.name
    admin_core.create_namespaced_pod(namespace, {
        "metadata": {"name": "foreign", "labels": {"baton.dev/runtime": "rt"}},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/tool:1"}]}})
    as_operator = cluster.client_for_token(cluster.sa_token(release_ns, release))  # its credentials only
    coord, core = client.CoordinationV1Api(as_operator), client.CoreV1Api(as_operator)

    def refused(call: Callable[[], Any]) -> str:
        try:
            call()
        except ApiException as e:
            return f"{e.status} {e.body}"
        return "accepted"

    def node_lease_update() -> str:
        lease = admin_coord.read_namespaced_lease(name, "kube-node-lease")
        lease.spec.holder_identity = "baton-was-here"
        return refused(lambda: coord.replace_namespaced_lease(name, "kube-node-lease", lease))

    # The policy is live once the API server's policy informer has it: bounded wait for the first denial.
    got = wait_for(lambda: (lambda r: r if r.startswith("403") else None)(node_lease_update()),
                   timeout=30, what="the node Lease update denied by the policy")
    assert "only its lifecycle Leases" in got and name in got, got
    assert refused(lambda: coord.delete_namespaced_lease(name, "kube-node-lease")).startswith("403")
    assert refused(lambda: coord.create_namespaced_lease(namespace, {
        "metadata": {"name": "baton-unlabelled"}, "spec": {}})).startswith("403")
    assert refused(lambda: coord.create_namespaced_lease(namespace, {
        "metadata": {"name": "other", "labels": {"baton.dev/runtime": "rt"}}, "spec": {}})).startswith("403")
    ours = coord.create_namespaced_lease(namespace, {
        "metadata": {"name": "baton-rt", "labels": {"baton.dev/runtime": "rt"}}, "spec": {}})
    coord.delete_namespaced_lease(ours.metadata.name, namespace)
    # Sharding's Leases (baton.k8s.shardleases): written in the release namespace only.
    shard = {"metadata": {"name": "baton-range.16.0", "labels": {"baton.dev/component": "shard-range"}},
             "spec": {"holderIdentity": "op"}}
    assert refused(lambda: coord.create_namespaced_lease(namespace, shard)).startswith("403")
    mine = coord.create_namespaced_lease(release_ns, shard)
    mine.spec.holder_identity = None
    coord.replace_namespaced_lease(mine.metadata.name, release_ns, mine)
    coord.delete_namespaced_lease(mine.metadata.name, release_ns)
    # The per-runtime metrics reporter's Lease (baton.k8s.metricslease) likewise.
    metrics_lease = coord.create_namespaced_lease(release_ns, {
        "metadata": {"name": "baton-runtime-metrics.test", "labels": {"baton.dev/component": "runtime-metrics"}},
        "spec": {"holderIdentity": "op"}})
    coord.delete_namespaced_lease(metrics_lease.metadata.name, release_ns)
    pod_denied = refused(lambda: core.delete_namespaced_pod("foreign", namespace))
    assert pod_denied.startswith("403") and "a ToolRuntime controls" in pod_denied, pod_denied
    assert refused(lambda: core.patch_namespaced_pod("foreign", namespace, {
        "metadata": {"labels": {"baton.dev/serving": "false"}}})).startswith("403")
    assert refused(lambda: core.create_namespaced_pod(namespace, {
        "metadata": {"name": "unowned"},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/tool:1"}]}})).startswith("403")
    assert refused(lambda: core.create_namespaced_service(namespace, {
        "metadata": {"name": "unowned"}, "spec": {"ports": [{"port": 80}]}})).startswith("403")

    upgraded = cluster.helm("upgrade", release, str(CHART), "-n", release_ns, "--reuse-values",
                            "--set", "rbac.confineWrites=false", "--wait", "--timeout", "60s", timeout=90)
    assert upgraded.returncode == 0
    wait_for(lambda: node_lease_update() == "accepted", timeout=30,
             what="the same update accepted once the policy is gone (RBAC alone allows it)")
    admin_coord.delete_namespaced_lease(name, "kube-node-lease")
    uninstall_leaves_nothing(cluster, release, [release_ns])
