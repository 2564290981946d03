"""Writes charts/baton/values.schema.json (the chart's strict values schema).

The shape and the rules of every value are written below; the description of every value is
the comment right above its key in charts/baton/values.yaml (one source: `helm show values`
and the schema say the same thing). Fields the schema knows but values.yaml leaves unset
(optional Kubernetes fields inside securityContext, env vars, tolerations, ...) carry the short
description written here. The script fails, naming the key, when a value has no comment, when
values.yaml and the schema disagree about which keys exist, or when a description is empty.

Run after changing values.yaml or this file: python3 hack/chart-schema.py.
tests/integration/test_chart_render.py fails when the committed schema differs from what this
prints, and when an object in it is left open (additionalProperties not false and not a typed
map) other than `global` and `affinity`.
"""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

CHART = Path(__file__).resolve().parents[1] / "charts" / "baton"
OUT = CHART / "values.schema.json"
VALUES = CHART / "values.yaml"


# --- building blocks ------------------------------------------------------------------------
# `d` is the description of a field that is not a values.yaml key (a field inside a list item
# or an optional Kubernetes field); values.yaml keys get theirs from their comment.

def obj(props: dict[str, Any], required: list[str] | None = None, d: str | None = None,
        **kw: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        node["required"] = required
    if d:
        node["description"] = d
    node.update(kw)
    return node


def s(d: str | None = None, **kw: Any) -> dict[str, Any]:
    return {"type": "string", **({"description": d} if d else {}), **kw}


def i(d: str | None = None, **kw: Any) -> dict[str, Any]:
    return {"type": "integer", **({"description": d} if d else {}), **kw}


def b(d: str | None = None) -> dict[str, Any]:
    return {"type": "boolean", **({"description": d} if d else {})}


def enum(values: list[str], d: str | None = None) -> dict[str, Any]:
    return {"enum": values, **({"description": d} if d else {})}


def strmap(d: str | None = None) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "string"}, **({"description": d} if d else {})}


def strlist(d: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": d}


dur = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h|d|w|y))+$"}
QTY = {"oneOf": [{"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"},
                 {"type": "number", "minimum": 0}]}


def qty(d: str) -> dict[str, Any]:
    return {**copy.deepcopy(QTY), "description": d}


def res_list() -> dict[str, Any]:
    return obj({"cpu": qty("CPU (e.g. 50m)."), "memory": qty("Memory (e.g. 128Mi)."),
                "ephemeral-storage": qty("Local ephemeral storage (e.g. 1Gi).")})


def probe(extra: dict[str, Any]) -> dict[str, Any]:
    return obj({"periodSeconds": i(minimum=1, maximum=300), "timeoutSeconds": i(minimum=1, maximum=60),
                "failureThreshold": i(minimum=1, maximum=100), **extra})


def key_ref() -> dict[str, Any]:
    return obj({"name": s("Name of the object."), "key": s("Key in its data."),
                "optional": b("Whether the object or key may be absent.")}, required=["key"])


envvar = obj({
    "name": s("Name of the variable.", minLength=1), "value": s("Its value."),
    "valueFrom": obj({
        "configMapKeyRef": key_ref() | {"description": "A key of a ConfigMap."},
        "secretKeyRef": key_ref() | {"description": "A key of a Secret."},
        "fieldRef": obj({"apiVersion": s("API version of the field path."),
                         "fieldPath": s("Path of the pod field, e.g. metadata.name.")},
                        required=["fieldPath"], d="A field of the pod."),
        "resourceFieldRef": obj({"containerName": s("Container whose resource is read."),
                                 "resource": s("e.g. limits.memory."),
                                 "divisor": qty("Unit of the value.")},
                                required=["resource"], d="A resource of a container."),
    }, d="Where the value comes from (instead of value)."),
}, required=["name"], d="An EnvVar.")
toleration = obj({"key": s("Taint key; empty with operator Exists: every taint."),
                  "operator": enum(["Exists", "Equal"], "Exists or Equal (default)."),
                  "value": s("Taint value (with Equal)."),
                  "effect": enum(["", "NoSchedule", "PreferNoSchedule", "NoExecute"], "Taint effect; empty: all."),
                  "tolerationSeconds": i("How long a NoExecute taint is tolerated.")}, d="A Toleration.")
