"""The Helm chart without a cluster: lint, render, schema, CRD copy, RBAC shape, security context.

helm is the pinned build from `make tools`; nothing here talks to an API server.
"""
from __future__ import annotations

import base64
import importlib
import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.chart import (CHART, CI_VALUES, CRDS, ROOT, by_kind, container_env, helm,
                           one, render)

OPERATOR = ROOT / "operator" / "baton"
VALUE_SETS = [None, *CI_VALUES]


def _ids(v: Path | None) -> str:
    return "default" if v is None else v.name


# --- lint and template -----------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS, ids=_ids)
def test_lint_and_template(values: Path | None) -> None:
    files = [values] if values else []
    lint = helm("lint", str(CHART), "--strict", *[a for f in files for a in ("-f", str(f))])
    assert "0 chart(s) failed" in lint.stdout
    objs = render(files=files)
    assert objs, "nothing rendered"
    for o in objs:
        assert o.get("apiVersion") and o.get("kind") and o["metadata"].get("name"), o
    kinds = {o["kind"] for o in objs}
    assert "Deployment" in kinds
    # One kind per template file (Role/RoleBinding: one object per watched namespace).
    out = helm("template", "baton", str(CHART), "-n", "baton-system",
               *[a for f in files for a in ("-f", str(f))]).stdout
    per_source: dict[str, set[str]] = {}
    for doc in out.split("\n---\n"):
        m = re.search(r"^# Source: (\S+)", doc, re.M)
        body = yaml.safe_load(doc)
        if m and body:
            per_source.setdefault(m.group(1), set()).add(body["kind"])
    assert all(len(k) == 1 for k in per_source.values()), per_source


def test_template_files_hold_one_kind_each() -> None:
    paths = sorted((CHART / "templates").rglob("*.yaml"))
    assert CHART / "templates" / "tests" / "test-metrics.yaml" in paths
    for path in paths:
        kinds = set(re.findall(r"^kind: (\w+)", path.read_text(), re.M))
        assert len(kinds) <= 1, f"{path.name} declares several kinds: {kinds}"


# --- the CRD: one source -----------------------------------------------------------------------


@pytest.mark.parametrize("source, copied", CRDS, ids=[s.name for s, _ in CRDS])
def test_chart_crd_copy_is_byte_identical_to_crds_dir(source: Path, copied: Path) -> None:
    assert copied.read_bytes() == source.read_bytes(), (
        f"{copied.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: "
        f"cp {source.relative_to(ROOT)} {copied.relative_to(ROOT)}")


def test_rendered_crds_are_the_source_crds_plus_release_metadata() -> None:
    rendered = {o["metadata"]["name"]: o for o in by_kind(render(), "CustomResourceDefinition")}
    sources = [yaml.safe_load(source.read_text()) for source, _ in CRDS]
    assert set(rendered) == {s["metadata"]["name"] for s in sources} == {
        "toolruntimes.baton.dev", "toolruntimeclaims.baton.dev"}
    for source in sources:
        stripped = copy.deepcopy(rendered[source["metadata"]["name"]])
        meta = stripped["metadata"]
        assert meta.pop("annotations") == {"helm.sh/resource-policy": "keep"}
        assert meta.pop("labels")["app.kubernetes.io/managed-by"] == "Helm"
        assert stripped == source


def test_crd_keep_can_be_turned_off_and_crd_left_out() -> None:
    crds = by_kind(render({"crds.keep": "false"}), "CustomResourceDefinition")
    assert len(crds) == 2
    for rendered in crds:
        assert "helm.sh/resource-policy" not in (rendered["metadata"].get("annotations") or {})
    assert not by_kind(render({"crds.create": "false"}), "CustomResourceDefinition")


# --- values schema -------------------------------------------------------------------------------


def test_values_schema_is_generated_and_closed() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "chart-schema.py"), "--check"])
    assert proc.returncode == 0, "values.schema.json is stale: run python3 hack/chart-schema.py"
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            # global: a parent chart's; affinity: passed through, validated by the API server.
            if node.get("type") == "object" and path not in ("/global", "/affinity"):
                ap = node.get("additionalProperties")
                if ap is not False and not (isinstance(ap, dict) and ap.get("type") == "string"):
                    open_objects.append(path or "/")
            for key in ("properties",):
                for k, v in (node.get(key) or {}).items():
                    walk(v, f"{path}/{k}")
            if isinstance(node.get("items"), dict):
                walk(node["items"], f"{path}[]")
            for alt in node.get("oneOf", []):
                walk(alt, path)
    walk(schema, "")
    assert not open_objects, f"objects the schema leaves open: {open_objects}"


