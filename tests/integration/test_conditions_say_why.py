"""Conditions that say why (issue 25, item 3), against the real API server with the operator as a
real process: Ready carries the cause that blocks serving (a missing ConfigMap, named), said once
by a Warning event however many passes run; Progressing is False while a failure holds (the
missing ConfigMap, a cleanup failure) and True again once work moves; a ToolRuntimeClaim's Bound
condition, shown by the CRD's printer column in the API server's Table output."""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from kubernetes import client

from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, VERSION, Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _cond(rts: Runtimes, name: str, kind: str) -> dict[str, Any]:
    return rts.condition(name, kind) or {}


def _passes(op: OperatorProcess, name: str) -> int:
    """Passes the operator decided for runtime `name` (its DEBUG line per plan)."""
    return len(re.findall(rf'"plan {re.escape(name)}: ', op.log_text()))


def test_missing_configmap_is_the_ready_reason_said_once_then_ready_once_it_exists(
        operators: Start, rts: Runtimes) -> None:
    op = operators("op-a", env={"BATON_LOG_LEVEL": "DEBUG"})
    manifest = runtime_manifest("needs-cm")
    manifest["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "not-there"}}]
    rts.create(manifest)

    ready = wait_for(lambda: (c := _cond(rts, "needs-cm", "Ready")).get("reason") == "ConfigRefMissing" and c,
                     timeout=30, what="Ready reason ConfigRefMissing")
    assert ready["status"] == "False" and "ConfigMap/not-there" in ready["message"], ready
    progressing = _cond(rts, "needs-cm", "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "ConfigRefMissing"), progressing
    degraded = _cond(rts, "needs-cm", "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True", "ConfigRefMissing", ready["message"]), degraded
    [event] = rts.events_posted("needs-cm", "ConfigRefMissing")
    assert event.type == "Warning" and "ConfigMap/not-there" in event.message, event

    # More passes while the ConfigMap is still missing (each spec edit wakes one, and its status
    # write records the new observedGeneration): no second event, the same cause in Ready.
    before = _passes(op, "needs-cm")
    for i in range(4):
        rts.patch("needs-cm", {"spec": {"budgets": {"lockSeconds": 11 + i}}})
        wait_for(lambda n=i: _cond(rts, "needs-cm", "Ready").get("observedGeneration") == 2 + n, timeout=30,
                 what=f"status written for spec generation {2 + i}")
    assert _passes(op, "needs-cm") >= before + 4
    stays(lambda: len(rts.events("needs-cm", "ConfigRefMissing")) == 1, duration=3,
          what="still exactly one ConfigRefMissing event")
    again = _cond(rts, "needs-cm", "Ready")
    assert (again["status"], again["reason"], again["message"], again["lastTransitionTime"]) == (
        "False", "ConfigRefMissing", ready["message"], ready["lastTransitionTime"]), again

    rts.core.create_namespaced_config_map(rts.ns, {"metadata": {"name": "not-there"}, "data": {"k": "v"}})
    rts.wait_ready("needs-cm", 1, timeout=60)
    assert _cond(rts, "needs-cm", "Degraded")["status"] == "False"
    assert (_cond(rts, "needs-cm", "Progressing")["status"], _cond(rts, "needs-cm", "Progressing")["reason"]) == (
        "False", "Idle")
    assert len(rts.events("needs-cm", "ConfigRefMissing")) == 1


def test_a_held_cleanup_failure_holds_progressing_false_until_recovered(
        operators: Start, rts: Runtimes) -> None:
    """A finalizer nobody removes keeps the old pod: CleanupFailed holds the handoff, and
    Progressing says False (reason CleanupFailed) with Ready naming the stuck pod; a force
    recovery moves the work again and generation 2 serves."""
    operators("op-a")
    rts.create(runtime_manifest("held", budgets={"drainSeconds": 2, "terminationGraceSeconds": 1, "cleanupSeconds": 3}))
    st1 = rts.wait_ready("held", 1)
    pod = st1["current"]["pod"]
    rts.core.patch_namespaced_pod(pod, rts.ns, {"metadata": {"finalizers": ["test.baton.dev/hold"]}})
    try:
        rts.set_image("held", "example/tool:2")
        wait_for(lambda: _cond(rts, "held", "CleanupFailed").get("status") == "True", timeout=60,
                 what="CleanupFailed=True")
        progressing = wait_for(lambda: (c := _cond(rts, "held", "Progressing")).get("status") == "False" and c,
                               timeout=10, what="Progressing=False")
        assert progressing["reason"] == "CleanupFailed" and "baton.dev/force-recovery" in progressing["message"], progressing
        ready = _cond(rts, "held", "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "CleanupFailed") and pod in ready["message"], ready
        stays(lambda: _cond(rts, "held", "Progressing").get("status") == "False", duration=3,
              what="Progressing stays False while the failure holds")

        rts.annotate("held", "baton.dev/force-recovery", "1")
        rts.wait_ready("held", 2, timeout=60)
        assert _cond(rts, "held", "Progressing")["reason"] == "Idle"
    finally:
        if rts.pod(pod) is not None:
            rts.core.patch_namespaced_pod(pod, rts.ns, {"metadata": {"finalizers": None}})


def test_a_connect_timeout_loop_says_why_in_ready_and_holds_progressing_false_between_attempts(
        operators: Start, rts: Runtimes) -> None:
    """A pod that never becomes Ready: between attempts (the back-off) Progressing=False and Ready
    carry ConnectTimeout with Degraded's message; an attempt under way is Progressing=True."""
    operators("op-a")  # back-off base 2 s in tests: 2, 4, 8 ...
    rts.create(runtime_manifest("noready", budgets={"connectSeconds": 2},
                                pod_annotations={"baton.dev/test-never-ready": "true"}))

    def backing_off() -> dict[str, Any] | None:
        st = rts.status("noready")
        conds = {c["type"]: c for c in st.get("conditions") or []}
        prog = conds.get("Progressing", {})
        if st.get("transition") or (prog.get("status"), prog.get("reason")) != ("False", "ConnectTimeout"):
            return None
        return conds

    conds = wait_for(backing_off, timeout=60, interval=0.2, what="Progressing=False ConnectTimeout between attempts")
    ready, degraded = conds["Ready"], conds["Degraded"]
    assert (ready["status"], ready["reason"]) == ("False", "ConnectTimeout"), ready
    assert ready["message"].startswith(degraded["message"]) and "next try at" in ready["message"], (ready, degraded)
    assert "not Ready within connectSeconds=2" in ready["message"]
    wait_for(lambda: (rts.condition("noready", "Progressing") or {}).get("status") == "True", timeout=60, interval=0.2,
             what="Progressing=True as the next attempt moves")


def test_claim_bound_condition_and_printer_column(operators: Start, rts: Runtimes) -> None:
    claims = client.CustomObjectsApi(rts.core.api_client)
    operators("op-a")
    rts.create(runtime_manifest("svc", budgets={"drainSeconds": 2, "terminationGraceSeconds": 1}))
    rts.wait_ready("svc", 1)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntimeClaim", "metadata": {"name": "plan-1-a"},
            "spec": {"runtimeRef": {"name": "svc"}, "generation": 1, "fork": "plan-1", "branch": "a",
                     "state": "Speculative"}}
    claims.create_namespaced_custom_object(GROUP, VERSION, rts.ns, "toolruntimeclaims", body)

    def bound() -> dict[str, Any]:
        got = claims.get_namespaced_custom_object(GROUP, VERSION, rts.ns, "toolruntimeclaims", "plan-1-a")
        return next((c for c in (got.get("status") or {}).get("conditions") or [] if c["type"] == "Bound"), {})

    def table_row() -> dict[str, Any]:
        api = rts.core.api_client
        method, url, headers, body, post = api.param_serialize(
            "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{rts.ns}/toolruntimeclaims",
            header_params={"Accept": TABLE}, auth_settings=["BearerToken"])
        raw = api.call_api(method, url, header_params=headers, body=body, post_params=post, _request_timeout=30)
        raw.read()
        table = json.loads(raw.data)
        assert table["kind"] == "Table", table
        names = [c["name"] for c in table["columnDefinitions"]]
        [row] = [r for r in table["rows"] if r["cells"][0] == "plan-1-a"]
        return dict(zip(names, row["cells"]))

    c = wait_for(lambda: bound().get("status") == "True" and bound(), timeout=30, what="claim Bound=True")
    assert c["reason"] == "GenerationExists" and "generation 1 of svc exists" in c["message"], c
    row = table_row()
    assert (row["Bound"], row["Reason"]) == ("True", "GenerationExists"), row

    # Generation 1 goes (a template change): the claim is no longer bound, said as Stale.
    rts.set_image("svc", "example/tool:2")
    rts.wait_ready("svc", 2)
    c = wait_for(lambda: bound().get("status") == "False" and bound(), timeout=30, what="claim Bound=False")
    assert c["reason"] == "Stale" and "generation 1 of svc is gone (now 2)" in c["message"], c
    row = table_row()
    assert (row["Bound"], row["Reason"], row["Message"]) == ("False", "Stale", c["message"]), row
    claims.delete_namespaced_custom_object(GROUP, VERSION, rts.ns, "toolruntimeclaims", "plan-1-a")
