"""Writes the schema of ToolRuntime's spec.template.spec (a PodSpec) into the CRD, generated from
the OpenAPI of the pinned Kubernetes (KUBERNETES_VERSION in hack/versions.env).

Why: with the whole PodSpec in the CRD, `kubectl explain toolruntime.spec.template.spec...`
reaches every field and kubectl's strict field validation refuses a typo
(`imagePullPolicyy`) at apply, as it does for a Deployment.

The input is the OpenAPI v3 document of the core group (`/openapi/v3/api/v1`). By default it is
read offline from the Go module cache that `make tools` fills when it builds kube-apiserver:
$GOMODCACHE/k8s.io/kubernetes@<KUBERNETES_VERSION>/api/openapi-spec/v3/api__v1_openapi.json
(not there: `go mod download` of that module, when Go is installed).
`--openapi FILE` (or `-` for stdin) reads another, e.g. from a running plane:
`kubectl get --raw /openapi/v3/api/v1 | python3 hack/gen_podtemplate_schema.py --openapi -`.

What it writes: the block between the `# BEGIN GENERATED` and `# END GENERATED` lines of
crds/baton.dev_toolruntimes.yaml and of the chart's byte-identical copy, at the marker's
indentation. Everything outside the markers is written by hand. The schema is made structural
(every $ref inlined; IntOrString becomes `x-kubernetes-int-or-string`; Quantity accepts any JSON
scalar and is checked by the pod API; embedded ObjectMeta stays an open object) and carries no
defaults and no list-map keys: a default would be applied when stored objects are read, change
their template hash and hand off every runtime on a CRD upgrade. Descriptions are cut to their
first sentence (kubectl explain stays useful, and the CRD stays far under the 256 KiB that
client-side `kubectl apply` can store in its annotation).

    python3 hack/gen_podtemplate_schema.py            # rewrite the CRD (and the chart's copy)
    python3 hack/gen_podtemplate_schema.py --check    # exit 1 when the committed CRD differs
    python3 hack/gen_podtemplate_schema.py --print    # print the generated block

Needs PyYAML (the venv). tests/unit/crd/test_podtemplate_schema.py checks the transform;
tests/integration/test_crd_podtemplate.py checks the committed CRD against the OpenAPI the pinned
kube-apiserver serves.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_FILES = (ROOT / "crds" / "baton.dev_toolruntimes.yaml",
             ROOT / "charts" / "baton" / "files" / "baton.dev_toolruntimes.yaml")
VERSIONS = ROOT / "hack" / "versions.env"
POD_SPEC = "io.k8s.api.core.v1.PodSpec"
_REF = "#/components/schemas/"
BEGIN = "# BEGIN GENERATED"
END = "# END GENERATED"
# Keys of an OpenAPI schema that survive into the CRD. Left out: default (see the docstring),
# list-type/map-keys/map-type (the pod API checks uniqueness; map keys would need defaults),
# patch strategy, unions, discriminators (not allowed in a CRD schema).
_KEEP = ("description", "type", "format", "required", "properties", "items", "additionalProperties")
_FORMATS = {"int32", "int64", "byte", "date-time", "double"}
# Baton's own words where they say more than upstream's (what Baton does with the field).
OVERRIDES: dict[tuple[str, ...], dict[str, Any]] = {
    (): {"description": "A PodSpec, as in a Deployment's template; every field is checked here "
                        "(unknown fields are refused) and by the API server when the pod is "
                        "created. Must name at least one container."},
    ("containers",): {"minItems": 1, "description": "The pod's containers; at least one."},
}


def kubernetes_version() -> str:
    for line in VERSIONS.read_text().splitlines():
        if line.startswith("KUBERNETES_VERSION="):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"{VERSIONS}: no KUBERNETES_VERSION")


_SPEC_IN_MODULE = Path("api") / "openapi-spec" / "v3" / "api__v1_openapi.json"


def default_openapi_path(version: str) -> Path:
    """The spec in the Go module cache; when it is not there yet and Go is installed, `go mod
    download` fetches the module (as hack/build-tools.sh does)."""
    modcache = os.environ.get("GOMODCACHE") or str(Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod")
    guessed = Path(modcache) / "k8s.io" / f"kubernetes@{version}" / _SPEC_IN_MODULE
    if guessed.exists() or shutil.which("go") is None:
        return guessed
    proc = subprocess.run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT / "hack")
    if proc.returncode != 0:
        return guessed
    return Path(json.loads(proc.stdout)["Dir"]) / _SPEC_IN_MODULE


_ABBREVIATION = re.compile(r"(\b(e\.g|i\.e|etc|vs|approx|ex)\.|\b[A-Z]\.)$")


class _Dumper(yaml.SafeDumper):
    """No anchors and aliases: the same upstream type inlined twice is written twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def short(text: str) -> str:
    """The first sentence (or paragraph) of an upstream description, on one line."""
    para = text.strip().split("\n\n", 1)[0]
    para = " ".join(para.split())
    for found in re.finditer(r"\.(?=\s+[A-Z]|$)", para):
        if not _ABBREVIATION.search(para[: found.start() + 1]):
            return para[: found.start() + 1]
    return para


