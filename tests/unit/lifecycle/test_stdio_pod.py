"""spec.stdio (issue 44): the generation pod with the bridge (pure manifests), the checks the CRD
cannot make in CEL, the bridge's drain probe by default, and a dead child's exit status and stderr
in the PodLost handoff."""
from __future__ import annotations

import datetime
from typing import Any

import pydantic
import pytest

from baton.cache import snapshot
from baton.lifecycle import create
from baton import lifecycle
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import spec as sp
from baton.model import status as st

from .. import builders as b

IMAGE = "ghcr.io/example/baton:0.8.0"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def _template(**container: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "time"}},
            "spec": {"containers": [{"name": "server", "image": "python:3.13-slim", **container}],
                     "volumes": [{"name": "data", "emptyDir": {}}]}}


def _spec(template: dict[str, Any] | None = None, **stdio: Any) -> sp.ToolRuntimeSpec:
    return sp.ToolRuntimeSpec.model_validate({
        "template": template if template is not None else _template(),
        "budgets": {"drainSeconds": 30, "terminationGraceSeconds": 30, "connectSeconds": 60},
        "stdio": {"command": ["mcp-server-time"], "args": ["--local-timezone", "UTC"], **stdio}})


def _pod(spec: sp.ToolRuntimeSpec) -> dict[str, Any]:
    return mf.build_pod(namespace="ns", runtime="time", runtime_uid="u1", template=spec.template, generation=3,
                        fencing_token=9, template_hash="h", stdio=spec.stdio, budgets=spec.budgets, bridge_image=IMAGE)