def test_default_values_cover_the_schema() -> None:
    """values.yaml and the schema name the same keys (no undocumented or unvalidated field)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def keys(node: Any, prefix: str = "") -> set[str]:
        out = set()
        for k, v in node.items():
            out.add(prefix + k)
            if isinstance(v, dict):
                out |= keys(v, prefix + k + ".")
        return out

    def schema_keys(node: dict[str, Any], prefix: str = "") -> set[str]:
        out = set()
        for k, v in (node.get("properties") or {}).items():
            out.add(prefix + k)
            if v.get("type") == "object" and "properties" in v:
                out |= schema_keys(v, prefix + k + ".")
        return out

    free_maps = {"serviceAccount.annotations", "podAnnotations", "podLabels", "nodeSelector", "affinity",
                 "serviceMonitor.labels", "prometheusRule.labels", "prometheusRule.additionalAlertLabels"}
    in_values = {k for k in keys(values) if not any(k.startswith(f + ".") for f in free_maps)}
    in_schema = schema_keys(schema) - {"global"}
    # Keys the schema knows but values.yaml leaves unset on purpose (optional quantities and
    # optional Kubernetes securityContext fields).
    optional = {k for k in in_schema - in_values
                if k.startswith(("resources.", "gateway.resources.", "podSecurityContext.", "containerSecurityContext."))}
    assert in_values - in_schema == set(), "values.yaml keys missing from the schema"
    assert in_schema - in_values - optional == set(), "schema keys missing from values.yaml"


def test_every_value_is_documented() -> None:
    """Field by field: each key in values.yaml has a comment on the line right above it (the
    cpu/memory quantities under resources excepted)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z][\w-]*):", line)
        if not m or (i and lines[i - 1].strip().startswith("#")):
            continue
        if m.group(1) and any(lines[k].startswith("resources:") for k in range(i - 1, max(-1, i - 6), -1)):
            continue
        undocumented.append(f"line {i + 1}: {m.group(2)}")
    assert not undocumented, f"values without a comment: {undocumented}"


