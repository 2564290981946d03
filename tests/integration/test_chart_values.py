"""The chart's pod-level values, rendered and asserted one by one (helm template, no cluster):
kubeVersion, image digest, affinity, topologySpreadConstraints, security contexts (also
OpenShift's restricted-v2 without a fixed UID), enableServiceLinks, nodeSelector, labels,
/livez and /readyz probes, the `helm test` Pod and the script it runs, NOTES.txt about Secrets,
and the values schema's descriptions taken from values.yaml's comments."""
from __future__ import annotations

import contextlib
import http.server
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from harness.chart import CHART, ROOT, by_kind, helm, one, render

DIGEST = "sha256:" + "0123456789abcdef" * 4


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objs, "Deployment")["spec"]["template"]["spec"]
    return spec


def helm_test_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [pod] = [o for o in by_kind(objs, "Pod") if o["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    return pod


# --- kubeVersion -----------------------------------------------------------------------------


def test_chart_requires_kubernetes_1_29() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.29.0-0"
    old = helm("template", "baton", str(CHART), "--kube-version", "1.28.9", check=False)
    assert old.returncode != 0 and "kubeVersion" in old.stderr, old.stderr
    # "-0": a managed cluster's pre-release-style version (v1.29.1-gke.1) is admitted.
    for version in ("1.29.0", "v1.29.1-gke.1589000", "1.36.3"):
        helm("template", "baton", str(CHART), "--kube-version", version)


# --- image ---------------------------------------------------------------------------------------


def test_image_tag_defaults_to_app_version_and_digest_wins() -> None:
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    [c] = pod_spec(render())["containers"]
    assert c["image"] == f"baton:{app}"
    [c] = pod_spec(render({"image.repository": "reg.example/baton", "image.tag": "9.9.9",
                           "image.digest": DIGEST}))["containers"]
    assert c["image"] == f"reg.example/baton@{DIGEST}"
    bad = helm("template", "baton", str(CHART), "--set", "image.digest=latest", check=False)
    assert bad.returncode != 0 and "image/digest" in bad.stderr, bad.stderr


# --- scheduling ----------------------------------------------------------------------------------


def test_affinity_is_passed_through_unchanged() -> None:
    assert "affinity" not in pod_spec(render())
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "node-role.kubernetes.io/infra", "operator": "Exists"}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                               "labelSelector": {"matchLabels": {"app": "x"}}}}]},
    }
    assert pod_spec(render(set_json={"affinity": affinity}))["affinity"] == affinity


def test_topology_spread_constraints_are_a_raw_list() -> None:
    objs = render()
    selector = one(objs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert pod_spec(objs)["topologySpreadConstraints"] == [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": selector}}]
    own = {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"team": "platform"}}, "minDomains": 3,
           "matchLabelKeys": ["pod-template-hash"], "nodeTaintsPolicy": "Honor"}
    bare = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
    got = pod_spec(render(set_json={"topologySpreadConstraints": [own, bare]}))["topologySpreadConstraints"]
    assert got == [own, {**bare, "labelSelector": {"matchLabels": selector}}]
    assert "topologySpreadConstraints" not in pod_spec(render(set_json={"topologySpreadConstraints": []}))
    typo = helm("template", "baton", str(CHART), "--set-json",
                'topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"x","whenUnsatisfiable":"Never"}]',
                check=False)
    assert typo.returncode != 0 and "whenUnsatisfiable" in typo.stderr, typo.stderr


def test_node_selector_defaults_to_linux_and_service_links_are_off() -> None:
    spec = pod_spec(render())
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["enableServiceLinks"] is False
    assert pod_spec(render({"enableServiceLinks": "true"}))["enableServiceLinks"] is True
    spec = pod_spec(render(set_json={"nodeSelector": {"pool": "ops"}}))
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "ops"}  # Helm merges maps
    spec = pod_spec(render(set_json={"nodeSelector": {"kubernetes.io/os": None}}))
    assert "nodeSelector" not in spec


# --- security contexts ---------------------------------------------------------------------------


def test_security_contexts_are_overridable() -> None:
    spec = pod_spec(render(set_json={"podSecurityContext": {"fsGroup": 2000, "runAsUser": 1001},
                                     "containerSecurityContext": {"readOnlyRootFilesystem": False}}))
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1001, "runAsGroup": 65532,
                                       "fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    typo = helm("template", "baton", str(CHART), "--set", "podSecurityContext.runAsUsr=1", check=False)
    assert typo.returncode != 0 and "runAsUsr" in typo.stderr, typo.stderr
    root = helm("template", "baton", str(CHART), "--set", "podSecurityContext.runAsUser=-1", check=False)
    assert root.returncode != 0 and "runAsUser" in root.stderr, root.stderr


