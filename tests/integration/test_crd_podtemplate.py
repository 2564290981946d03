"""spec.template.spec is the whole PodSpec (hack/gen_podtemplate_schema.py), proven against the
real API server: a typo is refused at apply naming the field, `kubectl explain` reaches every
container field, the committed CRD is what the generator makes of the OpenAPI the pinned
kube-apiserver serves, and a pod the API server refuses (strict field validation included) ends
as PodRejected with Warning events naming the field, no pod left and no hot loop."""
from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from hack import gen_podtemplate_schema as gen
from harness.operator import OperatorProcess
from harness.runtimes import CRD, GROUP, PLURAL, VERSION, Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


def _typo_manifest(name: str) -> dict[str, Any]:
    m = runtime_manifest(name)
    m["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    m["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    return m


def test_kubectl_apply_refuses_a_typo_in_the_pod_template_naming_it(
        cluster: Any, crd: None, namespace: str, rts: Runtimes, tmp_path: Path) -> None:
    """kubectl's default strict field validation, as for a Deployment: both typos named, nothing stored."""
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(_typo_manifest("typo")))
    proc = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert 'unknown field "spec.template.spec.containers[0].imagePullPolicyy"' in out, out
    assert 'unknown field "spec.template.spec.restartPolicyy"' in out, out
    assert not rts.exists("typo")
    # The same file without the typos applies: the refusal is about the fields, nothing else.
    good = _typo_manifest("typo")
    del good["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"]
    del good["spec"]["template"]["spec"]["restartPolicyy"]
    good["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    path.write_text(yaml.safe_dump(good))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    stored = rts.get("typo")["spec"]["template"]["spec"]["containers"][0]
    assert stored["imagePullPolicy"] == "Always"


def test_the_api_server_refuses_the_typo_with_strict_field_validation(
        cluster: Any, crd: None, namespace: str, rts: Runtimes) -> None:
    """Without kubectl: a create with fieldValidation=Strict is refused naming the field; the
    default (Warn) prunes it rather than storing it."""
    api = CustomObjectsApi(cluster.api_client)
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _typo_manifest("strict"),
                                            field_validation="Strict")
    assert refused.value.status in (400, 422), refused.value
    assert "spec.template.spec.containers[0].imagePullPolicyy" in str(refused.value.body)
    assert not rts.exists("strict")
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _typo_manifest("warned"))
    stored = rts.get("warned")["spec"]["template"]["spec"]
    assert "imagePullPolicyy" not in stored["containers"][0] and "restartPolicyy" not in stored


def test_kubectl_explain_reaches_container_fields(cluster: Any, crd: None) -> None:
    def explained() -> str | None:
        proc = cluster.kubectl("explain", "toolruntime.spec.template.spec.containers.image", check=False)
        return proc.stdout if proc.returncode == 0 else None
    # The CRD's OpenAPI is published a moment after it is Established.
    out = wait_for(explained, timeout=60, what="kubectl explain ...containers.image")
    assert "FIELD: image <string>" in out, out
    deep = cluster.kubectl("explain", "toolruntime.spec.template.spec.containers.securityContext.capabilities.add").stdout
    assert "FIELD: add <[]string>" in deep, deep


def test_the_committed_crd_is_generated_from_the_served_openapi(cluster: Any, crd: None) -> None:
    """The drift check: the pinned kube-apiserver's /openapi/v3/api/v1, through the generator,
    gives the committed CRD byte for byte (regenerate: docs/architecture.md, "The CRD's PodSpec")."""
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    pinned = gen.kubernetes_version()
    if version != pinned:
        pytest.skip(f"the cluster runs {version}, the CRD is generated from the pinned {pinned}")
    served = json.loads(cluster.kubectl("get", "--raw", "/openapi/v3/api/v1", timeout=120).stdout)
    committed = CRD.read_text()
    source = f"Kubernetes {pinned} OpenAPI v3 /api/v1 ({gen.POD_SPEC})"
    assert gen.splice(committed, gen.pod_spec_schema(served), source=source) == committed, (
        "crds/baton.dev_toolruntimes.yaml differs from the served OpenAPI: run hack/gen_podtemplate_schema.py")


