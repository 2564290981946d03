"""Invariant 4 at admission: the CRD refuses bad input with a message that names the field."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dev.wait import wait_for
from harness.runtimes import runtime_manifest


def _valid(name: str = "ok") -> dict[str, Any]:
    return runtime_manifest(name)


def _with(path: list[str], value: Any, name: str = "bad") -> dict[str, Any]:
    m = copy.deepcopy(_valid(name))
    node = m
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return m


BUDGETS = ["lockSeconds", "connectSeconds", "drainSeconds", "terminationGraceSeconds", "cleanupSeconds"]

CASES: list[tuple[str, dict[str, Any], list[str]]] = []
for b in BUDGETS:
    CASES.append((f"{b}-zero", _with(["spec", "budgets", b], 0), [f"spec.budgets.{b}", "greater than or equal to 1"]))
    CASES.append((f"{b}-too-big", _with(["spec", "budgets", b], 3601), [f"spec.budgets.{b}", "less than or equal to 3600"]))
    CASES.append((f"{b}-not-integer", _with(["spec", "budgets", b], "ten"), [f"spec.budgets.{b}", "integer"]))
for b in ["pendingSeconds", "pinSeconds"]:
    CASES.append((f"{b}-zero", _with(["spec", "budgets", b], 0), [f"spec.budgets.{b}", "greater than or equal to 1"]))
    CASES.append((f"{b}-too-big", _with(["spec", "budgets", b], 86401),
                  [f"spec.budgets.{b}", "less than or equal to 86400"]))
CASES += [
    ("bad-handoff-policy", _with(["spec", "handoff"], {"policy": "Eventually"}), ["spec.handoff.policy"]),
    ("when-idle-without-a-drain-probe", _with(["spec", "handoff"], {"policy": "WhenIdle"}),
     ["spec.handoff.policy", "spec.drain.probe"]),
    ("negative-budget", _with(["spec", "budgets", "drainSeconds"], -5), ["spec.budgets.drainSeconds"]),
    ("fractional-budget", _with(["spec", "budgets", "lockSeconds"], 1.5), ["spec.budgets.lockSeconds"]),
    ("cleanup-below-grace",
     _with(["spec", "budgets"], {"terminationGraceSeconds": 30, "cleanupSeconds": 10}),
     ["spec.budgets.cleanupSeconds", "terminationGraceSeconds"]),
    ("no-containers", _with(["spec", "template", "spec", "containers"], []), ["spec.template.spec.containers"]),
    ("no-template-spec", _with(["spec", "template"], {"metadata": {}}), ["spec.template.spec"]),
    ("name-too-long", _with(["metadata", "name"], "x" * 64), ["metadata.name", "63"]),
    ("name-not-a-dns-label", _with(["metadata", "name"], "search.mcp"), ["metadata.name", "DNS label"]),
    ("unknown-spec-field", _with(["spec", "replicas"], 2), ["replicas"]),
    ("unknown-budget", _with(["spec", "budgets", "idleSeconds"], 5), ["idleSeconds"]),
    ("bad-recovery", _with(["spec", "recovery"], {"onCleanupFailure": "Pray"}), ["spec.recovery.onCleanupFailure"]),
    ("probe-path-without-slash", _with(["spec", "drain"], {"probe": {"httpGet": {"path": "idle", "port": 8080}}}),
     ["spec.drain.probe.httpGet.path"]),
    ("probe-path-with-space", _with(["spec", "drain"], {"probe": {"httpGet": {"path": "/a b", "port": 8080}}}),
     ["spec.drain.probe.httpGet.path"]),
]
# Ports: a number in 1..65535 or an IANA service name; before this rule a typo such as 80800 was
# stored and wedged the first drain (tests/unit/test_drainprobe.py has the probe's side).
PROBE_PORT = ["spec", "drain", "probe", "httpGet", "port"]
for case_id, port, needle in [
    ("probe-port-80800", 80800, "less than or equal to 65535"),
    ("probe-port-negative", -1, "greater than or equal to 1"),
    ("probe-port-zero", 0, "greater than or equal to 1"),
    ("probe-port-digits-as-a-string", "8080", "should match"),
    ("probe-port-uppercase-name", "Http", "should match"),
    ("probe-port-double-hyphen", "a--b", "should match"),
    ("probe-port-name-too-long", "sixteen-letters-", "15"),
]:
    CASES.append((case_id, _with(PROBE_PORT, port), ["spec.drain.probe.httpGet.port", needle]))
CASES.append(("service-ports-without-names", _with(["spec", "service"], {"ports": [{"port": 80}, {"port": 81}]}),
              ["spec.service.ports", "needs a name"]))
for case_id, port, needle in [
    ("target-port-70000", 70000, "less than or equal to 65535"),
    ("target-port-zero", 0, "greater than or equal to 1"),
    ("target-port-digits-as-a-string", "80", "should match"),
]:
    CASES.append((case_id, _with(["spec", "service"], {"ports": [{"port": 80, "targetPort": port}]}),
                  ["spec.service.ports[0].targetPort", needle]))
# Who may call through the gateway (spec.service.clients; docs/gateway.md "Who may call").
for case_id, clients, needles in [
    ("clients-namespace-not-a-name", {"namespaces": ["Team_A"]}, ["spec.service.clients.namespaces[0]", "should match"]),
    ("clients-namespace-too-long", {"namespaces": ["n" * 64]}, ["spec.service.clients.namespaces[0]", "63"]),
    ("clients-star-beside-others", {"namespaces": ["*", "a"]},
     ["spec.service.clients.namespaces", '"*" (pods of any namespace) only alone']),
    ("clients-namespaces-twice", {"namespaces": ["a", "a"]}, ["spec.service.clients.namespaces[1]", "Duplicate"]),
    ("clients-namespaces-not-a-list", {"namespaces": "a"}, ["spec.service.clients.namespaces", "array"]),
    ("clients-cidr-without-prefix", {"cidrs": ["10.0.0.0"]}, ["spec.service.clients.cidrs[0]", "should match"]),
    ("clients-cidr-prefix-too-long", {"cidrs": ["10.0.0.0/33"]}, ["spec.service.clients.cidrs[0]", "should match"]),
    ("clients-cidr-a-name", {"cidrs": ["nodes"]}, ["spec.service.clients.cidrs[0]", "should match"]),
    ("clients-unknown-field", {"pods": ["a"]}, ["pods"]),
]:
    CASES.append((case_id, _with(["spec", "service"], {"ports": [{"port": 80}], "gateway": True, "clients": clients}),
                  needles))


@pytest.mark.parametrize("manifest,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_manifest_is_refused_naming_the_field(cluster: Any, crd: None, namespace: str,
                                                      manifest: dict[str, Any], needles: list[str],
                                                      tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(manifest))
    res = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert res.returncode != 0, f"accepted: {res.stdout}"
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in: {res.stderr}"


def test_valid_manifest_gets_every_default(cluster: Any, crd: None, namespace: str, tmp_path: Any) -> None:
    m = _valid("defaults")
    del m["spec"]["budgets"]
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(m))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    got = json.loads(cluster.kubectl("get", "trt", "defaults", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["budgets"] == {"lockSeconds": 10, "connectSeconds": 60, "drainSeconds": 30,
                                      "terminationGraceSeconds": 30, "cleanupSeconds": 60,
                                      "pendingSeconds": 600, "pinSeconds": 600, "admissionSeconds": 60}
    assert got["spec"]["handoff"] == {"policy": "Immediate"}
    assert got["spec"]["recovery"] == {"onCleanupFailure": "Hold"}
    assert got["spec"]["suspend"] is False
    cols = cluster.kubectl("get", "trt", "-n", namespace).stdout.splitlines()[0].split()
    assert cols == ["NAME", "GENERATION", "READY", "REASON", "POD", "AGE"]
    short = cluster.kubectl("get", "baton", "-n", namespace).stdout
    assert "defaults" in short
    explain = cluster.kubectl("explain", "toolruntime.spec.budgets").stdout
    assert "cleanupSeconds" in explain and "confirmed gone" in explain


# --- status.conditions: validated like metav1.Condition, at admission ----------------------------

GOOD_CONDITION = {"type": "Ready", "status": "False", "reason": "NoGeneration", "message": "",
                  "observedGeneration": 1, "lastTransitionTime": "2026-11-30T10:00:00Z"}


def _patch_status(cluster: Any, namespace: str, name: str, status: dict[str, Any]) -> Any:
    return cluster.kubectl("patch", "trt", name, "-n", namespace, "--subresource=status",
                           "--type=merge", "-p", json.dumps({"status": status}), check=False)


def _condition(**changes: Any) -> dict[str, Any]:
    c = {**GOOD_CONDITION, **changes}
    return {k: v for k, v in c.items() if v is not None}


CONDITION_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("reason-with-space", _condition(reason="Not Ready"), ["status.conditions[0].reason", "should match"]),
    ("reason-empty", _condition(reason=""), ["status.conditions[0].reason"]),
    ("reason-too-long", _condition(reason="R" * 1025), ["status.conditions[0].reason", "1024"]),
    ("reason-missing", _condition(reason=None), ["status.conditions[0].reason", "Required"]),
    ("type-with-space", _condition(type="Not A Type"), ["status.conditions[0].type", "should match"]),
    ("status-maybe", _condition(status="Maybe"), ["status.conditions[0].status", "Unsupported value"]),
    ("message-too-long", _condition(message="m" * 32769), ["status.conditions[0].message", "32768"]),
    ("message-missing", _condition(message=None), ["status.conditions[0].message", "Required"]),
    ("no-last-transition-time", _condition(lastTransitionTime=None),
     ["status.conditions[0].lastTransitionTime", "Required"]),
    ("negative-observed-generation", _condition(observedGeneration=-1),
     ["status.conditions[0].observedGeneration"]),
]


@pytest.mark.parametrize("condition,needles", [c[1:] for c in CONDITION_CASES],
                         ids=[c[0] for c in CONDITION_CASES])
def test_invalid_condition_is_refused_naming_the_field(cluster: Any, crd: None, namespace: str,
                                                       condition: dict[str, Any], needles: list[str],
                                                       tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_valid("conds")))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    res = _patch_status(cluster, namespace, "conds", {"conditions": [condition]})
    assert res.returncode != 0, f"accepted: {res.stdout}"
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in: {res.stderr}"
    stored = json.loads(cluster.kubectl("get", "trt", "conds", "-n", namespace, "-o", "json").stdout)
    assert not (stored.get("status") or {}).get("conditions"), "a refused condition was stored"


def test_valid_conditions_are_stored_and_wide_columns_show_step_and_message(
        cluster: Any, crd: None, namespace: str, tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_valid("wide")))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    foreign = {"type": "example.com/Audited", "status": "Unknown", "reason": "Pending_Review",
               "message": "m" * 32768, "lastTransitionTime": "2026-11-30T10:00:00Z"}
    ready = _condition(message="old pod search-mcp retiring")
    res = _patch_status(cluster, namespace, "wide", {
        "conditions": [ready, foreign],
        "transition": {"kind": "Handoff", "from": 1, "to": 2, "step": "Draining"}})
    assert res.returncode == 0, res.stderr
    lines = cluster.kubectl("get", "trt", "wide", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert lines[0].split() == ["NAME", "GENERATION", "READY", "REASON", "POD", "AGE", "STEP", "MESSAGE"]
    assert lines[1].split()[-5:] == ["Draining", "old", "pod", "search-mcp", "retiring"], lines[1]
    assert "STEP" not in cluster.kubectl("get", "trt", "wide", "-n", namespace).stdout


@pytest.mark.parametrize("path, text", [
    ("toolruntime.spec.template.spec.containers", "The pod's containers; at least one."),
    ("toolruntime.spec.template.spec.containers.imagePullPolicy", "Image pull policy."),
    ("toolruntime.spec.template.metadata.labels", "kept beside Baton's own"),
    ("toolruntime.spec.drain.probe.httpGet.scheme", "HTTP only"),
    ("toolruntime.status.transition.step", "persisted before it is acted on"),
    ("toolruntime.status.conditions.reason", "one CamelCase word"),
    ("toolruntime.status.pendingReset.since", "first seen waiting"),
    ("toolruntime.spec.service.clients", "refused 403 with Baton-Reason ClientNotAllowed"),
    ("toolruntime.spec.service.clients.cidrs", "callers that are not pods"),
])
def test_kubectl_explain_documents_deep_fields(cluster: Any, crd: None, path: str, text: str) -> None:
    def explained() -> str | None:
        # Right after the CRD is established the API server may not publish its OpenAPI yet.
        res = cluster.kubectl("explain", path, check=False)
        if res.returncode == 0:
            return str(res.stdout)
        assert "couldn't find resource" in res.stderr, res.stderr
        return None
    out = wait_for(explained, timeout=30, interval=0.5, what=f"kubectl explain {path}")
    assert text in " ".join(out.split()), out


@pytest.mark.parametrize("port", [1, 65535, "http", "mcp-2", "a1"])
def test_ports_by_number_or_service_name_are_accepted(cluster: Any, crd: None, namespace: str, port: Any,
                                                      tmp_path: Any) -> None:
    m = _with(["spec", "drain"], {"probe": {"httpGet": {"path": "/idle", "port": port}}}, name="ports")
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": port}]}
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(m))
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))


@pytest.mark.parametrize("clients", [
    {"namespaces": ["*"]}, {"namespaces": ["agents", "team-b"]}, {"cidrs": ["10.0.0.0/8", "fd00::/64", "0.0.0.0/0"]},
    {"namespaces": ["agents"], "cidrs": ["192.168.1.7/32"]}, {},
])
def test_service_clients_are_accepted(cluster: Any, crd: None, namespace: str, clients: dict[str, Any],
                                      tmp_path: Any) -> None:
    m = _with(["spec", "service"], {"ports": [{"port": 80}], "gateway": True, "clients": clients}, name="clients")
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(m))
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