def _ref_name(node: dict[str, Any]) -> str | None:
    if "$ref" in node:
        return str(node["$ref"]).removeprefix(_REF)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).removeprefix(_REF)
    return None


def structural(schemas: dict[str, Any], node: dict[str, Any], stack: tuple[str, ...] = ()) -> dict[str, Any]:
    """The node with every $ref inlined and only what a structural CRD schema allows."""
    description = node.get("description")
    name = _ref_name(node)
    if name is not None:
        if name in stack:
            raise ValueError(f"recursive schema {' -> '.join(stack + (name,))}: a CRD cannot inline it")
        target = schemas[name]
        if name.endswith(".util.intstr.IntOrString"):
            out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        elif name.endswith(".api.resource.Quantity"):
            # Any JSON scalar (cpu: 0.5 as in a Deployment); the pod API parses it.
            out = {"x-kubernetes-preserve-unknown-fields": True}
        elif name.endswith(".apis.meta.v1.ObjectMeta"):
            out = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        else:
            out = structural(schemas, target, stack + (name,))
        text = description or target.get("description")
        if text:
            out = {"description": short(text), **{k: v for k, v in out.items() if k != "description"}}
        return out
    out = {}
    for key in _KEEP:
        if key not in node:
            continue
        value = node[key]
        if key == "description":
            out[key] = short(value)
        elif key == "format":
            if value in _FORMATS:
                out[key] = value
        elif key == "properties":
            out[key] = {k: structural(schemas, v, stack) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = structural(schemas, value, stack) if isinstance(value, dict) else value
        else:
            out[key] = value
    if "type" not in out and "x-kubernetes-int-or-string" not in out:
        raise ValueError(f"no type at {' -> '.join(stack) or 'the root'}: {sorted(node)}")
    return out


def pod_spec_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    schemas = openapi["components"]["schemas"]
    out = structural(schemas, {"$ref": _REF + POD_SPEC})
    for path, extra in OVERRIDES.items():
        target = out
        for step in path:
            target = target["properties"][step]
        target.update(extra)
    return out


def render(schema: dict[str, Any], *, indent: int, source: str) -> str:
    """The generated block: markers and `spec:` at `indent` spaces."""
    pad = " " * indent
    body = yaml.dump({"spec": schema}, Dumper=_Dumper, sort_keys=False, width=1 << 16, default_flow_style=False)
    lines = [f"{pad}{BEGIN} by hack/gen_podtemplate_schema.py from {source}; do not edit by hand."]
    lines += [pad + line if line else line for line in body.splitlines()]
    lines.append(f"{pad}{END}")
    return "\n".join(lines) + "\n"


def splice(text: str, schema: dict[str, Any], *, source: str) -> str:
    """text with the block between the markers replaced (the markers' indentation is kept)."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, ln in enumerate(lines) if ln.lstrip().startswith(BEGIN)]
    ends = [i for i, ln in enumerate(lines) if ln.lstrip().startswith(END)]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ValueError(f"expected one `{BEGIN}` line followed by one `{END}` line")
    indent = len(lines[begins[0]]) - len(lines[begins[0]].lstrip())
    block = render(schema, indent=indent, source=source)
    return "".join(lines[: begins[0]]) + block + "".join(lines[ends[0] + 1:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openapi", help="OpenAPI v3 of /api/v1 (a file, or - for stdin); default: the Go module cache")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a CRD file differs")
    mode.add_argument("--print", action="store_true", help="print the generated block")
    args = parser.parse_args(argv[1:])
    version = kubernetes_version()
    if args.openapi == "-":
        openapi = json.load(sys.stdin)
    else:
        path = Path(args.openapi) if args.openapi else default_openapi_path(version)
        if not path.exists():
            print(f"{path}: not found (run `make tools`, or pass --openapi)", file=sys.stderr)
            return 2
        openapi = json.loads(path.read_text())
    source = f"Kubernetes {version} OpenAPI v3 /api/v1 ({POD_SPEC})"
    schema = pod_spec_schema(openapi)
    if args.print:
        sys.stdout.write(render(schema, indent=0, source=source))
        return 0
    new = splice(CRD_FILES[0].read_text(), schema, source=source)
    stale = []
    for crd in CRD_FILES:  # the chart's copy stays byte-identical to crds/
        if crd.read_text() != new:
            stale.append(crd)
            if not args.check:
                crd.write_text(new)
    for crd in stale:
        print(f"{'differs' if args.check else 'wrote'}: {crd.relative_to(ROOT)}", file=sys.stderr)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