dns1123 = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
se_linux = obj({"level": s("SELinux level."), "role": s("SELinux role."), "type": s("SELinux type."),
                "user": s("SELinux user.")})
profile_types = ["RuntimeDefault", "Localhost", "Unconfined"]
seccomp = obj({"type": enum(profile_types, "RuntimeDefault, Localhost or Unconfined."), "localhostProfile": s("Profile file under the kubelet's seccomp directory (type Localhost).")})
apparmor = obj({"type": enum(profile_types, "RuntimeDefault, Localhost or Unconfined."),
                "localhostProfile": s("Profile loaded on the node (type Localhost).")},
               d="AppArmor profile.")
uid = {"type": "integer", "minimum": 0}
pod_security_context = obj({
    "runAsNonRoot": b(), "runAsUser": dict(uid), "runAsGroup": dict(uid), "seccompProfile": seccomp,
    "fsGroup": {**uid, "description": "GID owning mounted volumes."},
    "fsGroupChangePolicy": enum(["OnRootMismatch", "Always"], "When volume ownership is changed."),
    "supplementalGroups": {"type": "array", "items": dict(uid), "description": "Extra GIDs."},
    "supplementalGroupsPolicy": enum(["Merge", "Strict"], "Whether the image's groups are merged in."),
    "seLinuxOptions": se_linux | {"description": "SELinux context of the pod."},
    "seLinuxChangePolicy": enum(["MountOption", "Recursive"], "How volumes get the SELinux label."),
    "appArmorProfile": apparmor,
    "sysctls": {"type": "array", "description": "Namespaced sysctls.",
                "items": obj({"name": s("sysctl name."), "value": s("sysctl value.")},
                             required=["name", "value"], d="A sysctl.")},
})
container_security_context = obj({
    "allowPrivilegeEscalation": b(), "readOnlyRootFilesystem": b(), "runAsNonRoot": b(),
    "capabilities": obj({"drop": strlist("Dropped capabilities."),
                         "add": strlist("Added capabilities (restricted allows NET_BIND_SERVICE only).")}),
    "runAsUser": {**uid, "description": "UID; default: the pod's."},
    "runAsGroup": {**uid, "description": "GID; default: the pod's."},
    "privileged": b("Privileged container (never under restricted)."),
    "procMount": enum(["Default", "Unmasked"], "proc mount type."),
    "seccompProfile": seccomp | {"description": "seccomp profile; default: the pod's."},
    "seLinuxOptions": se_linux | {"description": "SELinux context; default: the pod's."},
    "appArmorProfile": apparmor,
})
label_selector = obj({
    "matchLabels": strmap("Labels the pods must carry."),
    "matchExpressions": {"type": "array", "description": "Label requirements, all of which must hold.",
                         "items": obj({"key": s("Label key."),
                                       "operator": enum(["In", "NotIn", "Exists", "DoesNotExist"], "How key and values relate."),
                                       "values": strlist("Values for In and NotIn.")},
                                      required=["key", "operator"], d="A label requirement.")},
}, d="Pods counted by the constraint; default: this release's operator pods.")
spread_constraint = obj({
    "maxSkew": i("Largest allowed difference in matching pods between two domains.", minimum=1),
    "topologyKey": s("Node label whose values are the domains, e.g. kubernetes.io/hostname.", minLength=1),
    "whenUnsatisfiable": enum(["ScheduleAnyway", "DoNotSchedule"], "ScheduleAnyway or DoNotSchedule."),
    "labelSelector": label_selector,
    "matchLabelKeys": strlist("Pod label keys whose values further select the counted pods."),
    "minDomains": i("Minimum number of eligible domains (with DoNotSchedule).", minimum=1),
    "nodeAffinityPolicy": enum(["Honor", "Ignore"], "Whether nodeAffinity/nodeSelector limit the domains."),
    "nodeTaintsPolicy": enum(["Honor", "Ignore"], "Whether node taints limit the domains."),
}, required=["maxSkew", "topologyKey", "whenUnsatisfiable"], d="A TopologySpreadConstraint.")

