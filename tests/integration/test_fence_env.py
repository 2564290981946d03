"""The fence handed to the tool (issue 45; docs/hooks.md, "The fence in the tool's pod"), against
the real API server with the operator as a real process: each generation's pod, as the API server
stored it, gives every container BATON_GENERATION and BATON_FENCING_TOKEN through fieldRefs to
annotations that very pod carries (so the kubelet resolves them to that generation's own values),
BATON_RUNTIME and BATON_POD_NAME; an env entry of the template with one of those names is kept."""
from __future__ import annotations

import re
from typing import Any, Callable

from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

from baton.model import names

Start = Callable[..., OperatorProcess]
FENCE = {"BATON_RUNTIME", "BATON_GENERATION", "BATON_FENCING_TOKEN", "BATON_POD_NAME"}


def _stored_pod(rts: Runtimes, name: str, generation: int) -> dict[str, Any]:
    pod = rts.gen_pod(name, generation)
    assert pod is not None, f"generation {generation}'s pod"
    stored: dict[str, Any] = rts.api.sanitize_for_serialization(pod)
    return stored


def _resolved(pod: dict[str, Any], entry: dict[str, Any]) -> str:
    """What the kubelet gives the container for `entry`: the literal value, or the pod's own
    field the fieldRef names (an annotation it must carry, or its name)."""
    if "value" in entry:
        return str(entry["value"])
    path = entry["valueFrom"]["fieldRef"]["fieldPath"]
    if path == "metadata.name":
        return str(pod["metadata"]["name"])
    match = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
    assert match, f"{entry['name']}: an unexpected fieldPath {path!r}"
    annotations = pod["metadata"].get("annotations") or {}
    assert match.group(1) in annotations, f"{entry['name']} names annotation {match.group(1)!r}, which the pod lacks"
    return str(annotations[match.group(1)])


def test_each_generations_pod_hands_its_own_fence_to_every_container(
        operators: Start, rts: Runtimes, namespace: str) -> None:
    operators("op-a")
    manifest = runtime_manifest("fenced")
    containers = manifest["spec"]["template"]["spec"]["containers"]
    containers[0]["env"] = [{"name": "BATON_POD_NAME", "value": "set-by-the-template"}]
    containers.append({"name": "side", "image": "example/proxy:1"})
    rts.create(manifest)
    rts.wait_ready("fenced", 1)

    seen: dict[int, dict[str, str]] = {}
    for generation in (1, 2):
        if generation == 2:
            rts.set_image("fenced", "example/tool:2")
            rts.wait_ready("fenced", 2, timeout=90)
        pod = _stored_pod(rts, "fenced", generation)
        annotations = pod["metadata"]["annotations"]
        server, side = pod["spec"]["containers"]
        for c in (server, side):
            env = {e["name"]: _resolved(pod, e) for e in c["env"] if e["name"] in FENCE}
            assert set(env) == FENCE, c["env"]
            assert env["BATON_GENERATION"] == str(generation) == annotations[names.ANN_GENERATION]
            assert env["BATON_FENCING_TOKEN"] == annotations[names.ANN_FENCING_TOKEN]
            assert env["BATON_RUNTIME"] == f"{namespace}/fenced"
        assert [e for e in server["env"] if e["name"] == "BATON_POD_NAME"] == [
            {"name": "BATON_POD_NAME", "value": "set-by-the-template"}], "the template's own entry wins, alone"
        assert _resolved(pod, next(e for e in side["env"] if e["name"] == "BATON_POD_NAME")) == "fenced"
        seen[generation] = {"generation": annotations[names.ANN_GENERATION],
                            "token": annotations[names.ANN_FENCING_TOKEN]}
    # The fence rises: the next generation's number, and a token never below the one before.
    assert int(seen[2]["token"]) >= int(seen[1]["token"]) >= 1
