"""hack/gen_podtemplate_schema.py: the OpenAPI -> structural CRD schema transform, on small
documents written here, and the committed CRD's generated block (its drift from the OpenAPI the
pinned kube-apiserver serves: tests/integration/test_crd_podtemplate.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import gen_podtemplate_schema as gen

REPO = Path(__file__).resolve().parents[3]
REF = "#/components/schemas/"


def _doc(**extra: Any) -> dict[str, Any]:
    """A core/v1 OpenAPI v3 document in miniature: the shapes the real one uses."""
    schemas: dict[str, Any] = {
        "io.k8s.api.core.v1.PodSpec": {
            "description": "PodSpec is a description of a pod.",
            "type": "object", "required": ["containers"],
            "properties": {
                "containers": {"description": "List of containers. Cannot be updated.", "type": "array",
                               "items": {"allOf": [{"$ref": REF + "io.k8s.api.core.v1.Container"}], "default": {}},
                               "x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map",
                               "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"},
                "overhead": {"description": "Overhead.", "type": "object",
                             "additionalProperties": {"$ref": REF + "io.k8s.apimachinery.pkg.api.resource.Quantity"}},
                "claim": {"allOf": [{"$ref": REF + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
                          "description": "Embedded metadata."},
            },
        },
        "io.k8s.api.core.v1.Container": {
            "description": "A single application container that you want to run within a pod.",
            "type": "object", "required": ["name"],
            "properties": {
                "name": {"description": "Name of the container. Cannot be updated.", "type": "string", "default": ""},
                "port": {"allOf": [{"$ref": REF + "io.k8s.apimachinery.pkg.util.intstr.IntOrString"}],
                         "description": "Number or name of the port (i.e. 80 or http). More text."},
                "grace": {"type": "integer", "format": "int64", "description": "Seconds."},
                "blob": {"type": "string", "format": "int-or-string", "description": "Odd format."},
            },
            "x-kubernetes-unions": [{"discriminator": "type"}],
        },
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
            "description": "IntOrString is a type that can hold an int32 or a string.", "format": "int-or-string",
            "oneOf": [{"type": "integer"}, {"type": "string"}]},
        "io.k8s.apimachinery.pkg.api.resource.Quantity": {
            "description": "Quantity is a fixed-point number.", "oneOf": [{"type": "string"}, {"type": "number"}]},
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
            "description": "ObjectMeta is metadata.", "type": "object",
            "properties": {"name": {"type": "string", "description": "Name."}}},
    }
    schemas.update(extra)
    return {"components": {"schemas": schemas}}


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set(node)
        for key, value in node.items():
            found |= _keys(value) if key != "properties" else set().union(*(_keys(v) for v in value.values()))
        return found
    if isinstance(node, list):
        return set().union(*(_keys(v) for v in node)) if node else set()
    return set()


def test_refs_are_inlined_and_only_structural_keys_are_left() -> None:
    out = gen.pod_spec_schema(_doc())
    assert out["required"] == ["containers"]
    container = out["properties"]["containers"]["items"]
    assert container["type"] == "object" and container["required"] == ["name"]
    assert set(container["properties"]) == {"name", "port", "grace", "blob"}
    # No $ref, allOf, default, list-map keys, patch strategies or unions survive.
    assert _keys(out) <= {"description", "type", "format", "required", "properties", "items",
                          "additionalProperties", "minItems", "x-kubernetes-int-or-string",
                          "x-kubernetes-preserve-unknown-fields"}, _keys(out)
    assert container["properties"]["grace"] == {"type": "integer", "format": "int64", "description": "Seconds."}
    assert "format" not in container["properties"]["blob"]  # int-or-string is no CRD format


def test_int_or_string_quantity_and_embedded_metadata() -> None:
    props = gen.pod_spec_schema(_doc())["properties"]
    port = props["containers"]["items"]["properties"]["port"]
    # The field's own description wins over the type's, cut at the first sentence ("i.e." is not one).
    assert port == {"description": "Number or name of the port (i.e. 80 or http).", "x-kubernetes-int-or-string": True}
    assert props["overhead"]["additionalProperties"] == {
        "description": "Quantity is a fixed-point number.", "x-kubernetes-preserve-unknown-fields": True}
    assert props["claim"] == {"description": "Embedded metadata.", "type": "object",
                              "x-kubernetes-preserve-unknown-fields": True}


def test_baton_overrides_apply() -> None:
    out = gen.pod_spec_schema(_doc())
    assert out["properties"]["containers"]["minItems"] == 1
    assert out["description"].startswith("A PodSpec, as in a Deployment's template")


def test_a_recursive_type_is_refused_by_name() -> None:
    loop = {"io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
        "next": {"$ref": REF + "io.k8s.api.core.v1.PodSpec"}, "containers": {"type": "array", "items": {"type": "string"}}}}}
    with pytest.raises(ValueError, match="recursive schema io.k8s.api.core.v1.PodSpec -> io.k8s.api.core.v1.PodSpec"):
        gen.pod_spec_schema(_doc(**loop))


def test_a_node_without_type_is_refused() -> None:
    bare = {"io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
        "containers": {"type": "array", "items": {"type": "string"}}, "odd": {"description": "no type"}}}}
    with pytest.raises(ValueError, match="no type"):
        gen.pod_spec_schema(_doc(**bare))


@pytest.mark.parametrize("text, first", [
    ("One. Two.", "One."),
    ("Name of the port (e.g. http). More.", "Name of the port (e.g. http)."),
    ("Wrapped\nline without a stop", "Wrapped line without a stop"),
    ("First paragraph\n\nSecond. paragraph.", "First paragraph"),
    ("Version 1.2.3 of it. Next.", "Version 1.2.3 of it."),
])
def test_short_keeps_the_first_sentence(text: str, first: str) -> None:
    assert gen.short(text) == first


def test_splice_replaces_between_the_markers_at_their_indentation() -> None:
    text = "a:\n  b: 1\n  # BEGIN GENERATED old\n  spec: {old: true}\n  # END GENERATED\n  c: 2\n"
    out = gen.splice(text, {"type": "object"}, source="here")
    assert out == ("a:\n  b: 1\n  # BEGIN GENERATED by hack/gen_podtemplate_schema.py from here; do not edit by hand.\n"
                   "  spec:\n    type: object\n  # END GENERATED\n  c: 2\n")
    assert yaml.safe_load(out) == {"a": {"b": 1, "spec": {"type": "object"}, "c": 2}}
    assert gen.splice(out, {"type": "object"}, source="here") == out


def test_splice_needs_exactly_one_pair_of_markers() -> None:
    with pytest.raises(ValueError, match="one `# BEGIN GENERATED` line"):
        gen.splice("a: 1\n", {}, source="x")


def test_the_same_type_twice_is_written_twice_without_yaml_aliases() -> None:
    shared = {"type": "object", "required": ["k"], "properties": {"k": {"type": "string", "description": "K."}}}
    block = gen.render({"type": "object", "properties": {"a": shared, "b": shared}}, indent=0, source="x")
    assert "&id" not in block and "*id" not in block
    assert yaml.safe_load(block)["spec"]["properties"]["b"]["required"] == ["k"]


def test_the_committed_template_spec_is_the_whole_pod_spec() -> None:
    """The committed CRD carries a generated PodSpec: containers' fields are known (explain
    reaches them, strict validation refuses others), nothing below it preserves unknown fields
    but Quantity values and embedded ObjectMeta, and the chart's copy is the same file."""
    text = (REPO / "crds" / "baton.dev_toolruntimes.yaml").read_text()
    assert text == (REPO / "charts" / "baton" / "files" / "baton.dev_toolruntimes.yaml").read_text()
    [version] = yaml.safe_load(text)["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    assert "x-kubernetes-preserve-unknown-fields" not in spec
    container = spec["properties"]["containers"]["items"]
    assert "x-kubernetes-preserve-unknown-fields" not in container
    assert {"image", "imagePullPolicy", "ports", "resources", "securityContext"} <= set(container["properties"])
    assert {"restartPolicy", "volumes", "initContainers", "tolerations"} <= set(spec["properties"])
    assert container["properties"]["ports"]["items"]["properties"]["containerPort"]["type"] == "integer"
    assert "default" not in _keys(spec) and "$ref" not in _keys(spec)


def test_the_crd_fits_client_side_apply() -> None:
    """`kubectl apply -f crds/` (README) keeps the whole object as compact JSON in an annotation,
    and all annotations of an object share 256 KiB: the descriptions are cut to stay well under."""
    crd = yaml.safe_load((REPO / "crds" / "baton.dev_toolruntimes.yaml").read_text())
    size = len(json.dumps(crd, separators=(",", ":")))
    assert size < 200_000, size