def _ephemeral_volume_with_a_metadata_typo() -> dict[str, Any]:
    # Embedded ObjectMeta stays an open object in the CRD, so this typo is stored; only the pod
    # API's strict field validation can name it.
    return {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labelz": {"app": "x"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}


def test_a_pod_the_api_server_refuses_ends_as_pod_rejected_naming_the_field(
        operators: Start, rts: Runtimes) -> None:
    """Two templates the CRD admits and the pod API refuses: an unknown field under an open
    object (refused only because pods are created with fieldValidation=Strict; before, it was
    dropped without a word) and a container name that is no DNS label. Each ends Degraded=True
    PodRejected naming the field, with Warning events naming it, no pod, and attempts that back
    off (a handful in connectSeconds, not one a second)."""
    op = operators("op-a")
    strict = runtime_manifest("strictpod", budgets={"connectSeconds": 20})
    strict["spec"]["template"]["spec"]["volumes"] = [_ephemeral_volume_with_a_metadata_typo()]
    badname = runtime_manifest("badname", budgets={"connectSeconds": 20})
    badname["spec"]["template"]["spec"]["containers"][0]["name"] = "Server_1"
    t0 = time.monotonic()
    rts.create(strict)
    rts.create(badname)
    stored = rts.get("strictpod")["spec"]["template"]["spec"]["volumes"][0]
    assert stored["ephemeral"]["volumeClaimTemplate"]["metadata"] == {"labelz": {"app": "x"}}
    cases = {"strictpod": "spec.volumes[0].ephemeral.volumeClaimTemplate.metadata.labelz",
             "badname": "spec.containers[0].name"}
    for name, field in cases.items():
        wait_for(lambda n=name: (rts.condition(n, "Degraded") or {}).get("reason") == "PodRejected",  # type: ignore[misc]
                 timeout=30, what=f"{name}: Degraded PodRejected")
        msg = (rts.condition(name, "Degraded") or {})["message"]
        assert field in msg, msg
        events = rts.events_posted(name, "PodRejected")
        assert {e.type for e in events} == {"Warning"}, events
        assert all(field in e.message for e in events), [e.message for e in events]
    time.sleep(max(0.0, 20 - (time.monotonic() - t0)))
    for name in cases:
        assert rts.pods(name) == [] and rts.pod(name) is None
    # Back-off 1, 2, 4, 8 s (±20 %) inside connectSeconds=20, per runtime: about 5 each.
    attempts = op.metric("baton_pod_rejections_total")
    assert 2 <= attempts <= 16, attempts
    for name in cases:
        assert 1 <= len(rts.events(name, "PodRejected")) <= 8
        rts.delete(name)
    for name in cases:
        wait_for(lambda n=name: not rts.exists(n), timeout=30, what=f"{name} deleted")  # type: ignore[misc]


def _documented_runtimes() -> list[tuple[str, dict[str, Any]]]:
    """Every ToolRuntime under examples/ and in the ```yaml blocks of README.md and docs/."""
    root = Path(__file__).resolve().parents[2]
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted((root / "examples").glob("*.yaml")):
        found += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "ToolRuntime"]
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S):
            try:
                loaded = list(yaml.safe_load_all(block))
            except yaml.YAMLError:
                continue  # a fragment, not a manifest
            found += [(path.name, d) for d in loaded if isinstance(d, dict) and d.get("kind") == "ToolRuntime"]
    return found


def test_every_documented_runtime_still_validates(cluster: Any, crd: None, namespace: str) -> None:
    """A server-side dry run with strict field validation of every ToolRuntime the repository
    shows (tests/integration/test_examples.py runs examples/ for real)."""
    found = _documented_runtimes()
    assert {where for where, _ in found} >= {"mcp-server.yaml", "README.md", "design.md"}, found
    api = CustomObjectsApi(cluster.api_client)
    for where, doc in found:
        doc = copy.deepcopy(doc)
        doc["metadata"].pop("namespace", None)
        try:
            api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc,
                                                dry_run="All", field_validation="Strict")
        except ApiException as exc:
            raise AssertionError(f"{where}: {doc['metadata']['name']} refused: {exc.body}") from exc
