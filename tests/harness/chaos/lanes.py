"""The lanes orderings run in: the test's own, and side lanes (`make chaos PARALLEL=N`) with a
namespace, operators and a pod watch of their own."""
from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness import fixtures
from harness.chaos.ordering import Start
from harness.runtimes import Runtimes
from harness.watchlog import PodWatch

@dataclass
class Lane:
    """What one ordering runs with: its own namespace, operators, runtimes and pod watch."""

    namespace: str
    workdir: Path
    operators: Start
    rts: Runtimes
    pod_watch: PodWatch


@contextlib.contextmanager
def side_lane(cluster: Any, workdir: Path, seed: int) -> Iterator[Lane]:
    """A namespace of its own for an ordering run beside the test's own (`make chaos
    PARALLEL=N`); everything in it is stopped and the namespace deleted afterwards."""
    core = client.CoreV1Api(cluster.api_client)
    ns = f"chaos-s{seed}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {"baton.dev/test": "true"}}})
    workdir.mkdir(parents=True, exist_ok=True)
    ops = fixtures.OperatorSet(cluster, ns, workdir)
    watch: PodWatch | None = None
    try:
        wait_for(lambda: bool(core.list_namespaced_service_account(ns, field_selector="metadata.name=default").items),
                 timeout=30, what=f"ServiceAccount {ns}/default")
        watch = PodWatch(cluster.api_client, ns)
        yield Lane(ns, workdir, ops.start, Runtimes(cluster.api_client, ns), watch)
    finally:
        ops.close()
        if watch is not None:
            watch.stop()
        for pod in core.list_namespaced_pod(ns).items:  # stuck pods (the hold finalizer) first
            try:
                if pod.metadata.finalizers:
                    core.patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"finalizers": None}})
                core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        core.delete_namespace(ns)