@pytest.mark.parametrize("args, message", [
    (["--set", "replicaCont=3"], "additional properties 'replicaCont' not allowed"),
    (["--set", "rbac.readSecret=always"], "additional properties 'readSecret' not allowed"),
    (["--set", "rbac.readSecrets=yes"], "rbac/readSecrets"),
    (["--set", "maxDrainSeconds=0"], "maxDrainSeconds"),
    (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
    (["--set-json", 'watch={"namespaces":["Bad_NS"]}'], "does not match pattern"),
    (["--set", "prometheusRule.alerts.cleanupFailedFor=five minutes"], "cleanupFailedFor"),
    (["--set", "gateway.enable=true"], "additional properties 'enable' not allowed"),
    (["--set", "gateway.ports.call=9000"], "additional properties 'call' not allowed"),
    (["--set", "gateway.leaseSeconds=1"], "gateway/leaseSeconds"),
    (["--set", "gateway.headerSeconds=0"], "gateway/headerSeconds"),
    (["--set-json", 'gateway={"allowedCidrs":["10.0.0.0"]}'], "does not match pattern"),
])
def test_values_typo_fails_with_the_schema_message(args: list[str], message: str) -> None:
    proc = helm("template", "baton", str(CHART), *args, check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr


# --- the Deployment --------------------------------------------------------------------------


def test_deployment_is_restricted_and_probed() -> None:
    dep = one(render(), "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    psc = pod["securityContext"]
    assert psc == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                   "seccompProfile": {"type": "RuntimeDefault"}}
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                  "capabilities": {"drop": ["ALL"]}}
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
    for v in pod.get("volumes", []):
        assert set(v) <= {"name", "emptyDir", "configMap", "secret", "projected"}, v
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["startupProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    env = container_env(dep)
    # No host: every address of both families (bindAddress, default empty).
    assert env["BATON_HEALTH_BIND"] == f":{ports['health']}"
    assert env["BATON_METRICS_BIND"] == f":{ports['metrics']}"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["BATON_NAMESPACES"] == ""
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    [tsc] = pod["topologySpreadConstraints"]
    assert tsc["topologyKey"] == "kubernetes.io/hostname"
    assert tsc["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    pdb = one(render(), "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


@pytest.mark.parametrize("drain, floor, grace", [
    (30, 30, 70),     # default: 2 x (30 + 5)
    (1, 30, 30),      # a short drain: the floor
    (120, 30, 250),   # 2 x (120 + 5)
    (10, 300, 300),   # a floor above the computed value wins
    (3600, 30, 7210),
])
def test_termination_grace_is_at_least_twice_drain_plus_five(drain: int, floor: int, grace: int) -> None:
    dep = one(render({"maxDrainSeconds": str(drain), "terminationGracePeriodSeconds": str(floor)}),
              "Deployment")
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
    assert container_env(dep)["BATON_SHUTDOWN_GRACE_SECONDS"] == str(drain + 5)
    assert grace >= 2 * (drain + 5) or grace == floor


def test_extra_env_and_namespaced_watch_reach_the_container() -> None:
    dep = one(render(files=[CHART / "ci" / "namespaced-values.yaml"]), "Deployment")
    env = container_env(dep)
    assert env["BATON_NAMESPACES"] == "agents,browsers"
    assert env["BATON_BACKOFF_BASE_SECONDS"] == "3"
    assert env["BATON_LOG_LEVEL"] == "DEBUG"


# --- RBAC ---------------------------------------------------------------------------------------


def _rules(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for o in by_kind(objs, kind) for r in o["rules"]]


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def test_rbac_cluster_scope_has_no_wildcard_exec_or_secret_reads() -> None:
    objs = render()
    assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")
    grants = _grants(_rules(objs, "ClusterRole"))
    assert not [g for g in grants if "*" in g], "wildcards granted"
    assert not [g for g in grants if g[1].startswith("pods/") or g[1] in ("nodes", "namespaces")]
    assert not [g for g in grants if g[1] == "secrets"], "cluster-wide Secret reads by default"
    assert not [g for g in grants if g[1] == "customresourcedefinitions"]
    assert ("baton.dev", "toolruntimes", "delete") not in grants
    crb = one(objs, "ClusterRoleBinding")
    sa = one(objs, "ServiceAccount")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                "namespace": "baton-system"}]
    always = _grants(_rules(render({"rbac.readSecrets": "always"}), "ClusterRole"))
    assert {g for g in always if g[1] == "secrets"} == {("", "secrets", v) for v in ("get", "list", "watch")}


def test_rbac_namespaced_scope_is_a_role_per_namespace() -> None:
    objs = render(files=[CHART / "ci" / "namespaced-values.yaml"])
    assert not by_kind(objs, "ClusterRole") and not by_kind(objs, "ClusterRoleBinding")
    # Leases in the release namespace: the gateway replicas' listed (baton.k8s.gateways.RBAC), the
    # per-runtime metrics Lease held (baton.k8s.metricslease.RBAC).
    gateways = [o for o in by_kind(objs, "Role") if o["metadata"]["name"].endswith("-gateways")]
    [gw_role] = gateways
    assert gw_role["metadata"]["namespace"] == "baton-system"
    assert _grants(gw_role["rules"]) == {(g, r, v) for m in ("baton.k8s.gateways", "baton.k8s.metricslease")
                                         for g, r, verbs in importlib.import_module(m).RBAC for v in verbs}
    [gw_binding] = [o for o in by_kind(objs, "RoleBinding") if o["metadata"]["name"].endswith("-gateways")]
    assert gw_binding["roleRef"]["name"] == gw_role["metadata"]["name"]
    assert gw_binding["subjects"][0]["namespace"] == "baton-system"
    roles = {o["metadata"]["namespace"]: o for o in by_kind(objs, "Role") if o not in gateways}
    bindings = {o["metadata"]["namespace"]: o for o in by_kind(objs, "RoleBinding") if o is not gw_binding}
    assert set(roles) == set(bindings) == {"agents", "browsers"}
    for ns, role in roles.items():
        grants = _grants(role["rules"])
        assert {g for g in grants if g[1] == "secrets"} == {("", "secrets", v) for v in ("get", "list", "watch")}
        assert bindings[ns]["roleRef"]["name"] == role["metadata"]["name"]
        assert bindings[ns]["subjects"][0]["namespace"] == "baton-system"
    # Sharding on: the membership and range Leases are written there too (baton.k8s.shardleases.RBAC).
    sharded = render(files=[CHART / "ci" / "namespaced-values.yaml"], values={"operator.shardRanges": "16"})
    [sys_role] = [o for o in by_kind(sharded, "Role") if o["metadata"]["name"].endswith("-gateways")]
    assert _grants(sys_role["rules"]) == {(g, r, v) for module in ("baton.k8s.gateways", "baton.k8s.metricslease", "baton.k8s.shardleases")
                                          for g, r, verbs in importlib.import_module(module).RBAC for v in verbs}
    never = render(files=[CHART / "ci" / "namespaced-values.yaml"], values={"rbac.readSecrets": "never"})
    assert not [g for g in _grants(_rules(never, "Role")) if g[1] == "secrets"]


# The operator's API calls, declared next to them (each baton.k8s module and the informers in
# baton.cache.views carry RBAC = ((apiGroup, resource, verbs), ...)), and checked against the
# calls each module makes: an HTTP method outside its declaration fails here.
HTTP_VERBS = {"GET": {"get", "list"}, "POST": {"create"}, "PATCH": {"patch"}, "PUT": {"update"},
              "DELETE": {"delete"}}
RBAC_MODULES = ["baton.k8s.pods", "baton.k8s.leases", "baton.k8s.runtimes", "baton.k8s.services",
                "baton.k8s.events", "baton.k8s.configrefs", "baton.k8s.claims", "baton.k8s.gateways",
                "baton.k8s.metricslease", "baton.k8s.shardleases", "baton.k8s.labels", "baton.cache.views",
                "baton.k8s.networkpolicies"]
# Granted only with gateway.isolateToolPods (and the gateway): the tool-pod NetworkPolicies.
ISOLATION_VALUES = {"gateway.enabled": "true", "gateway.isolateToolPods": "true"}


def isolation_rbac() -> set[tuple[str, str, str]]:
    return {(g, r, v) for g, r, verbs in (*importlib.import_module("baton.k8s.networkpolicies").RBAC,
                                          *importlib.import_module("baton.cache.views").POLICY_RBAC) for v in verbs}


def operator_api_calls() -> set[tuple[str, str, str]]:
    needed: set[tuple[str, str, str]] = isolation_rbac()
    for name in RBAC_MODULES:
        module = importlib.import_module(name)
        declared = {(g, r, v) for g, r, verbs in module.RBAC for v in verbs}
        assert declared, f"{name} declares no RBAC"
        text = Path(module.__file__).read_text()
        methods = set(re.findall(r'request\(\s*"([A-Z]+)"', text)) | ({"GET"} if "get_or_none(" in text else set())
        verbs = {v for _, _, v in declared}
        for method in methods:
            assert HTTP_VERBS[method] & verbs, f"{name} sends {method} but declares only {sorted(verbs)}"
        needed |= declared
    return needed


def test_rbac_grants_every_call_the_operator_makes() -> None:
    needed = operator_api_calls()
    assert ("", "pods", "create") in needed and ("baton.dev", "toolruntimes", "watch") in needed
    granted = _grants(_rules(render({"rbac.readSecrets": "always", **ISOLATION_VALUES}), "ClusterRole"))
    assert ("", "pods", "get") in needed and ("", "services", "watch") in needed
    missing = needed - granted
    assert not missing, f"the operator calls these, the chart does not grant them: {sorted(missing)}"
    unused = {g for g in granted - needed if g[1] != "toolruntimes/finalizers"}
    assert not unused, f"granted but never called by the operator (least privilege): {sorted(unused)}"


@pytest.mark.parametrize("namespaced", [False, True])
def test_tool_pod_isolation_is_granted_and_configured_only_when_on(namespaced: bool) -> None:
    """gateway.isolateToolPods: the networkpolicies rule (exactly what the code declares) in the
    operator's ClusterRole (or each Role), and BATON_ISOLATE_TOOL_PODS with the operator pods'
    selector labels; off by default, and off without the gateway whatever the value says."""
    files = [CHART / "ci" / "namespaced-values.yaml"] if namespaced else []
    kind = "Role" if namespaced else "ClusterRole"
    for values in ({}, {"gateway.enabled": "true"}, {"gateway.isolateToolPods": "true"}):
        objs = render(values, files=files)
        assert not [g for g in _grants(_rules(objs, kind)) if g[1] == "networkpolicies"], values
        [operator] = [o for o in by_kind(objs, "Deployment") if not _is_gateway(o)]
        assert not {"BATON_ISOLATE_TOOL_PODS", "BATON_OPERATOR_POD_LABELS"} & set(container_env(operator)), values
    objs = render(ISOLATION_VALUES, files=files)
    roles = [o for o in by_kind(objs, kind) if not _is_gateway(o) and not o["metadata"]["name"].endswith("-gateways")]
    assert roles
    for role in roles:
        assert {g for g in _grants(role["rules"]) if g[1] == "networkpolicies"} == isolation_rbac()
    [operator] = [o for o in by_kind(objs, "Deployment") if not _is_gateway(o)]
    env = container_env(operator)
    assert env["BATON_ISOLATE_TOOL_PODS"] == "true"
    selector = operator["spec"]["selector"]["matchLabels"]
    assert env["BATON_OPERATOR_POD_LABELS"] == ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    # What the operator parses is what selects its pods (never the gateway's).
    parsed = importlib.import_module("baton.settings").Settings.from_env({"BATON_ISOLATE_TOOL_PODS": env["BATON_ISOLATE_TOOL_PODS"],
                                             "BATON_OPERATOR_POD_LABELS": env["BATON_OPERATOR_POD_LABELS"]})
    assert parsed.isolate_tool_pods and dict(parsed.operator_pod_labels) == selector
    assert dict(parsed.operator_pod_labels) != _gateway_deployment(objs)["spec"]["selector"]["matchLabels"]


# --- monitoring ----------------------------------------------------------------------------------


def test_service_monitor_keeps_runtime_namespace_label() -> None:
    objs = render(files=[CHART / "ci" / "monitoring-values.yaml"])
    sm = one(objs, "ServiceMonitor")
    svc = one(objs, "Service")
    [ep] = sm["spec"]["endpoints"]
    assert ep["honorLabels"] is True and ep["port"] == svc["spec"]["ports"][0]["name"]
    for k, v in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][k] == v
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_monitoring_objects_are_opt_in() -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}


