#!/usr/bin/env python3
"""The API reference page, generated from the CRDs: crds/*.yaml -> docs/api-reference.md.

    hack/api_reference.py            rewrite docs/api-reference.md
    hack/api_reference.py --check    exit 1 if the checked-in page differs from the output

Every field path of each CRD's served version, with its type, default, validation (required,
enum, range, length, pattern, item counts, CEL rules with their messages) and description.
tests/unit/crd/test_api_reference.py checks that the checked-in page is this script's output,
so a CRD change without `hack/api_reference.py` fails CI.

The pod template (ToolRuntime `spec.template`) is summarised as a PodTemplateSpec (core/v1)
with a link to the Kubernetes reference, never recursed into: the CRD may embed the whole
PodSpec schema (thousands of lines), which the Kubernetes reference documents already.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO = Path(__file__).resolve().parent.parent
CRDS = REPO / "crds"
PAGE = REPO / "docs" / "api-reference.md"

# (kind, field path) -> (type shown, what to say instead of recursing). By path, so the page
# is the same whether the CRD's template is a preserve-unknown-fields stub or the full schema.
EMBEDDED = {
    ("ToolRuntime", "spec.template"): (
        "PodTemplateSpec (core/v1)",
        "A PodTemplateSpec (core/v1), as in a Deployment's `spec.template`: see the Kubernetes "
        "reference, https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-template-v1/#PodTemplateSpec "
        "(`kubectl explain toolruntime.spec.template` lists what this CRD checks)."),
}
METADATA_LINK = ("Standard object metadata (ObjectMeta): "
                 "https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/")


def one_line(text: str) -> str:
    """Markdown table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def type_of(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    t = schema.get("type", "")
    if t == "array":
        return "[]" + type_of(schema.get("items", {}))
    if t == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "map[string]" + type_of(schema["additionalProperties"])
    if schema.get("format"):
        return f"{t} ({schema['format']})"
    return t or "any"


def validation_of(schema: dict[str, Any], required: bool) -> list[str]:
    out = []
    if required:
        out.append("required")
    if "enum" in schema:
        out.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and hi is not None:
        out.append(f"{lo}..{hi}")
    elif lo is not None:
        out.append(f">= {lo}")
    elif hi is not None:
        out.append(f"<= {hi}")
    for key, word in (("minLength", "length >= {}"), ("maxLength", "length <= {}"),
                      ("minItems", "items >= {}"), ("maxItems", "items <= {}"),
                      ("minProperties", "entries >= {}"), ("maxProperties", "entries <= {}")):
        if key in schema:
            out.append(word.format(schema[key]))
    if "pattern" in schema:
        out.append(f"pattern `{schema['pattern']}`")
    if schema.get("x-kubernetes-list-type"):
        keys = schema.get("x-kubernetes-list-map-keys")
        out.append(f"list type {schema['x-kubernetes-list-type']}" + (f" (keys {', '.join(keys)})" if keys else ""))
    for rule in schema.get("x-kubernetes-validations", []):
        out.append("rule: " + (rule.get("message") or f"`{rule['rule']}`"))
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        out.append("any fields")
    return out


def rows(kind: str, schema: dict[str, Any], path: str, required: bool) -> Iterator[tuple[str, ...]]:
    """(path, type, default, validation, description) of the field at PATH and of every field
    under it, depth first in the CRD's order."""
    if (kind, path) in EMBEDDED:
        shown, say = EMBEDDED[(kind, path)]
        extra = one_line(schema.get("description", ""))
        yield (path, shown, "", "; ".join(validation_of({}, required)), f"{extra} {say}".strip())
        return
    if path == "metadata":
        yield (path, "ObjectMeta", "", "", METADATA_LINK)
        return
    default = json.dumps(schema["default"], separators=(", ", ": ")) if "default" in schema else ""
    yield (path, type_of(schema), default, "; ".join(validation_of(schema, required)),
           one_line(schema.get("description", "")))
    node = schema
    suffix = ""
    while node.get("type") == "array":          # fields of list items: path[].field
        node = node.get("items", {})
        suffix += "[]"
    if isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"].get("properties"):
        node, suffix = node["additionalProperties"], suffix + ".*"
    needed = set(node.get("required", []))
    for name, sub in (node.get("properties") or {}).items():
        yield from rows(kind, sub, f"{path}{suffix}.{name}" if path else name, name in needed)


def crd_section(crd: dict[str, Any]) -> list[str]:
    names = crd["spec"]["names"]
    kind = names["kind"]
    [version] = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema = version["schema"]["openAPIV3Schema"]
    group = crd["spec"]["group"]
    lines = [f"## {kind}", "",
             f"`apiVersion: {group}/{version['name']}`, `kind: {kind}`; {crd['spec']['scope'].lower()}; "
             f"`kubectl get {names['plural']}`" + "".join(f" or `{s}`" for s in names.get("shortNames", []))
             + (" (status is a subresource)" if "status" in version.get("subresources", {}) else "") + ".",
             "", re.sub(r"\s+", " ", schema.get("description", "")).strip(), ""]
    for rule in schema.get("x-kubernetes-validations", []):
        lines += [f"Object rule: {one_line(rule.get('message') or rule['rule'])}", ""]
    cols = version.get("additionalPrinterColumns", [])
    if cols:
        lines += ["Columns of `kubectl get` (`-o wide` adds those of priority 1):", "",
                  "| Column | JSONPath | Priority | Description |", "|---|---|---|---|"]
        lines += [f"| {c['name']} | `{one_line(c['jsonPath'])}` | {c.get('priority', 0)} | "
                  f"{one_line(c.get('description', ''))} |" for c in cols]
        lines.append("")
    lines += ["| Field | Type | Default | Validation | Description |", "|---|---|---|---|---|"]
    needed = set(schema.get("required", []))
    for name, sub in schema.get("properties", {}).items():
        for path, typ, default, valid, desc in rows(kind, sub, name, name in needed):
            lines.append(f"| `{path}` | {one_line(typ)} | {('`' + one_line(default) + '`') if default else ''} | "
                         f"{one_line(valid)} | {desc} |")
    lines.append("")
    return lines


def render(crds_dir: Path = CRDS) -> str:
    crds = [yaml.safe_load(p.read_text()) for p in sorted(crds_dir.glob("*.yaml"))]
    crds.sort(key=lambda c: (c["spec"]["names"]["kind"] != "ToolRuntime", c["spec"]["names"]["kind"]))
    lines = ["# API reference", "",
             "<!-- Generated by hack/api_reference.py from crds/*.yaml; do not edit by hand. -->", "",
             "Every field of Baton's custom resources, from the CRDs in `crds/` (the chart installs the same",
             "files). Regenerate with `python hack/api_reference.py`; `tests/unit/crd/test_api_reference.py`",
             "fails when this page and the CRDs disagree. Paths use `[]` for the items of a list. For what",
             "the fields do together: [the ToolRuntimeClaim guide](claims.md), [docs/design.md](design.md);",
             "for each condition reason and what to do: [troubleshooting](troubleshooting.md).", "",
             "Kinds: " + ", ".join(f"[{c['spec']['names']['kind']}](#{c['spec']['names']['kind'].lower()})"
                                   for c in crds) + ".", ""]
    for crd in crds:
        lines += crd_section(crd)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/api-reference.md is not current")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(REPO)} is not the output of hack/api_reference.py: run it", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