schema: dict[str, Any] = {
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Values of the Baton chart",
  **obj({
    "replicaCount": i(minimum=1, maximum=10),
    "image": obj({"repository": s(minLength=1), "tag": s(),
                  "digest": s(pattern=r"^(sha256:[a-f0-9]{64})?$"),
                  "pullPolicy": enum(["Always", "IfNotPresent", "Never"])}, required=["repository"]),
    "imagePullSecrets": {"type": "array", "items": obj({"name": s("Name of a Secret of type "
                                                                  "kubernetes.io/dockerconfigjson.", minLength=1)},
                                                       required=["name"], d="A Secret reference.")},
    "nameOverride": s(maxLength=40),
    "fullnameOverride": s(maxLength=50),
    "watch": obj({"namespaces": {"type": "array", "uniqueItems": True, "items": dns1123}}),
    "crds": obj({"create": b(), "keep": b()}),
    "rbac": obj({"create": b(), "readConfigMaps": b(), "readSecrets": enum(["auto", "always", "never"]),
                 "confineWrites": b()}),
    "serviceAccount": obj({"create": b(), "name": s(), "annotations": strmap()}),
    # A Secret's name (a DNS subdomain), or empty: the chart's own Secret.
    "digestKey": obj({"existingSecret": s(pattern=r"^$|^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")}),
    "maxDrainSeconds": i(minimum=1, maximum=3600),
    "terminationGracePeriodSeconds": i(minimum=1, maximum=86400),
    "operator": obj({
        "logLevel": enum(["DEBUG", "INFO", "WARNING", "ERROR"]),
        "leaseSeconds": i(minimum=3, maximum=300),
        "workers": i(minimum=1, maximum=256),
        "probeConcurrency": i(minimum=1, maximum=1024),
        "resyncSeconds": i(minimum=5, maximum=86400),
        # Each range a whole set of the 256 hash-bucket labels (baton.sharding.ranges.valid_count).
        "shardRanges": {"type": "integer", "enum": [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]},
        "probeAllowedCidrs": {"type": "array", "minItems": 1,
                              "items": {"type": "string", "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}},
        "extraEnv": {"type": "array", "items": envvar},
    }),
    # Empty, or an IPv4/IPv6 address literal (written without brackets).
    "bindAddress": s(pattern=r"^$|^[0-9a-fA-F:.]{2,45}$"),
    "ports": obj({"metrics": i(minimum=1024, maximum=65535), "health": i(minimum=1024, maximum=65535)}),
    "resources": obj({"requests": res_list(), "limits": res_list()}),
    "probes": obj({"liveness": probe({}), "readiness": probe({}),
                   "startup": obj({"periodSeconds": i(minimum=1, maximum=60),
                                   "failureThreshold": i(minimum=1, maximum=300)})}),
    "podSecurityContext": pod_security_context,
    "containerSecurityContext": container_security_context,
    "topologySpreadConstraints": {"type": "array", "items": spread_constraint},
    # Open on purpose: an affinity term cannot be validated without copying the Kubernetes
    # schema; the API server validates it.
    "affinity": {"type": "object"},
    "podDisruptionBudget": obj({"enabled": b(), "maxUnavailable": {"oneOf": [
        {"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^[0-9]{1,3}%$"}]}}),
    "podAnnotations": strmap(),
    "podLabels": strmap(),
    "nodeSelector": strmap(),
    "tolerations": {"type": "array", "items": toleration},
    "priorityClassName": s(),
    "enableServiceLinks": b(),
    "metrics": obj({"service": obj({"enabled": b(), "port": i(minimum=1, maximum=65535)})}),
    "serviceMonitor": obj({"enabled": b(), "interval": dict(dur), "scrapeTimeout": dict(dur),
                           "labels": strmap()}),
    "prometheusRule": obj({
        "enabled": b(), "labels": strmap(),
        "runbookBaseUrl": s(pattern=r"^(https?://[^/#?\s]+.*)?$"),
        "scrapeJob": s(),
        "gatewayScrapeJob": s(),
        "additionalAlertLabels": strmap(),
        "alerts": obj({
            "cleanupFailedFor": dict(dur), "transitionStuckFor": dict(dur), "forceRecoveryWindow": dict(dur),
            "leaseConflicts": obj({"threshold": {"type": "number", "minimum": 0}, "window": dict(dur),
                                   "for": dict(dur)}),
            "drainIncomplete": obj({"threshold": {"type": "number", "minimum": 0}, "window": dict(dur),
                                    "for": dict(dur)}),
            "operatorDownFor": dict(dur),
            "retirementBlockedFor": dict(dur),
            "runtimeNotReadyFor": dict(dur),
            "runtimeDegradedFor": dict(dur),
            "memoryNearLimit": obj({"ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                                    "for": dict(dur)}),
            "apiErrors": obj({"ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                              "window": dict(dur), "for": dict(dur)}),
            "watchErrors": obj({"threshold": {"type": "number", "minimum": 0}, "window": dict(dur),
                                "for": dict(dur)}),
            "passErrors": obj({"threshold": {"type": "number", "minimum": 0}, "window": dict(dur)}),
            "gatewayRefused": obj({"threshold": {"type": "number", "minimum": 0}, "window": dict(dur),
                                   "for": dict(dur)}),
        }),
    }),
    "grafanaDashboard": obj({"enabled": b(), "namespace": {**dns1123, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"},
                             "labels": strmap(), "annotations": strmap()}),
    "gateway": obj({
        "enabled": b(), "replicaCount": i(minimum=1, maximum=20),
        "logLevel": enum(["DEBUG", "INFO", "WARNING", "ERROR"]),
        "allowedCidrs": {"type": "array", "minItems": 1,
                         "items": {"type": "string", "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}},
        "leaseSeconds": i(minimum=3, maximum=300),
        "staticSeconds": i(minimum=0, maximum=600),
        "headerSeconds": i(minimum=1, maximum=300),
        "limits": obj({
            "maxHeldPerRuntime": i(minimum=1, maximum=100000),
            "maxHeldTotal": i(minimum=1, maximum=1000000),
            "maxHeldBodyBytes": i(minimum=1024, maximum=64 * 1024 * 1024),
            "maxHeldBytesPerRuntime": i(minimum=1024, maximum=16 * 1024 ** 3),
            "maxBufferedBytes": i(minimum=64 * 1024, maximum=16 * 1024 ** 3),
            "maxConnections": i(minimum=1, maximum=1000000),
            "maxConnectionsPerClient": i(minimum=1, maximum=1000000),
            "bodySeconds": i(minimum=1, maximum=3600),
            "maxUpstreamConnections": i(minimum=1, maximum=1000000),
            "maxUpstreamPerPod": i(minimum=1, maximum=1000000),
            "streamIdleSeconds": {"type": "number", "minimum": 0.1, "maximum": 3600},
        }),
        "terminationGracePeriodSeconds": i(minimum=6, maximum=86400),
        "ports": obj({"calls": i(minimum=1024, maximum=65535), "admin": i(minimum=1024, maximum=65535),
                      "metrics": i(minimum=1024, maximum=65535), "health": i(minimum=1024, maximum=65535)}),
        "service": obj({"port": i(minimum=1, maximum=65535)}),
        "resources": obj({"requests": res_list(), "limits": res_list()}),
        "topologySpreadConstraints": {"type": "array", "items": spread_constraint},
        "podDisruptionBudget": obj({"enabled": b(), "maxUnavailable": {"oneOf": [
            {"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^[0-9]{1,3}%$"}]}}),
        "networkPolicy": obj({"enabled": b()}),
        "isolateToolPods": b(),
        "adminKey": obj({"existingSecret": s(pattern=r"^$|^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")}),
        "extraEnv": {"type": "array", "items": envvar},
    }),
    # Helm hands a parent chart's `global` values to every subchart: their shape is the parent's,
    # so this one object is not closed. Baton uses nothing in it.
    "global": {"type": "object", "description": "Reserved by Helm for parent charts; unused by Baton."},
  }),
}

# Maps whose entries are data (label keys, node labels), not values with a comment each.
FREE_MAPS = {"serviceAccount.annotations", "podAnnotations", "podLabels", "nodeSelector", "affinity",
             "serviceMonitor.labels", "prometheusRule.labels", "prometheusRule.additionalAlertLabels"}


# --- descriptions from values.yaml ----------------------------------------------------------

KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w./-]*):(?:\s|$)")


def value_comments(text: str) -> dict[str, str]:
    """{"a.b.c": comment} for every key of values.yaml: the comment lines right above the key at
    the key's own indentation, joined (a blank line or code ends a comment)."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = KEY.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group("key")))
        path = ".".join(k for _, k in stack)
        block: list[str] = []
        k = n - 1
        while k >= 0 and lines[k].startswith(" " * indent + "#"):
            block.insert(0, lines[k][indent:].lstrip("#"))
            k -= 1
        comments[path] = _join(block)
    return comments


def _join(block: list[str]) -> str:
    """Comment lines to one description: wrapped prose is joined with spaces; an indented line
    that starts an item ("auto   - granted ...", readSecrets' choices) starts a new line."""
    lines = [x for x in block if x.strip()]
    base = min((len(x) - len(x.lstrip()) for x in lines), default=0)
    out = ""
    for raw in lines:
        text = raw.strip()
        item = len(raw) - len(raw.lstrip()) > base and re.match(r"^\S+\s+- ", text)
        out += ("\n" if item else " ") + text if out else text
    return out


def schema_paths(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """{"a.b": node} for every property reachable through nested objects (not list items)."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in (node.get("properties") or {}).items():
        path = prefix + k
        out[path] = v
        if "properties" in v:
            out |= schema_paths(v, path + ".")
    return out


def empty_descriptions(node: Any, path: str = "") -> list[str]:
    """Every property anywhere (also inside list items) without a non-blank description."""
    found: list[str] = []
    if isinstance(node, dict):
        for k, v in (node.get("properties") or {}).items():
            if not str(v.get("description") or "").strip():
                found.append(f"{path}.{k}".lstrip("."))
            found += empty_descriptions(v, f"{path}.{k}")
        if isinstance(node.get("items"), dict):
            found += empty_descriptions(node["items"], f"{path}[]")
    return found


def build() -> dict[str, Any]:
    import yaml  # PyYAML: a dependency of the package and of this repository's venv

    text = VALUES.read_text()
    comments = value_comments(text)
    values = yaml.safe_load(text)
    out = json.loads(json.dumps(schema))  # no shared sub-objects: each path its own text
    paths = schema_paths(out)

    def keys(node: dict[str, Any], prefix: str = "") -> set[str]:
        found = set()
        for k, v in node.items():
            found.add(prefix + k)
            if isinstance(v, dict) and prefix + k not in FREE_MAPS:
                found |= keys(v, prefix + k + ".")
        return found

    in_values = keys(values)
    errors = [f"values.yaml: {k} has no comment" for k in sorted(in_values) if not comments.get(k)]
    errors += [f"values.yaml: {k} is not in the schema" for k in sorted(in_values - set(paths))]
    for path in sorted(in_values & set(paths)):
        paths[path]["description"] = comments[path]
    errors += [f"schema: {p} has no description (add it to values.yaml or to {Path(__file__).name})"
               for p in empty_descriptions(out)]
    if errors:
        sys.exit("\n".join(errors))
    return out


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text() == render() else 1)
    OUT.write_text(render())
