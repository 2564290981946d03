"""spec.hooks at admission (issue 45): its bounds, its defaults, a hook's needs and its budgets,
each refusal naming the field; status.transition.hook and the hook records stored as the
operator writes them."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from harness.runtimes import runtime_manifest

POST = {"httpPost": {"path": "/release", "port": 8080}}


def _hooks(name: str, hooks: dict[str, Any], **budgets: int) -> dict[str, Any]:
    # The harness's budgets are short (cleanupSeconds 10, connectSeconds 20): room for the hooks'
    # default timeoutSeconds (20) unless a case says otherwise.
    m = runtime_manifest(name, budgets={"cleanupSeconds": 60, "connectSeconds": 60, **budgets})
    m["spec"]["hooks"] = copy.deepcopy(hooks)
    return m


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("pre-retire-without-handler", _hooks("bad", {"preRetire": {"timeoutSeconds": 5}}),
     ["spec.hooks.preRetire", "needs httpPost or gate"]),
    ("post-ready-without-http-post", _hooks("bad", {"postReady": {"timeoutSeconds": 5}}),
     ["spec.hooks.postReady.httpPost", "Required"]),
    ("post-ready-gate-unknown", _hooks("bad", {"postReady": {**POST, "gate": {"annotation": "example.com/x"}}}),
     ["gate"]),
    ("timeout-zero", _hooks("bad", {"preRetire": {**POST, "timeoutSeconds": 0}}),
     ["spec.hooks.preRetire.timeoutSeconds", "greater than or equal to 1"]),
    ("timeout-above-300", _hooks("bad", {"postReady": {**POST, "timeoutSeconds": 301}}),
     ["spec.hooks.postReady.timeoutSeconds", "less than or equal to 300"]),
    ("pre-retire-over-cleanup-budget", _hooks("bad", {"preRetire": {**POST, "timeoutSeconds": 61}}),
     ["spec.hooks.preRetire.timeoutSeconds", "spec.budgets.cleanupSeconds"]),
    ("post-ready-over-connect-budget",
     _hooks("bad", {"postReady": {**POST, "timeoutSeconds": 30}}, connectSeconds=20),
     ["spec.hooks.postReady.timeoutSeconds", "spec.budgets.connectSeconds"]),
    ("policy-unknown", _hooks("bad", {"preRetire": {**POST, "failurePolicy": "Retry"}}),
     ["spec.hooks.preRetire.failurePolicy", "Unsupported value"]),
    ("path-without-slash", _hooks("bad", {"preRetire": {"httpPost": {"path": "release", "port": 8080}}}),
     ["spec.hooks.preRetire.httpPost.path"]),
    ("port-zero", _hooks("bad", {"preRetire": {"httpPost": {"path": "/r", "port": 0}}}),
     ["spec.hooks.preRetire.httpPost.port"]),
    ("port-name-invalid", _hooks("bad", {"preRetire": {"httpPost": {"path": "/r", "port": "Not_A_Name"}}}),
     ["spec.hooks.preRetire.httpPost.port"]),
    ("gate-timeout-above-a-day", _hooks("bad", {"preRetire": {"gate": {"annotation": "example.com/x",
                                                                        "timeoutSeconds": 86401}}}),
     ["spec.hooks.preRetire.gate.timeoutSeconds", "less than or equal to 86400"]),
    ("gate-without-annotation", _hooks("bad", {"preRetire": {"gate": {"timeoutSeconds": 60}}}),
     ["spec.hooks.preRetire.gate.annotation", "Required"]),
    ("gate-on-batons-own-annotation", _hooks("bad", {"preRetire": {"gate": {"annotation": "baton.dev/reset"}}}),
     ["spec.hooks.preRetire.gate.annotation", "baton.dev/"]),
    ("gate-annotation-not-a-name", _hooks("bad", {"preRetire": {"gate": {"annotation": "not a name"}}}),
     ["spec.hooks.preRetire.gate.annotation"]),
]


@pytest.mark.parametrize("manifest,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_spec_hooks_are_refused_naming_the_field(cluster: Any, crd: None, namespace: str, manifest: dict[str, Any],
                                                     needles: list[str], tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(manifest))
    res = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False)
    assert res.returncode != 0, f"accepted: {res.stdout}"
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in: {res.stderr}"


def test_spec_hooks_get_their_defaults_and_status_keeps_hook_runs(cluster: Any, crd: None, namespace: str,
                                                                   tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_hooks("hooked", {
        "preRetire": {"httpPost": {"port": "http"}, "gate": {"annotation": "example.com/released"}},
        "postReady": {"httpPost": {"path": "/warm", "port": 8080}}})))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    got = json.loads(cluster.kubectl("get", "trt", "hooked", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["hooks"] == {
        "preRetire": {"httpPost": {"path": "/", "port": "http"}, "timeoutSeconds": 20, "failurePolicy": "Fail",
                      "gate": {"annotation": "example.com/released", "timeoutSeconds": 600}},
        "postReady": {"httpPost": {"path": "/warm", "port": 8080}, "timeoutSeconds": 20, "failurePolicy": "Fail"},
    }
    record = {"hook": "preRetire", "outcome": "Failed", "seconds": 1.25, "attempts": 2, "message": "answered 500"}
    status = {"transition": {"kind": "Handoff", "trigger": "TemplateChanged", "from": 1, "to": 2,
                             "step": "CleanupFailed", "startedAt": "2026-12-05T10:00:00Z",
                             "stepStartedAt": "2026-12-05T10:00:01Z",
                             "hook": {"hook": "preRetire", "generation": 1, "startedAt": "2026-12-05T10:00:01Z",
                                      "attempts": 2, "fencingToken": 4, "outcome": "Failed",
                                      "message": "answered 500"},
                             "hooks": [record]},
              "current": {"generation": 1, "pod": "hooked", "uid": "u1", "templateHash": "h", "hooks": [record]},
              "history": [{"generation": 1, "outcome": "Retired", "hooks": [record]}]}
    cluster.kubectl("patch", "trt", "hooked", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))
    got = json.loads(cluster.kubectl("get", "trt", "hooked", "-n", namespace, "-o", "json").stdout)["status"]
    assert got["transition"]["hook"] == status["transition"]["hook"]
    assert got["transition"]["hooks"] == [record] and got["current"]["hooks"] == [record]
    assert got["history"][0]["hooks"] == [record]


@pytest.mark.parametrize("hooks", [
    {"preRetire": {**POST, "timeoutSeconds": 1, "gate": {"annotation": "example.com/x", "timeoutSeconds": 1}}},
    {"preRetire": {**POST, "timeoutSeconds": 60}, "postReady": {**POST, "timeoutSeconds": 60}},
    {"preRetire": {"gate": {"annotation": "x", "timeoutSeconds": 86400}, "failurePolicy": "Ignore"}},
], ids=["floor", "at-the-budgets", "gate-alone"])
def test_spec_hooks_bounds_are_inclusive(cluster: Any, crd: None, namespace: str, hooks: dict[str, Any],
                                         tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_hooks("edges", hooks)))
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
