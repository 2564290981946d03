"""The CRD file itself, without a cluster: every field described, conditions shaped like
metav1.Condition, printer columns (admission of the same rules: tests/integration/test_crd_admission.py)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CRD = yaml.safe_load((REPO / "crds" / "baton.dev_toolruntimes.yaml").read_text())
[VERSION] = CRD["spec"]["versions"]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def fields_without_description(node: dict[str, Any], path: str = "") -> list[str]:
    """Every property (at any depth, also inside array items and under fields that preserve
    unknown fields) and every object array item must carry a non-blank description: that is what
    `kubectl explain` prints."""
    missing = [] if str(node.get("description") or "").strip() else [path or "<root>"]
    for name, sub in (node.get("properties") or {}).items():
        missing += fields_without_description(sub, f"{path}.{name}" if path else name)
    items = node.get("items")
    if isinstance(items, dict) and (items.get("type") == "object" or "properties" in items):
        missing += fields_without_description(items, f"{path}[]")
    return missing


# The keywords of a structural schema node (apiextensions.k8s.io/v1 JSONSchemaProps) that these
# CRDs may use; anything else is a YAML slip the API server's strict decoding refuses at apply.
SCHEMA_KEYWORDS = frozenset({
    "type", "format", "description", "properties", "items", "additionalProperties", "required",
    "default", "enum", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems", "minProperties",
    "maxProperties", "nullable", "anyOf", "oneOf", "allOf", "not", "title", "example",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
})


def unknown_keywords(node: Any, path: str = "") -> list[str]:
    """Keys of schema nodes that are no schema keyword, at any depth (e.g. the tail of an
    unquoted description with a comma inside a YAML flow mapping, which YAML reads as a key)."""
    if not isinstance(node, dict):
        return []
    out = [f"{path or '<root>'}: {k!r}" for k in node if k not in SCHEMA_KEYWORDS]
    for name, sub in (node.get("properties") or {}).items():
        out += unknown_keywords(sub, f"{path}.{name}" if path else name)
    for key in ("items", "additionalProperties", "not"):
        out += unknown_keywords(node.get(key), f"{path}.{key}")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(node.get(key) or []):
            out += unknown_keywords(sub, f"{path}.{key}[{i}]")
    return out


@pytest.mark.parametrize("crd", ["baton.dev_toolruntimes.yaml", "baton.dev_toolruntimeclaims.yaml"])
def test_every_schema_key_is_a_schema_keyword(crd: str) -> None:
    doc = yaml.safe_load((REPO / "crds" / crd).read_text())
    for version in doc["spec"]["versions"]:
        assert unknown_keywords(version["schema"]["openAPIV3Schema"]) == []


def test_the_keyword_check_finds_a_description_split_by_a_comma() -> None:
    slip = yaml.safe_load("properties:\n  n: {type: integer, description: Of those, how many did not answer.}\n")
    assert unknown_keywords(slip) == ["n: 'how many did not answer.'"]


def test_every_field_is_described() -> None:
    # metadata: the API server refuses a CRD that says anything about it but its type
    # ("must not specify anything other than name and generateName"); explain shows ObjectMeta.
    assert fields_without_description(SCHEMA) == ["metadata"]
    assert SCHEMA["properties"]["metadata"] == {"type": "object"}


def test_every_claim_field_is_described() -> None:
    claim = yaml.safe_load((REPO / "crds" / "baton.dev_toolruntimeclaims.yaml").read_text())
    [version] = claim["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert fields_without_description(schema) == ["metadata"]
    cols = version["additionalPrinterColumns"]
    assert all(str(c.get("description") or "").strip() for c in cols), cols
    assert [c["name"] for c in cols if not c.get("priority")] == [
        "Runtime", "Generation", "Fork", "Branch", "State", "Bound", "Age"]
    # The Bound condition: its status by default, its reason and message with -o wide.
    assert {c["name"]: c["jsonPath"] for c in cols if c.get("name") in ("Bound", "Reason", "Message")} == {
        "Bound": '.status.conditions[?(@.type=="Bound")].status',
        "Reason": '.status.conditions[?(@.type=="Bound")].reason',
        "Message": '.status.conditions[?(@.type=="Bound")].message'}
    assert [c["name"] for c in cols if c.get("priority") == 1] == ["Reason", "Message"]
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["required"] == ["type", "status", "reason", "message", "lastTransitionTime"]
    assert all(str(c.get("description") or "").strip() for c in version["additionalPrinterColumns"])
    names = claim["spec"]["names"]
    assert (names["kind"], names["shortNames"], names["categories"]) == ("ToolRuntimeClaim", ["trc"], ["baton"])


def test_the_description_check_finds_an_undescribed_field() -> None:
    """The walk above reaches nested array items: a bare field there is reported by path."""
    node = {"description": "x", "properties": {"a": {"description": "y", "type": "array", "items": {
        "type": "object", "description": "z", "properties": {"b": {"type": "string"}}}}}}
    assert fields_without_description(node) == ["a[].b"]


def _at(path: str) -> dict[str, Any]:
    node: dict[str, Any] = SCHEMA
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


# metav1.Condition's validation (k8s.io/apimachinery/pkg/apis/meta/v1/types.go kubebuilder markers).
METAV1_TYPE = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
METAV1_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


def test_conditions_are_validated_like_metav1_condition() -> None:
    cond = _at("status.conditions.[]")
    props = cond["properties"]
    assert set(cond["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert props["type"]["pattern"] == METAV1_TYPE and props["type"]["maxLength"] == 316
    assert props["reason"]["pattern"] == METAV1_REASON
    assert props["reason"]["maxLength"] == 1024 and props["reason"]["minLength"] == 1
    assert props["message"]["maxLength"] == 32768
    assert props["status"]["enum"] == ["True", "False", "Unknown"]
    assert props["lastTransitionTime"]["format"] == "date-time"
    assert props["observedGeneration"]["minimum"] == 0
    conditions = _at("status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]


@pytest.mark.parametrize("reason, ok", [
    ("GenerationReady", True), ("PodStuckTerminating", True), ("a_b:c,d", True),
    ("", False), ("Not a reason", False), ("9Lives", False), ("Trailing:", False),
])
def test_reason_pattern_matches_like_the_api_server(reason: str, ok: bool) -> None:
    assert bool(re.match(METAV1_REASON, reason)) is ok


def test_printer_columns_are_described_and_wide_adds_step_and_message() -> None:
    cols = VERSION["additionalPrinterColumns"]
    assert all(str(c.get("description") or "").strip() for c in cols), cols
    default = [c["name"] for c in cols if not c.get("priority")]
    wide = {c["name"]: c["jsonPath"] for c in cols if c.get("priority") == 1}
    assert default == ["Generation", "Ready", "Reason", "Pod", "Age"]
    assert wide == {"Step": ".status.transition.step",
                    "Message": '.status.conditions[?(@.type=="Ready")].message'}
