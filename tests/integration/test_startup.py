"""SIGTERM while the views are still filling at startup (issue 23): the shutdown still runs.

kopf cancels an unfinished startup activity on SIGTERM and then skips the cleanup activity; the
startup activity used to wait up to 60 s for the views while the workers already acted, so a
Lease taken in those seconds was never handed back (the next replica waited a Lease duration)."""
from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, Callable

from kubernetes import client

from dev.wait import wait_for
from harness import apiproxy
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, install_crd, runtime_manifest

Start = Callable[..., OperatorProcess]


def test_sigterm_while_the_views_fill_hands_the_lease_back(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str, tmp_path: Path) -> None:
    coord = client.CoordinationV1Api(cluster.api_client)

    def holder() -> str | None:
        try:
            return coord.read_namespaced_lease("baton-slow", namespace).spec.holder_identity  # type: ignore[no-any-return]
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    # A pod that never turns Ready: the first generation stays Connecting, its Lease held.
    rts.create(runtime_manifest("slow", budgets={"connectSeconds": 300},
                                pod_annotations={"baton.dev/test-never-ready": "true"}))
    (tmp_path / "proxy").mkdir()
    with apiproxy.ApiProxy(cluster.kubeconfig, tmp_path / "proxy") as proxy:
        # The EndpointSlice list never answers: the views stay unfilled for the whole test.
        proxy.hold(apiproxy.matching(method="GET", path=r"/apis/discovery\.k8s\.io/v1(/namespaces/[^/]+)?/endpointslices",
                                     watch=False))
        op = operators("op-a", kubeconfig=proxy.kubeconfig)
        wait_for(lambda: proxy.held_count() >= 1, timeout=30, what="the EndpointSlice list held")
        wait_for(lambda: holder() == "op-a", timeout=60, what="op-a holds the Lease while Connecting")
        # The Lease is taken a moment before the status says so (CI once read the status between).
        wait_for(lambda: (rts.status("slow").get("transition") or {}).get("step") in ("Creating", "Connecting"),
                 timeout=30, what="the status says Creating or Connecting")
        assert "baton started" not in op.log_text(), "the views filled: the test proves nothing"
        op.signal(signal.SIGTERM)
        code = op.wait_exit(60)
        proxy.release()
    log = op.log_text()
    assert code == 0, op.log_tail()
    assert "handing back Leases" in log and "stopped" in log, op.log_tail()
    assert holder() is None, "the Lease taken while the views filled was not handed back"


def test_a_missing_claim_crd_is_refused_at_startup_naming_it(operators: Start, cluster: Any) -> None:
    """CRDs managed outside Helm from an older copy: without the claim CRD the claims view never
    fills and every retire would block for good, unreported; startup refuses instead, as it does
    for the ToolRuntime CRD."""
    ext = client.ApiextensionsV1Api(cluster.api_client)
    crd_name = "toolruntimeclaims.baton.dev"

    def crd_gone() -> bool:
        try:
            ext.read_custom_resource_definition(crd_name)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    ext.delete_custom_resource_definition(crd_name)
    try:
        wait_for(crd_gone, timeout=60, what="the claim CRD deleted")
        op = operators("op-a", wait=False).launch()
        code = op.wait_exit(60)
        assert code != 0, op.log_tail()
        assert "the ToolRuntimeClaim CRD (toolruntimeclaims.baton.dev/v1alpha1) is not served" in op.log_text(), \
            op.log_tail()
        # One JSON line says so, last; no traceback, no unclosed aiohttp session behind it.
        text = op.log_text()
        assert "Traceback" not in text and "Unclosed" not in text, op.log_tail()
        last = json.loads(text.splitlines()[-1])
        assert last["severity"] == "CRITICAL" and "toolruntimeclaims.baton.dev" in last["message"], last
    finally:
        install_crd(cluster)