def test_the_pod_runs_the_stdio_server_behind_the_bridge() -> None:
    pod = _pod(_spec())["spec"]
    [init] = pod["initContainers"]
    assert init["name"] == "baton-bridge-install" and init["image"] == IMAGE
    assert init["command"] == ["cp", "/opt/baton/bin/baton-bridge", "/baton/"]
    assert init["volumeMounts"] == [{"name": "baton-bridge", "mountPath": "/baton"}]
    sc = init["securityContext"]
    assert sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"} and sc["readOnlyRootFilesystem"]
    assert pod["volumes"] == [{"name": "data", "emptyDir": {}}, {"name": "baton-bridge", "emptyDir": {"sizeLimit": "64Mi"}}]
    [c] = pod["containers"]
    # Grace 30 = drain 19 + eof 5 + term 5 + 1 kept back: the child gets EOF before the kubelet's SIGKILL.
    assert c["command"] == ["/baton/baton-bridge", "--listen", "0.0.0.0:8080", "--path", "/mcp",
                            "--drain-seconds", "19", "--eof-seconds", "5", "--term-seconds", "5",
                            "--init-seconds", "60", "--termination-log", "/dev/termination-log",
                            "--", "mcp-server-time"]
    assert c["args"] == ["--local-timezone", "UTC"]
    assert c["ports"] == [{"name": "mcp", "containerPort": 8080, "protocol": "TCP"}]
    assert c["volumeMounts"] == [{"name": "baton-bridge", "mountPath": "/baton", "readOnly": True}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/baton/ready", "port": "mcp"}
    assert (c["terminationMessagePath"], c["terminationMessagePolicy"]) == ("/dev/termination-log", "FallbackToLogsOnError")
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 30


def test_a_named_container_gets_the_bridge_and_the_others_are_kept() -> None:
    template = _template()
    template["spec"]["containers"].insert(0, {"name": "side", "image": "busybox", "command": ["sleep", "inf"]})
    spec = _spec(template, container="server", port=9000, path="/rpc")
    side, server = _pod(spec)["spec"]["containers"]
    assert side == {"name": "side", "image": "busybox", "command": ["sleep", "inf"],
                    "env": mf.fence_env(namespace="ns", runtime="time")}
    assert server["command"][:5] == ["/baton/baton-bridge", "--listen", "0.0.0.0:9000", "--path", "/rpc"]
    assert spec.template == template, "the spec's template is not changed"


@pytest.mark.parametrize("drain, grace, eof, term, expected", [
    (30, 30, 5, 5, (19, 5, 5)),   # the grace bounds the drain
    (3, 30, 5, 5, (3, 5, 5)),     # drainSeconds bounds it
    (30, 4, 1, 1, (1, 1, 1)),     # the least the CRD admits (grace >= eof + term + 2)
])
def test_the_bridge_shutdown_fits_in_the_grace(drain: int, grace: int, eof: int, term: int,
                                               expected: tuple[int, int, int]) -> None:
    got = mf.bridge_seconds(stdio=sp.Stdio(command=("x",), eof_seconds=eof, term_seconds=term),
                            budgets=sp.Budgets(drain_seconds=drain, termination_grace_seconds=grace))
    assert got == expected and sum(got) < grace


def test_without_stdio_the_pod_and_hash_are_unchanged() -> None:
    spec = sp.ToolRuntimeSpec.model_validate({"template": _template(command=["serve"])})
    pod = mf.build_pod(namespace="ns", runtime="t", runtime_uid="u", template=spec.template, generation=1,
                       fencing_token=1, template_hash="h")
    [c] = pod["spec"]["containers"]
    assert c.pop("env") == mf.fence_env(namespace="ns", runtime="t")  # the fence (docs/hooks.md), not the template's
    assert pod["spec"] == spec.template["spec"] and spec.drain.probe is None
    assert mf.pod_definition(spec) is spec.template  # existing runtimes keep their hash: no handoff on upgrade


def test_a_change_of_the_stdio_command_changes_the_hash() -> None:
    one, two = _spec(), _spec(args=["--local-timezone", "Europe/Paris"])
    assert mf.template_hash(mf.pod_definition(one)) != mf.template_hash(mf.pod_definition(two))
    assert mf.template_hash(mf.pod_definition(one)) != mf.template_hash(one.template)


def test_build_pod_refuses_a_stdio_runtime_without_the_image() -> None:
    spec = _spec()
    with pytest.raises(ValueError, match="BATON_IMAGE"):
        mf.build_pod(namespace="ns", runtime="t", runtime_uid="u", template=spec.template, generation=1,
                     fencing_token=1, template_hash="h", stdio=spec.stdio, budgets=spec.budgets)


def test_the_drain_asks_the_bridge_unless_the_user_named_a_probe() -> None:
    probe = _spec(port=9000).drain.probe
    assert probe is not None and (probe.http_get.path, probe.http_get.port) == ("/baton/drain", 9000)
    own = sp.ToolRuntimeSpec.model_validate({"template": _template(), "stdio": {"command": ["x"]},
                                             "drain": {"probe": {"httpGet": {"path": "/idle", "port": 7000}}}})
    assert own.drain.probe is not None and own.drain.probe.http_get.path == "/idle"


@pytest.mark.parametrize("template, stdio, needle", [
    (_template(), {"container": "nope"}, "spec.stdio.container 'nope' names no container"),
    (_template(command=["python"]), {}, "spec.stdio.command replaces the stdio container's command"),
    (_template(args=["-v"]), {}, "spec.stdio.command replaces"),
    (_template(readinessProbe={"exec": {"command": ["true"]}}), {}, "readinessProbe must be unset"),
    (_template(volumeMounts=[{"name": "data", "mountPath": "/baton/"}]), {}, "where the bridge is mounted"),
    (_template(ports=[{"containerPort": 8080}]), {}, "spec.stdio.port 8080 is the bridge's"),
    (_template(ports=[{"name": "mcp", "containerPort": 9}]), {}, "a port named 'mcp'"),
    ({"spec": {"containers": [{"name": "server", "image": "i"}], "volumes": [{"name": "baton-bridge"}]}}, {},
     "spec.template.spec.volumes"),
    ({"spec": {"containers": [{"name": "server", "image": "i"}],
               "initContainers": [{"name": "baton-bridge-install", "image": "i"}]}}, {}, "spec.template.spec.initContainers"),
])
def test_what_cel_cannot_check_is_refused_naming_the_field(template: dict[str, Any], stdio: dict[str, Any],
                                                           needle: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        _spec(template, **stdio)
    assert needle in str(err.value)
    # ...and the runtime says it in Degraded InvalidSpec: the text names the field, not "spec.: Value error".
    text = snapshot._error_text(err.value)
    assert text.startswith("spec.stdio") and needle in text, text


def test_a_port_clash_in_another_container_is_refused() -> None:
    template = _template()
    template["spec"]["containers"].append({"name": "side", "image": "i", "ports": [{"containerPort": 8080}]})
    with pytest.raises(pydantic.ValidationError, match="container 'side' declares it too"):
        _spec(template)


# --- a child that dies on its own: its exit status and stderr in the PodLost handoff -------------

STDERR = "Traceback (most recent call last):\n  ...\nKeyError: 'TZ'"


def _terminated(code: int, message: str, *, group: str = "containerStatuses", name: str = "server") -> dict[str, Any]:
    return {"phase": "Failed", group: [{"name": name, "state": {"terminated": {
        "exitCode": code, "reason": "Error", "message": message}}}]}


def test_the_terminated_text_carries_status_and_message() -> None:
    text = snapshot.terminated_text(_terminated(1, f"exit status 1; stderr: {STDERR}"))
    assert text == f"container server exited with status 1 (Error): exit status 1; stderr: {STDERR}"
    assert snapshot.terminated_text({"phase": "Running", "containerStatuses": [{"name": "s", "state": {"running": {}}}]}) is None
    # An init container that did its job is not why the pod ended; one that failed is.
    done = {"initContainerStatuses": [{"name": "baton-bridge-install", "state": {"terminated": {"exitCode": 0}}}]}
    assert snapshot.terminated_text(done) is None
    failed = snapshot.terminated_text(_terminated(1, "cp: cannot stat", group="initContainerStatuses",
                                                  name="baton-bridge-install"))
    assert failed is not None and failed.startswith("container baton-bridge-install exited with status 1")
    assert snapshot.terminated_text({"containerStatuses": ["junk", {"state": {"terminated": "x"}}]}) is None


def test_a_long_message_is_cut_keeping_its_end() -> None:
    message = "x" * 3000 + "LAST LINE"
    text = snapshot.terminated_text(_terminated(137, message))
    assert text is not None and text.endswith("LAST LINE") and "[1985 characters left out]" in text
    assert len(text) < snapshot.TERMINATION_MESSAGE_SHOWN + 200


def test_a_dead_child_is_handed_off_with_its_status_and_stderr_in_condition_and_event() -> None:
    reason = "container server exited with status 1 (Error): exit status 1; stderr: KeyError: 'TZ'"
    dead = b.pod(7, phase="Failed", ready=False).model_copy(update={"terminated": reason})
    plan = lifecycle.decide(b.observed(pods=(dead,)), b.at(0))
    [write] = [a for a in plan.actions if isinstance(a, p.WriteStatus)]
    t = write.status.transition
    assert t is not None and t.trigger == st.Trigger.POD_LOST and t.message == reason
    progressing = write.status.condition(st.ConditionType.PROGRESSING)
    assert progressing is not None and reason in progressing.message
    [lost] = [a for a in plan.actions if isinstance(a, p.Event) and a.reason == "PodLost"]
    assert lost.type == "Warning" and reason in lost.message and "handing off to g8" in lost.message


def test_a_new_generation_that_dies_before_ready_says_why() -> None:
    reason = "container server exited with status 1: bridge: the child did not answer initialize within 60s"
    connecting = b.in_flight(b.transition(st.Step.CONNECTING, to=8, to_uid=b.uid(8), from_=None, trigger=st.Trigger.INITIAL),
                             gen=None)
    dead = b.pod(8, phase="Failed", ready=False, serving=False).model_copy(update={"terminated": reason})
    plan = lifecycle.decide(b.observed(status_=connecting, pods=(dead,)), b.at(0))
    [lost] = [a for a in plan.actions if isinstance(a, p.Event) and a.reason == "PodLost"]
    assert reason in lost.message, lost


def test_create_without_the_image_says_what_to_set() -> None:
    creating = b.in_flight(b.transition(st.Step.CREATING, to=8, from_=None, trigger=st.Trigger.INITIAL), gen=None)
    o = b.observed(status_=creating, pods=(), spec_=_spec())
    plan = lifecycle.decide(o, b.at(0))
    assert not any(isinstance(a, p.CreatePod) for a in plan.actions)
    [ev] = [a for a in plan.actions if isinstance(a, p.Event)]
    assert ev.reason == "InvalidSpec" and ev.message == create.STDIO_WITHOUT_IMAGE and "BATON_IMAGE" in ev.message
    made = lifecycle.decide(o.model_copy(update={"bridge_image": IMAGE}), b.at(0))
    [pod] = [a for a in made.actions if isinstance(a, p.CreatePod)]
    assert pod.manifest["spec"]["initContainers"][0]["image"] == IMAGE