EXPECTED_ALERTS = {"BatonCleanupFailedHeld", "BatonTransitionStuck", "BatonForceRecovery",
                   "BatonLeaseConflictsRising", "BatonOperatorDown", "BatonDrainIncompleteRising",
                   "BatonRetirementBlocked", "BatonRuntimeNotReady", "BatonRuntimeDegraded",
                   "BatonOperatorMemoryNearLimit", "BatonApiErrorRatioHigh", "BatonWatchErrorsRising",
                   "BatonPassesCrashing", "BatonGatewayRefusingCalls", "BatonWakeFailing", "BatonHookFailed"}


def test_every_alert_has_summary_description_and_a_runbook_section() -> None:
    rule = one(render({"gateway.enabled": "true"}, files=[CHART / "ci" / "monitoring-values.yaml"]), "PrometheusRule")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} == EXPECTED_ALERTS
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", runbooks, re.M)}
    base = "https://git.example.internal/platform/baton/-/blob/main/docs/runbooks.md"
    for a in alerts:
        ann = a["annotations"]
        assert ann["summary"] and ann["description"], a["alert"]
        assert ann["runbook_url"] == f"{base}#{a['alert'].lower()}"
        assert a["alert"].lower() in anchors, f"docs/runbooks.md has no section {a['alert']}"
        assert a["labels"]["severity"] in ("critical", "warning")
        assert a["labels"]["team"] == "platform"


