"""ToolRuntimeClaim at admission, against the real API server: generation, runtimeRef and fork are
immutable; state moves only forward (Speculative → CommitEligible → Committed → Released; any →
Abandoned except from Committed); each refusal names the field."""
from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

STATES = ["Speculative", "CommitEligible", "Committed", "Released", "Abandoned"]
ORDER = {s: i for i, s in enumerate(STATES[:4])}


def allowed(old: str, new: str) -> bool:
    """The rule, written out independently of the CRD's CEL."""
    if old == new:
        return True
    if new == "Abandoned":
        return old != "Committed"
    return old != "Abandoned" and ORDER[new] > ORDER[old]


def claim(name: str, **spec: Any) -> dict[str, Any]:
    body = {"runtimeRef": {"name": "search-mcp"}, "generation": 7, "fork": "plan-42", "branch": "b",
            "state": "Speculative", "references": ["a"]}
    body.update(spec)
    return {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntimeClaim",
            "metadata": {"name": name}, "spec": body}


def apply(cluster: Any, namespace: str, obj: dict[str, Any], tmp_path: Any, check: bool = True) -> Any:
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    return cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=check)


def patch(cluster: Any, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return cluster.kubectl("patch", "trc", name, "-n", namespace, "--type=merge", "-p",
                           json.dumps({"spec": spec}), check=False)


@pytest.mark.parametrize("field, value, needle", [
    ("generation", 8, "spec.generation"),
    ("runtimeRef", {"name": "other-mcp"}, "spec.runtimeRef"),
    ("fork", "plan-43", "spec.fork"),
])
def test_immutable_fields_are_refused_naming_the_field(cluster: Any, crd: None, namespace: str, tmp_path: Any,
                                                        field: str, value: Any, needle: str) -> None:
    apply(cluster, namespace, claim("c"), tmp_path)
    res = patch(cluster, namespace, "c", {field: value})
    assert res.returncode != 0, f"accepted: {res.stdout}"
    assert needle in res.stderr and "immutable" in res.stderr, res.stderr
    # The branch and the references may change.
    ok = patch(cluster, namespace, "c", {"references": ["a", "c"]})
    assert ok.returncode == 0, ok.stderr


def test_state_moves_only_forward(cluster: Any, crd: None, namespace: str, tmp_path: Any) -> None:
    """Every (old, new) pair of the five states, on one claim per old state."""
    seen: dict[tuple[str, str], bool] = {}
    for i, (old, new) in enumerate(itertools.product(STATES, STATES)):
        name = f"s{i}"
        apply(cluster, namespace, claim(name, state=old), tmp_path)
        res = patch(cluster, namespace, name, {"state": new})
        seen[(old, new)] = res.returncode == 0
        if res.returncode != 0:
            assert "spec.state" in res.stderr and "forward" in res.stderr, res.stderr
    wrong = {pair: ok for pair, ok in seen.items() if ok != allowed(*pair)}
    assert not wrong, f"admission differs from the rule (pair: accepted?): {wrong}"
    # The table holds refusals and acceptances both: the loop above could not pass on one kind alone.
    assert seen[("Committed", "Abandoned")] is False and seen[("CommitEligible", "Speculative")] is False
    assert seen[("Speculative", "Committed")] is True and seen[("Committed", "Released")] is True


def test_unknown_state_and_missing_fields_are_refused(cluster: Any, crd: None, namespace: str, tmp_path: Any) -> None:
    res = apply(cluster, namespace, claim("u", state="Maybe"), tmp_path, check=False)
    assert res.returncode != 0 and "spec.state" in res.stderr, res.stderr
    bad = claim("m")
    del bad["spec"]["fork"]
    res = apply(cluster, namespace, bad, tmp_path, check=False)
    assert res.returncode != 0 and "spec.fork" in res.stderr, res.stderr


def test_columns_short_name_and_category(cluster: Any, crd: None, namespace: str, tmp_path: Any) -> None:
    apply(cluster, namespace, claim("plan-42-b", state="CommitEligible"), tmp_path)
    lines = cluster.kubectl("get", "trc", "-n", namespace).stdout.splitlines()
    assert lines[0].split() == ["NAME", "RUNTIME", "GENERATION", "FORK", "BRANCH", "STATE", "BOUND", "AGE"]
    wide = cluster.kubectl("get", "trc", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "RUNTIME", "GENERATION", "FORK", "BRANCH", "STATE", "BOUND", "AGE", "REASON",
                               "MESSAGE"]
    assert lines[1].split()[:6] == ["plan-42-b", "search-mcp", "7", "plan-42", "b", "CommitEligible"]
    assert "plan-42-b" in cluster.kubectl("get", "baton", "-n", namespace).stdout
