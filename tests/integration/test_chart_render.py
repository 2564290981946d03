"""The Helm chart without a cluster: lint, render, schema, CRD copy, RBAC shape, security context.

helm is the pinned build from `make tools`; nothing here talks to an API server.
"""
from __future__ import annotations

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
                if k.startswith(("resources.", "podSecurityContext.", "containerSecurityContext."))}
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
    assert env["BATON_HEALTH_BIND"] == f"0.0.0.0:{ports['health']}"
    assert env["BATON_METRICS_BIND"] == f"0.0.0.0:{ports['metrics']}"
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
    # The gateway replicas' Leases in the release namespace: listed only (baton.k8s.gateways.RBAC).
    gateways = [o for o in by_kind(objs, "Role") if o["metadata"]["name"].endswith("-gateways")]
    [gw_role] = gateways
    assert gw_role["metadata"]["namespace"] == "baton-system"
    assert _grants(gw_role["rules"]) == {(g, r, v) for g, r, verbs in importlib.import_module(
        "baton.k8s.gateways").RBAC for v in verbs}
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
    never = render(files=[CHART / "ci" / "namespaced-values.yaml"], values={"rbac.readSecrets": "never"})
    assert not [g for g in _grants(_rules(never, "Role")) if g[1] == "secrets"]


# The operator's API calls, declared next to them (each baton.k8s module and the informers in
# baton.cache.views carry RBAC = ((apiGroup, resource, verbs), ...)), and checked against the
# calls each module makes: an HTTP method outside its declaration fails here.
HTTP_VERBS = {"GET": {"get", "list"}, "POST": {"create"}, "PATCH": {"patch"}, "PUT": {"update"},
              "DELETE": {"delete"}}
RBAC_MODULES = ["baton.k8s.pods", "baton.k8s.leases", "baton.k8s.runtimes", "baton.k8s.services",
                "baton.k8s.events", "baton.k8s.configrefs", "baton.k8s.claims", "baton.k8s.gateways",
                "baton.cache.views"]


def operator_api_calls() -> set[tuple[str, str, str]]:
    needed: set[tuple[str, str, str]] = set()
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
    granted = _grants(_rules(render({"rbac.readSecrets": "always"}), "ClusterRole"))
    assert ("", "pods", "get") in needed and ("", "services", "watch") in needed
    missing = needed - granted
    assert not missing, f"the operator calls these, the chart does not grant them: {sorted(missing)}"
    unused = {g for g in granted - needed if g[1] != "toolruntimes/finalizers"}
    assert not unused, f"granted but never called by the operator (least privilege): {sorted(unused)}"


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
                   "BatonPassesCrashing"}


def test_every_alert_has_summary_description_and_a_runbook_section() -> None:
    rule = one(render(files=[CHART / "ci" / "monitoring-values.yaml"]), "PrometheusRule")
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
