"""Day-two verbs and operations (issue 4), with operator processes run for real."""
from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client

from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]


def _annotations(rts: Runtimes, name: str) -> dict[str, str]:
    return dict(rts.get(name)["metadata"].get("annotations") or {})


def test_reset_of_the_current_generation_gives_exactly_one_successor(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    op = operators("op-a")
    rts.create(runtime_manifest("rst"))
    st1 = rts.wait_ready("rst", 1)
    rts.annotate("rst", "baton.dev/reset", "1")
    st2 = rts.wait_ready("rst", 2)
    assert st2["current"]["templateHash"] == st1["current"]["templateHash"], "same template"
    assert st2["history"][0]["outcome"] == "Reset" and st2["history"][0]["uid"] == st1["current"]["uid"]
    assert "baton.dev/reset" not in _annotations(rts, "rst")
    stays(lambda: rts.gen_pod("rst", 3) is None, duration=3, what="no g3")
    assert pod_watch.assert_one_at_a_time("rst") == [1, 2]
    assert op.metric("baton_handoffs_total", outcome="Reset") == 1


def test_a_reset_naming_a_generation_being_retired_is_stale(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """A reset of N while N→N+1 is in flight creates no N+2 and does not touch N+1."""
    op = operators("op-a")
    rts.create(runtime_manifest("race", pod_annotations={"baton.dev/test-terminate-after": "4s"}))
    rts.wait_ready("race", 1)
    rts.set_image("race", "example/tool:2")
    wait_for(lambda: (rts.status("race").get("transition") or {}).get("step") == "AwaitingPodGone",
             timeout=15, what="g1 being retired")
    rts.annotate("race", "baton.dev/reset", "1")
    st2 = rts.wait_ready("race", 2, timeout=30)
    g2_uid = st2["current"]["uid"]
    wait_for(lambda: rts.events("race", "StaleReset"), timeout=15, what="StaleReset event")
    assert "baton.dev/reset" not in _annotations(rts, "race")
    stays(lambda: rts.gen_pod("race", 3) is None and rts.gen_pod("race", 2).metadata.uid == g2_uid
          and rts.gen_pod("race", 2).metadata.deletion_timestamp is None, duration=4, what="g2 untouched")
    assert [e.type for e in rts.events_posted("race", "StaleReset")] == ["Warning"]
    assert "generation 1" in rts.events_posted("race", "StaleReset")[0].message
    assert op.metric("baton_stale_verbs_total", verb="reset") == 1
    assert pod_watch.assert_one_at_a_time("race") == [1, 2]


def test_a_reset_naming_a_number_never_used_is_stale(operators: Start, rts: Runtimes) -> None:
    op = operators("op-a")
    rts.create(runtime_manifest("never"))
    st1 = rts.wait_ready("never", 1)
    rts.annotate("never", "baton.dev/reset", "99")
    wait_for(lambda: rts.events("never", "StaleReset"), timeout=15, what="StaleReset event")
    msg = rts.events("never", "StaleReset")[0].message
    assert "99" in msg and "current generation is 1" in msg
    # The event is posted just before the annotation is removed (same plan): wait for it.
    wait_for(lambda: "baton.dev/reset" not in _annotations(rts, "never"), timeout=10, what="annotation removed")
    assert rts.gen_pod("never", 1).metadata.uid == st1["current"]["uid"]
    assert rts.gen_pod("never", 2) is None
    assert op.metric("baton_stale_verbs_total", verb="reset") == 1


def test_suspend_retires_and_starts_nothing_until_resumed(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    operators("op-a")
    rts.create(runtime_manifest("sus"))
    st1 = rts.wait_ready("sus", 1)
    rts.patch("sus", {"spec": {"suspend": True}})

    def suspended() -> bool:
        c = rts.condition("sus", "Suspended") or {}
        r = rts.condition("sus", "Ready") or {}
        return c.get("status") == "True" and r.get("reason") == "Suspended" and not rts.pods("sus")

    wait_for(suspended, timeout=20, what="suspended with no pod")
    st = rts.status("sus")
    assert st["history"][0]["outcome"] == "Suspended" and st["history"][0]["uid"] == st1["current"]["uid"]
    assert "current" not in st
    # Template changes and resets while suspended start nothing.
    rts.set_image("sus", "example/tool:2")
    rts.annotate("sus", "baton.dev/reset", "1")
    stays(lambda: not rts.pods("sus"), duration=6, what="no pod while suspended")
    assert "baton.dev/reset" not in _annotations(rts, "sus")
    rts.patch("sus", {"spec": {"suspend": False}})
    st2 = rts.wait_ready("sus", 2, timeout=20)
    assert (rts.condition("sus", "Suspended") or {})["status"] == "False"
    stays(lambda: len(rts.pods("sus")) == 1, duration=3, what="exactly one generation after resume")
    assert pod_watch.assert_one_at_a_time("sus") == [1, 2]
    assert st2["current"]["generation"] == 2


def _secret(name: str, value: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"token": base64.b64encode(value.encode()).decode()}}


def test_referenced_secret_change_rolls_once_and_never_leaks(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, cluster: Any,
        namespace: str) -> None:
    core = rts.core
    value1, value2, other = "s3cr3t-value-one", "s3cr3t-value-two", "unrelated-s3cr3t"
    core.create_namespaced_secret(namespace, _secret("api-key", value1))
    core.create_namespaced_secret(namespace, _secret("unrelated", other))
    m = runtime_manifest("roll")
    m["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api-key", "key": "token"}}}]
    op = operators("op-a")
    rts.create(m)
    rts.wait_ready("roll", 1)
    core.patch_namespaced_secret("unrelated", namespace, _secret("unrelated", other + "-changed"))
    stays(lambda: rts.gen_pod("roll", 2) is None, duration=5, what="no handoff for an unreferenced Secret")
    core.patch_namespaced_secret("api-key", namespace, _secret("api-key", value2))
    rts.wait_ready("roll", 2, timeout=30)
    stays(lambda: rts.gen_pod("roll", 3) is None, duration=4, what="exactly one handoff")
    assert pod_watch.assert_one_at_a_time("roll") == [1, 2]
    texts = [str(rts.get("roll")), op.log_text()]
    texts += [f"{e.reason} {e.message}" for e in rts.events("roll")]
    for secret in (value1, value2, other):
        for enc in (secret, base64.b64encode(secret.encode()).decode()):
            assert all(enc not in t for t in texts), "Secret data leaked into status, events or logs"


