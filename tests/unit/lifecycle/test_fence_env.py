"""The fence handed to the tool (issue 45; docs/hooks.md, "The fence in the tool's pod"): every
container of a generation's pod gets BATON_RUNTIME, BATON_GENERATION, BATON_FENCING_TOKEN and
BATON_POD_NAME, the generation and token through the downward API from the pod's own annotations;
an env entry the template sets with one of those names wins."""
from __future__ import annotations

import re
from typing import Any

from baton.lifecycle import manifests as mf
from baton.model import names
from baton.model import spec as sp

IMAGE = "ghcr.io/example/baton:0.8.0"


def _template(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "t"}},
            "spec": {"containers": list(containers) or [{"name": "server", "image": "tool:1"}]}}


def _pod(template: dict[str, Any], *, stdio: sp.Stdio | None = None) -> dict[str, Any]:
    return mf.build_pod(namespace="agents", runtime="search", runtime_uid="u1", template=template, generation=7,
                        fencing_token=42, template_hash="h", stdio=stdio, bridge_image=IMAGE if stdio else "")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def _annotation_of(field_path: str) -> str:
    match = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", field_path)
    assert match, field_path
    return match.group(1)


def test_every_container_gets_the_fence_from_the_pods_own_annotations() -> None:
    pod = _pod(_template({"name": "server", "image": "tool:1"}, {"name": "side", "image": "proxy:1"}))
    annotations = pod["metadata"]["annotations"]
    for c in pod["spec"]["containers"]:
        env = _env(c)
        assert env["BATON_RUNTIME"] == "agents/search"  # as the Baton-Runtime header of a hook call
        assert env["BATON_POD_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
        gen, token = env["BATON_GENERATION"]["fieldRef"], env["BATON_FENCING_TOKEN"]["fieldRef"]
        # The downward API reads the pod's own annotations, and the pod carries them with these values.
        assert _annotation_of(gen["fieldPath"]) == names.ANN_GENERATION
        assert _annotation_of(token["fieldPath"]) == names.ANN_FENCING_TOKEN
        assert annotations[_annotation_of(gen["fieldPath"])] == "7"
        assert annotations[_annotation_of(token["fieldPath"])] == "42"


def test_the_templates_own_env_comes_first_and_a_name_it_sets_wins() -> None:
    own = [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "BATON_GENERATION", "value": "mine"}]
    template = _template({"name": "server", "image": "tool:1", "env": own})
    [c] = _pod(template)["spec"]["containers"]
    assert c["env"][:2] == own, "the template's entries are kept, in order, unchanged"
    assert [e["name"] for e in c["env"]].count("BATON_GENERATION") == 1, "never a second entry of one name"
    assert _env(c)["BATON_GENERATION"] == "mine"
    assert [e["name"] for e in c["env"][2:]] == ["BATON_RUNTIME", "BATON_FENCING_TOKEN", "BATON_POD_NAME"]
    assert template["spec"]["containers"][0]["env"] == own, "the spec's template is not changed"


def test_init_containers_get_nothing_and_the_hash_ignores_the_fence() -> None:
    template = _template()
    template["spec"]["initContainers"] = [{"name": "setup", "image": "tool:1"}]
    pod = _pod(template)
    assert "env" not in pod["spec"]["initContainers"][0]
    # The env is added at build time, not to the template: upgrading Baton hands nothing off.
    spec = sp.ToolRuntimeSpec.model_validate({"template": template})
    assert mf.pod_definition(spec) is spec.template


def test_the_stdio_server_gets_it_in_the_bridges_container() -> None:
    stdio = sp.Stdio(command=("mcp-server-time",))
    [c] = _pod(_template(), stdio=stdio)["spec"]["containers"]
    assert c["command"][0] == mf.BRIDGE_BINARY
    assert set(_env(c)) == {"BATON_RUNTIME", "BATON_GENERATION", "BATON_FENCING_TOKEN", "BATON_POD_NAME"}
    [init] = _pod(_template(), stdio=stdio)["spec"]["initContainers"]
    assert "env" not in init, "the bridge's install step needs no fence"