# --- the gateway (gateway.enabled) ---------------------------------------------------------------

GATEWAY_KINDS = {"Deployment", "PodDisruptionBudget", "Service", "ServiceAccount", "ClusterRole",
                 "ClusterRoleBinding", "Role", "RoleBinding", "ServiceMonitor", "NetworkPolicy"}


def _is_gateway(o: dict[str, Any]) -> bool:
    # By its labels, not its name: the operator's own Role "<fullname>-gateways" (it lists the
    # gateway Leases) is not the gateway's.
    return (o["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == "baton-gateway"


def _gateway_objs(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if _is_gateway(o)]


def test_gateway_is_off_by_default_and_every_object_appears_when_enabled() -> None:
    off = render(files=[CHART / "ci" / "monitoring-values.yaml"], values={"gateway.networkPolicy.enabled": "true"})
    assert _gateway_objs(off) == []
    on = render(files=[CHART / "ci" / "monitoring-values.yaml"],
                values={"gateway.enabled": "true", "gateway.networkPolicy.enabled": "true"})
    gw = {(o["kind"], o["metadata"]["name"]) for o in _gateway_objs(on)}
    assert gw == {("Deployment", "baton-gateway"), ("PodDisruptionBudget", "baton-gateway"),
                  ("Service", "baton-gateway"), ("Service", "baton-gateway-metrics"),
                  ("ServiceAccount", "baton-gateway"), ("ClusterRole", "baton-gateway"),
                  ("ClusterRoleBinding", "baton-gateway"), ("Role", "baton-gateway-registration"),
                  ("RoleBinding", "baton-gateway-registration"), ("ServiceMonitor", "baton-gateway"),
                  ("NetworkPolicy", "baton-gateway"), ("Secret", "baton-gateway-admin-key")}
    # Everything else is the same as with the gateway off (plus its alert in the PrometheusRule).
    rest = lambda objs: sorted((o["kind"], o["metadata"]["name"]) for o in objs if not _is_gateway(o))  # noqa: E731
    assert rest(on) == rest(off)
    # The NetworkPolicy is on by default (issue 41), off only when asked.
    assert "NetworkPolicy" in {o["kind"] for o in render({"gateway.enabled": "true"})}
    assert "NetworkPolicy" not in {o["kind"] for o in render({"gateway.enabled": "true",
                                                               "gateway.networkPolicy.enabled": "false"})}


def _gateway_deployment(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [dep] = [o for o in by_kind(objs, "Deployment") if o["metadata"]["name"] == "baton-gateway"]
    return dep


def test_gateway_deployment_is_restricted_probed_and_configured() -> None:
    objs = render({"gateway.enabled": "true"})
    dep = _gateway_deployment(objs)
    [operator] = [o for o in by_kind(objs, "Deployment") if o is not dep]
    spec = dep["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "baton-gateway"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    [c] = pod["containers"]
    assert c["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert c["args"] == ["gateway"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
    for v in pod.get("volumes", []):  # scratch space, and the admin key only
        assert set(v) <= {"name", "emptyDir"} or v["name"] == "gateway-admin-key", v
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["startupProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"calls": 8000, "admin": 8082, "metrics": 8080, "health": 8081}
    env = container_env(dep)
    assert env == {
        "BATON_INSTANCE_ID": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "BATON_SYSTEM_NAMESPACE": "baton-system",
        "BATON_NAMESPACES": "",
        "BATON_GATEWAY_BIND": ":8000",
        "BATON_GATEWAY_ADMIN_BIND": ":8082",
        "BATON_GATEWAY_ALLOWED_CIDRS": "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fd00::/8",
        "BATON_GATEWAY_LEASE_SECONDS": "15",
        "BATON_GATEWAY_STATIC_SECONDS": "120",
        "BATON_GATEWAY_HEADER_SECONDS": "10",
        # The bounds (gateway.limits; docs/gateway.md, "Bounds").
        "BATON_GATEWAY_MAX_HELD": "1000", "BATON_GATEWAY_MAX_HELD_TOTAL": "4000",
        "BATON_GATEWAY_MAX_HELD_BODY_BYTES": "1048576", "BATON_GATEWAY_MAX_HELD_BYTES_PER_RUNTIME": "16777216",
        "BATON_GATEWAY_MAX_BUFFERED_BYTES": "67108864", "BATON_GATEWAY_MAX_CONNECTIONS": "4096",
        "BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT": "1024", "BATON_GATEWAY_BODY_SECONDS": "30",
        "BATON_GATEWAY_MAX_UPSTREAM_CONNECTIONS": "4096", "BATON_GATEWAY_MAX_UPSTREAM_PER_POD": "512",
        "BATON_GATEWAY_STREAM_IDLE_SECONDS": "2",
        "BATON_METRICS_BIND": ":8080",
        "BATON_HEALTH_BIND": ":8081",
        "BATON_SHUTDOWN_GRACE_SECONDS": "25",
        "BATON_LOG_LEVEL": "INFO",
        "BATON_GATEWAY_ADMIN_KEY_FILE": "/etc/baton/gateway-admin-key/key",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # The gateway reads exactly these: each name is one GatewaySettings.from_env knows, and the
    # settings it builds from the rendered values are the chart's (the admin address from POD_IP).
    settings_mod = importlib.import_module("baton.settings")
    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    s = settings_mod.GatewaySettings.from_env({**plain, "BATON_INSTANCE_ID": "baton-gateway-abc", "POD_IP": "10.1.2.3"})
    assert s.identity == "baton-gateway-abc" and s.system_namespace == "baton-system"
    assert s.bind == ("", 8000) and s.admin_bind == ("", 8082)
    assert s.admin_address == "10.1.2.3:8082"
    assert s.lease_seconds == 15 and s.shutdown_grace_seconds == 25.0
    assert [str(n) for n in s.allowed] == env["BATON_GATEWAY_ALLOWED_CIDRS"].split(",")
    source = (OPERATOR / "settings.py").read_text()
    for name in env:
        if name.startswith("BATON_") or name == "POD_IP":
            assert f'"{name}"' in source, f"{name} is not read by baton.settings"
    # Pods of their own: no selector of the operator matches them, and theirs matches no operator pod.
    gw_labels = spec["template"]["metadata"]["labels"]
    op_selector = operator["spec"]["selector"]["matchLabels"]
    assert not all(gw_labels.get(k) == v for k, v in op_selector.items())
    op_labels = operator["spec"]["template"]["metadata"]["labels"]
    assert not all(op_labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items())
    assert all(gw_labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items())
    [tsc] = pod["topologySpreadConstraints"]
    assert tsc["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    [pdb] = [o for o in by_kind(objs, "PodDisruptionBudget") if o["metadata"]["name"] == "baton-gateway"]
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    svc = {o["metadata"]["name"]: o for o in by_kind(objs, "Service")}
    assert svc["baton-gateway"]["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert svc["baton-gateway"]["spec"]["ports"] == [{"name": "calls", "port": 80, "targetPort": "calls", "protocol": "TCP"}]
    assert svc["baton-gateway-metrics"]["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert svc["baton-metrics"]["spec"]["selector"] == op_selector


def test_gateway_values_reach_the_container() -> None:
    dep = _gateway_deployment(render({"gateway.enabled": "true", "gateway.leaseSeconds": "30",
                                      "gateway.ports.calls": "9000", "gateway.ports.admin": "9001",
                                      "gateway.terminationGracePeriodSeconds": "60", "gateway.replicaCount": "3",
                                      "gateway.logLevel": "DEBUG"},
                                     set_json={"gateway.allowedCidrs": ["10.244.0.0/16"], "watch.namespaces": ["agents"],
                                               "gateway.extraEnv": [{"name": "BATON_GATEWAY_MAX_HELD", "value": "50"}]}))
    env = container_env(dep)
    assert env["BATON_GATEWAY_LEASE_SECONDS"] == "30"
    assert env["BATON_GATEWAY_BIND"] == ":9000" and env["BATON_GATEWAY_ADMIN_BIND"] == ":9001"
    assert env["BATON_GATEWAY_ALLOWED_CIDRS"] == "10.244.0.0/16"
    assert env["BATON_NAMESPACES"] == "agents"
    assert env["BATON_SHUTDOWN_GRACE_SECONDS"] == "55"
    assert env["BATON_LOG_LEVEL"] == "DEBUG" and env["BATON_GATEWAY_MAX_HELD"] == "50"
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    clash = helm("template", "baton", str(CHART), "--set", "gateway.enabled=true", "--set", "gateway.ports.admin=8080",
                 check=False)
    assert clash.returncode != 0 and "gateway.ports" in clash.stderr, clash.stderr


def _gateway_needs() -> set[tuple[str, str, str]]:
    """What the gateway's code declares next to its calls (the views' informers, its Lease)."""
    needed = set()
    for name in ("baton.gateway.views", "baton.k8s.registration"):
        module = importlib.import_module(name)
        declared = {(g, r, v) for g, r, verbs in module.RBAC for v in verbs}
        assert declared, f"{name} declares no RBAC"
        needed |= declared
    return needed


def test_gateway_rbac_is_exactly_what_its_code_declares() -> None:
    views = {(g, r, v) for g, r, verbs in importlib.import_module("baton.gateway.views").RBAC for v in verbs}
    lease = {(g, r, v) for g, r, verbs in importlib.import_module("baton.k8s.registration").RBAC for v in verbs}
    assert views and lease and views | lease == _gateway_needs()
    text = (OPERATOR / "k8s" / "registration.py").read_text()
    methods = set(re.findall(r'request\(\s*"([A-Z]+)"', text)) | ({"GET"} if "get_or_none(" in text else set())
    assert methods and all(HTTP_VERBS[m] & {v for _, _, v in lease} for m in methods), methods
    for files, values in (([], {}), ([CHART / "ci" / "namespaced-values.yaml"], {})):
        objs = _gateway_objs(render({"gateway.enabled": "true", **values}, files=files))
        subjects = {(s["kind"], s["name"], s["namespace"]) for o in objs if "subjects" in o for s in o["subjects"]}
        assert subjects == {("ServiceAccount", "baton-gateway", "baton-system")}
        [reg] = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "baton-gateway-registration"]
        assert reg["metadata"]["namespace"] == "baton-system"
        assert _grants(reg["rules"]) == lease
        view_roles = [o for o in objs if o["kind"] in ("Role", "ClusterRole") and o is not reg]
        assert view_roles
        for role in view_roles:
            assert _grants(role["rules"]) == views, role["metadata"]
        if files:  # a list of namespaces: a Role and RoleBinding in each, no ClusterRole
            assert {o["metadata"]["namespace"] for o in view_roles} == {"agents", "browsers"}
            assert all(o["kind"] == "Role" for o in view_roles)
            bindings = [o for o in objs if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == "baton-gateway"]
            assert {o["metadata"]["namespace"] for o in bindings} == {"agents", "browsers"}
        else:
            assert [o["kind"] for o in view_roles] == ["ClusterRole"]
            [crb] = [o for o in objs if o["kind"] == "ClusterRoleBinding"]
            assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "baton-gateway"}
        binding_roles = {(o["roleRef"]["kind"], o["roleRef"]["name"]) for o in objs if "roleRef" in o}
        assert binding_roles <= {(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in ("Role", "ClusterRole")}
    # Read-only on the views: nothing the gateway may write but Leases in its own namespace.
    writes = {g for g in views if g[2] not in ("get", "list", "watch")}
    assert not writes
    # The operator's RBAC is unchanged by the gateway (it only lists the gateway Leases).
    op = lambda objs: sorted(json.dumps(o, sort_keys=True) for o in objs  # noqa: E731
                             if o["kind"] in ("ClusterRole", "Role") and not _is_gateway(o))
    assert op(render({"gateway.enabled": "true"})) == op(render())


def test_gateway_network_policy_lets_only_the_operator_reach_the_admin_port() -> None:
    objs = render({"gateway.enabled": "true", "gateway.networkPolicy.enabled": "true"})
    np = one(objs, "NetworkPolicy")
    dep = _gateway_deployment(objs)
    [operator] = [o for o in by_kind(objs, "Deployment") if o is not dep]
    assert np["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    open_rule, admin_rule = np["spec"]["ingress"]
    assert "from" not in open_rule and {p["port"] for p in open_rule["ports"]} == {"calls", "metrics", "health"}
    assert [p["port"] for p in admin_rule["ports"]] == ["admin"]
    [peer] = admin_rule["from"]
    assert peer == {"podSelector": {"matchLabels": operator["spec"]["selector"]["matchLabels"]}}


@pytest.mark.parametrize("existing", ["", "my-admin-key"])
def test_the_gateway_admin_key_is_mounted_into_the_operator_and_the_gateway(existing: str) -> None:
    """The same Secret (the chart's random one, or gateway.adminKey.existingSecret) in both pods,
    at the file BATON_GATEWAY_ADMIN_KEY_FILE names, readable by the non-root user; none without
    the gateway."""
    objs = render({"gateway.enabled": "true", "gateway.adminKey.existingSecret": existing})
    name = existing or "baton-gateway-admin-key"
    secrets = [o for o in by_kind(objs, "Secret") if o["metadata"]["name"] == "baton-gateway-admin-key"]
    if existing:
        assert secrets == []
    else:
        [secret] = secrets
        assert len(base64.b64decode(secret["data"]["key"])) == 64
    for dep in by_kind(objs, "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        [vol] = [v for v in pod["volumes"] if v["name"] == "gateway-admin-key"]
        assert vol["secret"]["secretName"] == name and vol["secret"]["defaultMode"] & 0o004
        [c] = pod["containers"]
        [mount] = [m for m in c["volumeMounts"] if m["name"] == "gateway-admin-key"]
        assert mount["readOnly"] and container_env(dep)["BATON_GATEWAY_ADMIN_KEY_FILE"] == mount["mountPath"] + "/key"
    off = render()
    assert not [o for o in by_kind(off, "Secret") if "admin-key" in o["metadata"]["name"]]
    assert all("BATON_GATEWAY_ADMIN_KEY_FILE" not in container_env(d) for d in by_kind(off, "Deployment"))


def test_gateway_service_monitor_selects_the_gateway_metrics_service() -> None:
    objs = render({"gateway.enabled": "true"}, files=[CHART / "ci" / "monitoring-values.yaml"])
    [sm] = [o for o in by_kind(objs, "ServiceMonitor") if o["metadata"]["name"] == "baton-gateway"]
    [svc] = [o for o in by_kind(objs, "Service") if o["metadata"]["name"] == "baton-gateway-metrics"]
    for k, v in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][k] == v
    [op_svc] = [o for o in by_kind(objs, "Service") if o["metadata"]["name"] == "baton-metrics"]
    assert not all(op_svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    [ep] = sm["spec"]["endpoints"]
    assert ep["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: "defaults" if v is None else v.name)
def test_the_digest_key_file_is_readable_by_the_operators_user(values: Path | None) -> None:
    """The key Secret's files are root's; without an fsGroup granting the group, the operator's
    non-root user reads them only through the mode's "other" bits (0400 locked it out in a real
    kubelet, and the operator refuses to start without its key)."""
    objs = render(files=[values] if values else [])
    [dep] = [d for d in by_kind(objs, "Deployment") if "gateway" not in d["metadata"]["name"]]
    pod = dep["spec"]["template"]["spec"]
    [vol] = [v for v in pod["volumes"] if v["name"] == "digest-key"]
    mode = vol["secret"]["defaultMode"]
    fs_group = (pod.get("securityContext") or {}).get("fsGroup")
    assert mode & 0o004 or (fs_group is not None and mode & 0o040), (oct(mode), fs_group)
    [c] = pod["containers"]
    assert any(m["name"] == "digest-key" and m.get("readOnly") for m in c["volumeMounts"])


@pytest.mark.parametrize("address,rendered,host", [
    ("0.0.0.0", "0.0.0.0:8081", "0.0.0.0"), ("::", "[::]:8081", "::"), ("fd00::1", "[fd00::1]:8081", "fd00::1"),
])
def test_bind_address_reaches_every_port_and_parses(address: str, rendered: str, host: str) -> None:
    """bindAddress replaces the hard-coded 0.0.0.0 of every port (operator and gateway); an IPv6
    literal is rendered in brackets, which baton.settings reads back."""
    settings_mod = importlib.import_module("baton.settings")
    docs = render({"bindAddress": address, "gateway.enabled": "true"})
    [op_dep] = [o for o in by_kind(docs, "Deployment") if o["metadata"]["name"] == "baton"]
    op_env = container_env(op_dep)
    gw_env = container_env(_gateway_deployment(docs))
    assert op_env["BATON_HEALTH_BIND"] == rendered and gw_env["BATON_HEALTH_BIND"] == rendered
    assert op_env["BATON_METRICS_BIND"] == rendered.replace("8081", "8080")
    assert gw_env["BATON_GATEWAY_BIND"] == rendered.replace("8081", "8000")
    s = settings_mod.Settings.from_env({k: v for k, v in op_env.items() if isinstance(v, str)})
    assert s.health_bind == (host, 8081) and s.metrics_bind == (host, 8080)
    with pytest.raises(AssertionError, match="bindAddress"):
        render({"bindAddress": "[::1]"})  # brackets are the chart's to add: refused by the schema