def test_missing_config_ref_blocks_creation_until_it_exists(
        operators: Start, rts: Runtimes, namespace: str) -> None:
    m = runtime_manifest("cfg")
    m["spec"]["template"]["spec"]["volumes"] = [{"name": "c", "configMap": {"name": "tool-config"}}]
    operators("op-a")
    rts.create(m)

    def degraded() -> bool:
        c = rts.condition("cfg", "Degraded") or {}
        return c.get("status") == "True" and c.get("reason") == "ConfigRefMissing"

    wait_for(degraded, timeout=20, what="Degraded ConfigRefMissing")
    assert "ConfigMap/tool-config" in (rts.condition("cfg", "Degraded") or {})["message"]
    stays(lambda: not rts.pods("cfg"), duration=3, what="no pod without its config")
    rts.core.create_namespaced_config_map(namespace, {"metadata": {"name": "tool-config"}, "data": {"a": "1"}})
    rts.wait_ready("cfg", 1, timeout=20)
    assert (rts.condition("cfg", "Degraded") or {})["status"] == "False"


def test_sigterm_while_draining_hands_back_and_another_replica_finishes(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, cluster: Any,
        namespace: str) -> None:
    drain = 20
    rts.create(runtime_manifest(
        "term", budgets={"drainSeconds": drain},
        drain_probe={"httpGet": {"path": "/idle", "port": 8080}, "periodSeconds": 1}))
    a = operators("op-a")
    rts.wait_ready("term", 1)
    rts.set_image("term", "example/tool:2")
    wait_for(lambda: (rts.status("term").get("transition") or {}).get("step") == "Draining",
             timeout=15, what="Draining")
    t0 = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.wait_exit(drain)
    took = time.monotonic() - t0
    assert code == 0, a.log_tail()
    assert took < drain, f"exit took {took:.1f}s"
    coord = client.CoordinationV1Api(cluster.api_client)
    assert not coord.read_namespaced_lease("baton-term", namespace).spec.holder_identity, "Lease handed back"
    st = rts.status("term")
    assert st["transition"]["step"] == "Draining" and st["transition"]["to"] == 2
    b = operators("op-b")
    rts.wait_ready("term", 2, timeout=drain + 20)
    assert "resuming Handoff at step Draining" in b.log_text()
    assert pod_watch.assert_one_at_a_time("term") == [1, 2]
    print(f"SIGTERM while Draining: exit 0 after {took:.2f}s")


