"""spec.idle at admission (issue 43): its bounds, its defaults, and the rule that it needs the gateway,
each refusal naming the field; status.idle stored as the operator writes it."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from harness.runtimes import runtime_manifest


def _idle(name: str, *, idle: dict[str, Any] | None = None, gateway: bool | None = True) -> dict[str, Any]:
    m = runtime_manifest(name, service=True)
    if gateway is None:
        del m["spec"]["service"]
    else:
        m["spec"]["service"]["gateway"] = gateway
    m["spec"]["idle"] = copy.deepcopy(idle if idle is not None else {})
    return m


NEEDS_GATEWAY = ["spec.idle", "spec.service.gateway"]
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("idle-without-service", _idle("bad", gateway=None), NEEDS_GATEWAY),
    ("idle-with-gateway-false", _idle("bad", gateway=False), NEEDS_GATEWAY),
    ("after-below-60", _idle("bad", idle={"afterSeconds": 59}), ["spec.idle.afterSeconds", "greater than or equal to 60"]),
    ("after-above-a-day", _idle("bad", idle={"afterSeconds": 86401}),
     ["spec.idle.afterSeconds", "less than or equal to 86400"]),
    ("wake-below-5", _idle("bad", idle={"wakeSeconds": 4}), ["spec.idle.wakeSeconds", "greater than or equal to 5"]),
    ("wake-above-600", _idle("bad", idle={"wakeSeconds": 601}), ["spec.idle.wakeSeconds", "less than or equal to 600"]),
    ("wake-on-request-not-bool", _idle("bad", idle={"wakeOnRequest": "yes"}), ["spec.idle.wakeOnRequest", "boolean"]),
    ("unknown-idle-field", _idle("bad", idle={"idleSeconds": 60}), ["idleSeconds"]),
]


@pytest.mark.parametrize("manifest,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_spec_idle_is_refused_naming_the_field(cluster: Any, crd: None, namespace: str, manifest: dict[str, Any],
                                                   needles: list[str], tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(manifest))
    res = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False)
    assert res.returncode != 0, f"accepted: {res.stdout}"
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in: {res.stderr}"


def test_spec_idle_gets_its_defaults_and_status_idle_is_stored(cluster: Any, crd: None, namespace: str,
                                                                 tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_idle("idler")))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    got = json.loads(cluster.kubectl("get", "trt", "idler", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["idle"] == {"afterSeconds": 900, "wakeOnRequest": True, "wakeSeconds": 45}
    idle = {"since": "2026-12-05T10:00:00Z",
            "lastWake": {"requestedAt": "2026-12-05T09:00:00Z", "readyAt": "2026-12-05T09:00:03Z", "seconds": 3.25,
                         "outcome": "Woken", "message": "wake asked by gateway replica gw-1"}}
    cluster.kubectl("patch", "trt", "idler", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"idle": idle}}))
    got = json.loads(cluster.kubectl("get", "trt", "idler", "-n", namespace, "-o", "json").stdout)
    assert got["status"]["idle"] == idle
    # Cleared by a merge patch's null, as the executor writes a field that went away.
    cluster.kubectl("patch", "trt", "idler", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"idle": {"since": None}}}))
    got = json.loads(cluster.kubectl("get", "trt", "idler", "-n", namespace, "-o", "json").stdout)
    assert "since" not in got["status"]["idle"] and got["status"]["idle"]["lastWake"]["outcome"] == "Woken"


@pytest.mark.parametrize("bounds", [{"afterSeconds": 60, "wakeSeconds": 5}, {"afterSeconds": 86400, "wakeSeconds": 600}],
                         ids=["floor", "ceiling"])
def test_spec_idle_bounds_are_inclusive(cluster: Any, crd: None, namespace: str, bounds: dict[str, int],
                                        tmp_path: Any) -> None:
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_idle("edges", idle=bounds)))
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
