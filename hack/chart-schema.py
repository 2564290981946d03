"""Writes charts/baton/values.schema.json (the chart's strict values schema) from this file.

Run after changing it: python3 hack/chart-schema.py. tests/integration/test_chart_render.py
fails when the committed schema differs from what this prints, and when an object in it is
left open (additionalProperties not false and not a typed map).
"""
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "charts" / "baton" / "values.schema.json"
def obj(props, required=None, **kw):
    d = {"type": "object", "additionalProperties": False, "properties": props}
    if required: d["required"] = required
    d.update(kw); return d
def s(desc, **kw): return {"type": "string", "description": desc, **kw}
def i(desc, **kw): return {"type": "integer", "description": desc, **kw}
def b(desc): return {"type": "boolean", "description": desc}
dur = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h|d|w|y))+$"}
strmap = {"type": "object", "additionalProperties": {"type": "string"}}
qty = {"oneOf": [{"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"},
                 {"type": "number", "minimum": 0}]}
res_list = {"type": "object", "additionalProperties": False,
            "properties": {"cpu": qty, "memory": qty, "ephemeral-storage": qty}}
probe = lambda extra: obj({"periodSeconds": i("", minimum=1, maximum=300),
                           "timeoutSeconds": i("", minimum=1, maximum=60),
                           "failureThreshold": i("", minimum=1, maximum=100), **extra})
envvar = obj({"name": s("", minLength=1), "value": {"type": "string"},
              "valueFrom": obj({
                  "configMapKeyRef": obj({"name": s(""), "key": s(""), "optional": b("")}, required=["key"]),
                  "secretKeyRef": obj({"name": s(""), "key": s(""), "optional": b("")}, required=["key"]),
                  "fieldRef": obj({"apiVersion": s(""), "fieldPath": s("")}, required=["fieldPath"]),
                  "resourceFieldRef": obj({"containerName": s(""), "resource": s(""), "divisor": qty},
                                          required=["resource"])})},
             required=["name"])
toleration = obj({"key": {"type": "string"}, "operator": {"enum": ["Exists", "Equal"]},
                  "value": {"type": "string"}, "effect": {"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
                  "tolerationSeconds": {"type": "integer"}})
dns1123 = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
schema = {
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Values of the Baton chart",
  **obj({
    "replicaCount": i("Operator replicas (active-active).", minimum=1, maximum=10),
    "image": obj({"repository": s("Image repository.", minLength=1),
                  "tag": s("Image tag; empty: the chart's appVersion."),
                  "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}}, required=["repository"]),
    "imagePullSecrets": {"type": "array", "items": obj({"name": s("", minLength=1)}, required=["name"])},
    "nameOverride": s("", maxLength=40),
    "fullnameOverride": s("", maxLength=50),
    "watch": obj({"namespaces": {"type": "array", "uniqueItems": True, "items": dns1123,
                                 "description": "Watched namespaces; empty: all."}}),
    "crds": obj({"create": b("Render the CRD."), "keep": b("Keep the CRD on uninstall.")}),
    "rbac": obj({"create": b("Create RBAC objects."), "readConfigMaps": b("GET referenced ConfigMaps."),
                 "readSecrets": {"enum": ["auto", "always", "never"],
                                 "description": "GET referenced Secrets: auto (only with a namespace list), always, never."}}),
    "serviceAccount": obj({"create": b(""), "name": s(""), "annotations": strmap}),
    "maxDrainSeconds": i("Largest drainSeconds of any ToolRuntime (CRD bound: 1..3600).", minimum=1, maximum=3600),
    "terminationGracePeriodSeconds": i("Lower bound of the pod grace period.", minimum=1, maximum=86400),
    "operator": obj({
        "logLevel": {"enum": ["DEBUG", "INFO", "WARNING", "ERROR"]},
        "leaseSeconds": i("Lifecycle Lease duration.", minimum=3, maximum=300),
        "probeAllowedCidrs": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}},
        "extraEnv": {"type": "array", "items": envvar},
    }),
    "ports": obj({"metrics": i("", minimum=1024, maximum=65535), "health": i("", minimum=1024, maximum=65535)}),
    "resources": obj({"requests": res_list, "limits": res_list}),
    "probes": obj({"liveness": probe({}), "readiness": probe({}),
                   "startup": obj({"periodSeconds": i("", minimum=1, maximum=60),
                                   "failureThreshold": i("", minimum=1, maximum=300)})}),
    "runAsUser": i("Numeric non-root UID.", minimum=1),
    "runAsGroup": i("Numeric GID.", minimum=1),
    "topologySpread": obj({"enabled": b(""), "maxSkew": i("", minimum=1),
                           "topologyKey": s("", minLength=1),
                           "whenUnsatisfiable": {"enum": ["ScheduleAnyway", "DoNotSchedule"]}}),
    "podDisruptionBudget": obj({"enabled": b(""), "maxUnavailable": {"oneOf": [
        {"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^[0-9]{1,3}%$"}]}}),
    "podAnnotations": strmap,
    "podLabels": strmap,
    "nodeSelector": strmap,
    "tolerations": {"type": "array", "items": toleration},
    "priorityClassName": s(""),
    "metrics": obj({"service": obj({"enabled": b(""), "port": i("", minimum=1, maximum=65535)})}),
    "serviceMonitor": obj({"enabled": b(""), "interval": dur, "scrapeTimeout": dur, "labels": strmap}),
    "prometheusRule": obj({
        "enabled": b(""), "labels": strmap,
        "runbookBaseUrl": s("Absolute URL of docs/runbooks.md; required when enabled (the template fails without it).",
                            pattern=r"^(https?://[^/#?\s]+.*)?$"),
        "scrapeJob": s("job label of the operator's scrape target; empty: the metrics Service name"),
        "additionalAlertLabels": strmap,
        "alerts": obj({
            "cleanupFailedFor": dur, "transitionStuckFor": dur, "forceRecoveryWindow": dur,
            "leaseConflicts": obj({"threshold": {"type": "number", "minimum": 0}, "window": dur, "for": dur}),
            "drainIncomplete": obj({"threshold": {"type": "number", "minimum": 0}, "window": dur, "for": dur}),
            "operatorDownFor": dur,
        }),
    }),
    "grafanaDashboard": obj({"enabled": b(""), "namespace": {**dns1123, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"},
                             "labels": strmap, "annotations": strmap}),
    # Helm hands a parent chart's `global` values to every subchart: their shape is the parent's,
    # so this one object is not closed. Baton uses nothing in it.
    "global": {"type": "object", "description": "Reserved by Helm for parent charts; unused."},
  }),
}

def render() -> str:
    return json.dumps(schema, indent=2) + "\n"


if __name__ == "__main__":
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text() == render() else 1)
    OUT.write_text(render())