@pytest.mark.parametrize("how", ["values-file", "set-null"])
def test_openshift_restricted_v2_can_omit_the_uid(how: str) -> None:
    """restricted-v2 assigns the UID from the namespace's range: no runAsUser/runAsGroup may be
    fixed anywhere, in the operator pod or the test pod; the rest of "restricted" stays."""
    if how == "values-file":
        objs = render(files=[CHART / "ci" / "openshift-values.yaml"])
    else:
        objs = render({"podSecurityContext.runAsUser": "null", "podSecurityContext.runAsGroup": "null"})
    for spec in (pod_spec(objs), helm_test_pod(objs)["spec"]):
        text = json.dumps(spec)
        assert "runAsUser" not in text and "runAsGroup" not in text, text
        assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        sc = spec["containers"][0]["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}


# --- labels and probes ---------------------------------------------------------------------------


STANDARD = {"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
            "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"}


def test_pods_carry_the_standard_labels_and_a_component() -> None:
    objs = render(set_json={"podLabels": {"team": "platform", "app.kubernetes.io/name": "hijack"}})
    dep = one(objs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert STANDARD <= set(labels)
    assert labels["app.kubernetes.io/component"] == "operator"
    assert labels["team"] == "platform"
    assert labels["app.kubernetes.io/managed-by"] == "Helm" and labels["app.kubernetes.io/instance"] == "baton"
    # podLabels cannot take a selector label away from the pods.
    for k, v in dep["spec"]["selector"]["matchLabels"].items():
        assert labels[k] == v
    assert dep["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"


def test_liveness_and_readiness_are_separate_endpoints_on_the_health_port() -> None:
    [c] = pod_spec(render({"ports.health": "9091"}))["containers"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["health"] == 9091
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["startupProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


# --- helm test -----------------------------------------------------------------------------------


def test_helm_test_pod_checks_the_metrics_service() -> None:
    objs = render()
    pod = helm_test_pod(objs)
    meta = pod["metadata"]
    assert meta["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert meta["labels"]["app.kubernetes.io/component"] == "test" and STANDARD <= set(meta["labels"])
    # No selector of the release matches it: a ReplicaSet would adopt it, the Service and PDB count it.
    svc = one(objs, "Service")
    for selector in (one(objs, "Deployment")["spec"]["selector"]["matchLabels"], svc["spec"]["selector"],
                     one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]):
        assert not all(meta["labels"].get(k) == v for k, v in selector.items()), selector
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    [c] = spec["containers"]
    assert c["image"] == pod_spec(objs)["containers"][0]["image"]
    assert c["command"] == ["python", "-c", (CHART / "files" / "check-metrics.py").read_text()]
    env = {e["name"]: e["value"] for e in c["env"]}
    port = svc["spec"]["ports"][0]["port"]
    assert env["METRICS_URL"] == f"http://{svc['metadata']['name']}.baton-system.svc:{port}/metrics"
    assert c["securityContext"] == pod_spec(objs)["containers"][0]["securityContext"]
    assert not [p for p in by_kind(render({"metrics.service.enabled": "false"}), "Pod")]


@pytest.fixture
def metrics_endpoint() -> Iterator[str]:
    """The operator's real metrics registry, served by prometheus_client on 127.0.0.1."""
    from prometheus_client import start_http_server

    from baton import metrics

    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.REGISTRY)
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()
    thread.join(5)


def _check(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", (CHART / "files" / "check-metrics.py").read_text()],
                          env={**os.environ, "METRICS_URL": url, "CHECK_SECONDS": "2"},
                          capture_output=True, text=True, timeout=30)


def test_helm_test_script_passes_on_baton_metrics(metrics_endpoint: str) -> None:
    ok = _check(metrics_endpoint)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"ok: GET {metrics_endpoint} -> 200"), ok.stdout


def test_helm_test_script_fails_without_baton_metrics(metrics_endpoint: str) -> None:
    from prometheus_client import CollectorRegistry, Counter, start_http_server

    other = CollectorRegistry()
    Counter("something_else_total", "Not Baton's.", registry=other)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=other)
    try:
        wrong = _check(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        thread.join(5)
    assert wrong.returncode == 1 and "no baton_* metric" in wrong.stderr, wrong.stdout + wrong.stderr
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    refused = _check(f"http://127.0.0.1:{closed}/metrics")
    assert refused.returncode == 1 and "FAIL: GET" in refused.stderr, refused.stderr
    with _serve(404, b"# TYPE baton_handoffs_total counter\n") as url:  # Baton's text, but not a 200
        missing = _check(url)
    assert missing.returncode == 1 and "404" in missing.stderr, missing.stderr


@contextlib.contextmanager
def _serve(status: int, body: bytes) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        thread.join(5)


# --- NOTES.txt -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart that also renders templates/NOTES.txt, unchanged, into a ConfigMap:
    `helm template` never prints NOTES, and `helm install --dry-run=client` (which does) takes
    no --kube-version, so without a cluster it fails the chart's kubeVersion."""
    copy = tmp_path_factory.mktemp("chart") / "baton"
    shutil.copytree(CHART, copy)
    (copy / "files" / "NOTES.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (copy / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data: {notes: {{ tpl (.Files.Get "files/NOTES.txt") . | toJson }}}\n')
    return copy


def notes(chart: Path, *args: str) -> str:
    out = helm("template", "baton", str(chart), "-n", "baton-system", "--show-only", "templates/zz-notes.yaml",
               *args).stdout
    text: str = yaml.safe_load(out)["data"]["notes"]
    assert text.startswith("Baton "), text
    return text


def test_notes_say_what_an_unreadable_secret_does(notes_chart: Path) -> None:
    """The operator (k8s/configrefs.py, lifecycle/steady.py): a referenced Secret it may not read
    blocks nothing; Degraded=True ConfigRefUnreadable says its changes start no handoff."""
    default = notes(notes_chart)
    assert "It may NOT read Secrets (rbac.readSecrets=auto, all namespaces)" in default
    flat = " ".join(default.split())
    assert "still runs, with Degraded=True reason ConfigRefUnreadable" in flat
    assert "a change of that Secret's data starts no handoff" in flat
    assert "will not start" not in flat and "cannot be hashed" not in flat
    namespaced = notes(notes_chart, "--set-json", 'watch={"namespaces":["agents"]}')
    assert "may NOT read Secrets" not in namespaced
    never = notes(notes_chart, "--set-json", 'watch={"namespaces":["agents"]}', "--set", "rbac.readSecrets=never")
    assert "It may NOT read Secrets (rbac.readSecrets=never)" in never
    assert "may NOT read Secrets" not in notes(notes_chart, "--set", "rbac.readSecrets=always")
    assert "may NOT read ConfigMaps" in notes(notes_chart, "--set", "rbac.readConfigMaps=false")


def test_docs_agree_about_unreadable_secrets() -> None:
    doc = " ".join((ROOT / "docs" / "chart.md").read_text().split())
    assert "ConfigRefUnreadable" in doc
    assert "cannot be hashed, and does not start" not in doc


# --- the values schema's descriptions ------------------------------------------------------------


def _schema_module() -> Any:
    """hack/chart-schema.py as a module, executed afresh (a test below rebinds its VALUES)."""
    return importlib.reload(importlib.import_module("hack.chart-schema"))


def test_schema_descriptions_are_the_values_comments() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    mod = _schema_module()
    assert mod.empty_descriptions(schema) == []
    comments = mod.value_comments((CHART / "values.yaml").read_text())
    paths = mod.schema_paths(schema)
    checked = 0
    for key, comment in comments.items():
        if key in paths:
            assert paths[key]["description"] == comment, key
            checked += 1
    assert checked > 80
    assert paths["image.digest"]["description"].startswith('Image digest ("sha256:<64 hex>").')
    assert "\nalways - granted in every watched namespace" in paths["rbac.readSecrets"]["description"]


def test_schema_generation_fails_on_an_undocumented_value(tmp_path: Path) -> None:
    mod = _schema_module()
    text = (CHART / "values.yaml").read_text()
    marker = "# Image digest"
    assert marker in text
    lines = [line for line in text.splitlines()
             if not line.lstrip().startswith(("# Image digest", "# tag is then ignored"))]
    mod.VALUES = tmp_path / "values.yaml"
    mod.VALUES.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as err:
        mod.render()
    assert "values.yaml: image.digest has no comment" in str(err.value)
