"""A Service the API server refuses is said, not retried in silence (issue 23): Degraded=True
ServiceError quoting the API server, one Warning event, retried backed off, and cleared once the
Service is written."""
from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]


@pytest.fixture
def services_refused(cluster: Any, namespace: str) -> Iterator[Callable[[], None]]:
    """An admission policy that refuses every Service create in `namespace`; call to lift it."""
    adm = client.AdmissionregistrationV1Api(cluster.api_client)
    name = f"deny-services-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(cluster.api_client).patch_namespace(namespace, {"metadata": {"labels": {name: "true"}}})
    adm.create_validating_admission_policy({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "resources": ["services"], "operations": ["CREATE"]}]},
                 "validations": [{"expression": "false", "message": "Services are refused here (test policy)"}]}})
    adm.create_validating_admission_policy_binding({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {name: "true"}}}}})

    def probe() -> bool:
        try:
            client.CoreV1Api(cluster.api_client).create_namespaced_service(
                namespace, {"metadata": {"name": "probe"}, "spec": {"ports": [{"port": 80}]}}, dry_run="All")
        except ApiException as e:
            return e.status in (400, 403, 422) and "test policy" in str(e.body)
        return False

    wait_for(probe, timeout=30, what="the test policy in force")
    lifted = []

    def lift() -> None:
        if not lifted:
            adm.delete_validating_admission_policy_binding(name)
            adm.delete_validating_admission_policy(name)
            lifted.append(True)
    yield lift
    lift()


def test_a_refused_service_is_reported_and_cleared_once_written(operators: Start, rts: Runtimes, namespace: str,
                                                               services_refused: Callable[[], None]) -> None:
    op = operators("op-a")
    rts.create(runtime_manifest("svc", service=True))
    rts.wait_ready("svc", 1)

    def degraded() -> dict[str, Any] | None:
        c = rts.condition("svc", "Degraded")
        return c if c and c["status"] == "True" and c["reason"] == "ServiceError" else None

    cond = wait_for(degraded, timeout=20, what="Degraded=True ServiceError")
    assert "svc" in cond["message"] and "test policy" in cond["message"], cond
    assert [e.type for e in rts.events_posted("svc", "ServiceError")] == ["Warning"]
    services_refused()
    # Retried with the pass's back-off (at most 30 s between tries), then the condition clears.
    wait_for(lambda: rts.core.read_namespaced_service("svc", namespace), timeout=45,
             what="the Service created once allowed", ignore=(ApiException,))
    wait_for(lambda: (rts.condition("svc", "Degraded") or {}).get("status") == "False", timeout=15,
             what="Degraded cleared")
    assert len(rts.events_posted("svc", "ServiceError")) == 1, "said once"
    assert op.metric("baton_action_errors_total", action="EnsureService") >= 1
