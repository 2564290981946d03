"""A stdio runtime on the local plane (issue 44): the operator builds the pod with the bridge, the
API server holds what it built, and a pod whose stdio child ended is handed off with the exit
status and the termination message (the bridge's `exit status N; stderr: ...`) in the PodLost
event. kwok plays the kubelet: pods turn Ready without running anything, and the end of a child is
written into the pod's status through the API, as a kubelet would."""
from __future__ import annotations

from typing import Any

from dev.wait import wait_for
from harness.runtimes import Runtimes, runtime_manifest

IMAGE = "registry.invalid/baton:stdio-test"  # never pulled: kwok runs no containers


def stdio_runtime(name: str, **stdio: Any) -> dict[str, Any]:
    m = runtime_manifest(name, budgets={"drainSeconds": 5, "terminationGraceSeconds": 6, "cleanupSeconds": 10})
    del m["spec"]["template"]["spec"]["containers"][0]["ports"]
    m["spec"]["stdio"] = {"command": ["mcp-server-time"], "args": ["--local-timezone", "UTC"],
                          "eofSeconds": 1, "termSeconds": 2, **stdio}
    return m


def test_the_operator_builds_the_stdio_pod_with_the_bridge(operators: Any, rts: Runtimes) -> None:
    operators("op-a", env={"BATON_IMAGE": IMAGE})
    rts.create(stdio_runtime("time"))
    st1 = rts.wait_ready("time", 1)
    pod = rts.core.read_namespaced_pod(st1["current"]["pod"], rts.ns)
    spec = rts.api.sanitize_for_serialization(pod)["spec"]
    [init] = spec["initContainers"]
    assert (init["name"], init["image"], init["command"]) == (
        "baton-bridge-install", IMAGE, ["cp", "/opt/baton/bin/baton-bridge", "/baton/"])
    assert init["securityContext"]["runAsNonRoot"] is True and init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "baton-bridge", "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]
    [c] = spec["containers"]
    # Grace 6 = drain 2 (what is left after eof 1, term 2 and 1 kept back) + 1 + 2 + 1.
    assert c["command"] == ["/baton/baton-bridge", "--listen", "0.0.0.0:8080", "--path", "/mcp",
                            "--drain-seconds", "2", "--eof-seconds", "1", "--term-seconds", "2",
                            "--init-seconds", "20", "--termination-log", "/dev/termination-log",
                            "--", "mcp-server-time"]
    assert c["args"] == ["--local-timezone", "UTC"]
    assert c["ports"] == [{"name": "mcp", "containerPort": 8080, "protocol": "TCP"}]
    assert {"name": "baton-bridge", "mountPath": "/baton", "readOnly": True} in c["volumeMounts"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/baton/ready" and c["readinessProbe"]["httpGet"]["port"] == "mcp"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert spec["restartPolicy"] == "Never" and spec["terminationGracePeriodSeconds"] == 6


def test_a_dead_child_is_replaced_with_its_exit_status_and_stderr_in_the_event(
        operators: Any, rts: Runtimes) -> None:
    operators("op-a", env={"BATON_IMAGE": IMAGE})
    rts.create(stdio_runtime("dies"))
    st1 = rts.wait_ready("dies", 1)
    name = st1["current"]["pod"]
    stderr = "Traceback (most recent call last):\nValueError: unknown timezone 'Mars/Olympus'"
    # What the kubelet writes when the bridge exits with its child's status after its termination log.
    rts.core.patch_namespaced_pod_status(name, rts.ns, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "server", "image": "example/tool:1", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": f"exit status 3; stderr: {stderr}"}}}]}})
    st2 = rts.wait_ready("dies", 2, timeout=60)
    assert st2["history"][-1]["outcome"] == "Lost" and st2["history"][-1]["uid"] == st1["current"]["uid"]
    [lost] = [e for e in rts.events_posted("dies", "PodLost") if "handing off" in e.message]
    assert "container server exited with status 3 (Error): exit status 3; stderr: Traceback" in lost.message, lost.message
    assert "unknown timezone 'Mars/Olympus'" in lost.message and lost.type == "Warning"


def test_without_baton_image_a_stdio_runtime_says_what_to_set(operators: Any, rts: Runtimes) -> None:
    operators("op-a")
    rts.create(stdio_runtime("noimage"))
    degraded = wait_for(lambda: (c := rts.condition("noimage", "Degraded")) and c.get("status") == "True" and c,
                        timeout=30, what="Degraded=True")
    assert degraded["reason"] == "InvalidSpec" and "BATON_IMAGE" in degraded["message"], degraded
    assert rts.pods("noimage") == []


def test_a_stdio_container_cel_cannot_check_is_refused_by_the_operator_naming_the_field(
        operators: Any, rts: Runtimes) -> None:
    operators("op-a", env={"BATON_IMAGE": IMAGE})
    rts.create(stdio_runtime("nocontainer", container="nope"))
    degraded = wait_for(lambda: (c := rts.condition("nocontainer", "Degraded")) and c.get("status") == "True" and c,
                        timeout=30, what="Degraded=True")
    assert degraded["reason"] == "InvalidSpec", degraded
    assert "spec.stdio.container 'nope' names no container of spec.template.spec.containers" in degraded["message"]
    assert rts.pods("nocontainer") == []