def test_sigterm_while_idle_exits_within_two_seconds(operators: Start, rts: Runtimes) -> None:
    a = operators("op-a")
    rts.create(runtime_manifest("calm"))
    rts.wait_ready("calm", 1)
    time.sleep(1)
    t0 = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.wait_exit(10)
    took = time.monotonic() - t0
    assert code == 0
    assert took < 2.0, f"idle SIGTERM took {took:.2f}s"
    print(f"SIGTERM while idle: exit 0 after {took:.2f}s")


def _plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "baton.cli", *args, "--kubeconfig", cluster.kubeconfig],
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def test_kubectl_plugin_verbs(operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    operators("op-a")
    rts.create(runtime_manifest("plug"))
    st1 = rts.wait_ready("plug", 1)
    # `kubectl baton` finds the console script on PATH.
    kubectl = str(Path(cluster.bin_dir) / "kubectl")
    res = cluster.run(kubectl, "baton", "status", "plug", "-n", namespace, check=False)
    assert res.returncode == 0, res.stderr
    assert "Ready" in res.stdout and "GenerationReady" in res.stdout and "transition: none" in res.stdout
    res = _plugin(cluster, "force-recover", "plug", "-n", namespace)
    assert res.returncode == 1 and "no cleanup failure" in res.stderr
    res = _plugin(cluster, "reset", "plug", "-n", namespace)
    assert res.returncode == 0 and "reset of generation 1" in res.stdout, res.stderr
    rts.wait_ready("plug", 2)
    res = _plugin(cluster, "history", "plug", "-n", namespace)
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["GENERATION", "POD", "UID", "STARTED", "RETIRED", "OUTCOME"]
    assert st1["current"]["uid"] in lines[1] and lines[1].split()[-1] == "Reset"
    assert lines[2].split()[-1] == "Current"
    res = _plugin(cluster, "status", "missing", "-n", namespace)
    assert res.returncode == 1 and "toolruntime 'missing' not found" in res.stderr
    res = _plugin(cluster, "status", "plug", "-n", "default")
    assert res.returncode == 1 and f"it exists in namespace(s) {namespace}" in res.stderr


def test_second_sigterm_leaves_a_state_the_next_holder_resumes(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    """A second SIGTERM (impatient supervisor) must not strand the handoff either."""
    rts.create(runtime_manifest(
        "twice", budgets={"drainSeconds": 20},
        drain_probe={"httpGet": {"path": "/idle", "port": 8080}, "periodSeconds": 1}))
    a = operators("op-a")
    rts.wait_ready("twice", 1)
    rts.set_image("twice", "example/tool:2")
    wait_for(lambda: (rts.status("twice").get("transition") or {}).get("step") == "Draining",
             timeout=15, what="Draining")
    a.signal(signal.SIGTERM)
    time.sleep(0.05)
    a.signal(signal.SIGTERM)
    code = a.wait_exit(20)
    # The second signal may end the process before it hands the Lease back (kopf restores the
    # default handler after the first): that is the case to prove resumable.
    assert code in (0, -signal.SIGTERM), a.log_tail()
    st = rts.status("twice")
    assert st["transition"]["to"] == 2 and st["transition"]["step"] == "Draining"
    b = operators("op-b")
    rts.wait_ready("twice", 2, timeout=40)
    assert "resuming Handoff at step Draining" in b.log_text()
    assert pod_watch.assert_one_at_a_time("twice") == [1, 2]
