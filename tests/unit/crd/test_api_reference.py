"""docs/api-reference.md is hack/api_reference.py's output over crds/*.yaml, names every field,
and summarises the pod template instead of recursing into it (whatever the CRD embeds there)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator

import yaml

from hack import api_reference

REPO = Path(__file__).resolve().parents[3]
CRD_FILES = sorted((REPO / "crds").glob("*.yaml"))


def test_checked_in_page_is_the_generators_output() -> None:
    page = (REPO / "docs" / "api-reference.md").read_text()
    assert page == api_reference.render(), \
        "docs/api-reference.md differs from the CRDs: run `python hack/api_reference.py` and commit it"
    assert api_reference.main(["--check"]) == 0


def field_paths(node: dict[str, Any], path: str = "") -> Iterator[str]:
    """Every property path of a schema, `[]` for list items, not into the pod template."""
    for name, sub in (node.get("properties") or {}).items():
        p = f"{path}.{name}" if path else name
        yield p
        if p == "spec.template" or p == "metadata":
            continue
        while sub.get("type") == "array":
            sub, p = sub.get("items", {}), p + "[]"
        yield from field_paths(sub, p)


def test_every_field_of_every_crd_has_a_row() -> None:
    page = api_reference.render()
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines()
            if line.startswith("| `")}
    for f in CRD_FILES:
        crd = yaml.safe_load(f.read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        missing = [p for p in field_paths(schema) if p not in rows]
        assert not missing, f"{f.name}: no row for {missing}"
        assert f"## {crd['spec']['names']['kind']}" in page


def test_a_row_carries_type_default_range_enum_and_description() -> None:
    page = api_reference.render()
    [lock] = [line for line in page.splitlines() if line.startswith("| `spec.budgets.lockSeconds` |")]
    assert lock.split("|")[2:5] == [" integer ", " `10` ", " 1..3600 "], lock
    assert "Lease" in lock.split("|")[5]
    [policy] = [line for line in page.splitlines() if line.startswith("| `spec.handoff.policy` |")]
    assert "one of `Immediate`, `WhenIdle`, `Manual`" in policy and "`\"Immediate\"`" in policy
    [state] = [line for line in page.splitlines() if line.startswith("| `spec.state` |")]
    assert "required" in state and "moves only forward" in state  # the CEL rule's message


def _with_full_pod_spec(crd: dict[str, Any]) -> dict[str, Any]:
    """The ToolRuntime CRD as it is once the whole PodSpec schema is embedded: deep properties
    under spec.template.spec, no preserve-unknown-fields."""
    crd = copy.deepcopy(crd)
    template = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"]
    pod_spec = template["properties"]["spec"]
    pod_spec.pop("x-kubernetes-preserve-unknown-fields", None)
    pod_spec["description"] = "A PodSpec, every field checked."
    container = pod_spec["properties"]["containers"]["items"]
    container.pop("x-kubernetes-preserve-unknown-fields", None)
    container["properties"]["image"] = {"type": "string", "description": "Container image name."}
    container["properties"]["ports"] = {"type": "array", "items": {"type": "object", "properties": {
        "containerPort": {"type": "integer", "format": "int32", "description": "Number of port."}}}}
    pod_spec["properties"]["restartPolicy"] = {"type": "string", "enum": ["Always", "OnFailure", "Never"],
                                               "description": "Restart policy."}
    return crd


def test_the_pod_template_is_summarised_whether_or_not_its_schema_is_embedded(tmp_path: Path) -> None:
    embedded = tmp_path / "crds"
    embedded.mkdir()
    for f in CRD_FILES:
        crd = yaml.safe_load(f.read_text())
        if crd["spec"]["names"]["kind"] == "ToolRuntime":
            crd = _with_full_pod_spec(crd)
        (embedded / f.name).write_text(yaml.safe_dump(crd, sort_keys=False))
    page = api_reference.render()
    assert api_reference.render(embedded) == page
    assert "| `spec.template` | PodTemplateSpec (core/v1) |" in page
    assert "kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-template-v1" in page
    assert "`spec.template." not in page, "the page recursed into the pod template"
