"""Invariant 4 at admission: the CRD refuses bad input with a message that names the field."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from harness import baton


def _valid(name: str = "ok") -> dict[str, Any]:
    return baton.runtime_manifest(name)


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
CASES += [
    ("negative-budget", _with(["spec", "budgets", "drainSeconds"], -5), ["spec.budgets.drainSeconds"]),
    ("fractional-budget", _with(["spec", "budgets", "lockSeconds"], 1.5), ["spec.budgets.lockSeconds"]),
    ("cleanup-below-grace",
     _with(["spec", "budgets"], {"terminationGraceSeconds": 30, "cleanupSeconds": 10}),
     ["spec.budgets.cleanupSeconds", "terminationGraceSeconds"]),
    ("no-containers", _with(["spec", "template", "spec", "containers"], []), ["spec.template.spec.containers"]),
    ("no-template-spec", _with(["spec", "template"], {"metadata": {}}), ["spec.template.spec"]),
    ("name-too-long", _with(["metadata", "name"], "x" * 53), ["metadata.name", "52"]),
    ("unknown-spec-field", _with(["spec", "replicas"], 2), ["replicas"]),
    ("unknown-budget", _with(["spec", "budgets", "idleSeconds"], 5), ["idleSeconds"]),
    ("bad-recovery", _with(["spec", "recovery"], {"onCleanupFailure": "Pray"}), ["spec.recovery.onCleanupFailure"]),
]


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
                                      "terminationGraceSeconds": 30, "cleanupSeconds": 60}
    assert got["spec"]["recovery"] == {"onCleanupFailure": "Hold"}
    assert got["spec"]["suspend"] is False
    cols = cluster.kubectl("get", "trt", "-n", namespace).stdout.splitlines()[0].split()
    assert cols == ["NAME", "GENERATION", "READY", "REASON", "POD", "AGE"]
    short = cluster.kubectl("get", "baton", "-n", namespace).stdout
    assert "defaults" in short
    explain = cluster.kubectl("explain", "toolruntime.spec.budgets").stdout
    assert "cleanupSeconds" in explain and "confirmed gone" in explain
