"""Names and manifests for pods on the local plane's kwok nodes (see tests/README.md)."""
from __future__ import annotations

import ipaddress
from typing import Any

# Node names and address ranges (hack/cluster.py creates the nodes).
NODE = "kwok-a"                 # untainted; pod IPs from 192.0.2.0/24: never dial them
LOOPBACK_NODE = "kwok-loop"     # tainted; pod IPs from 127.0.100.0/24, on the loopback interface
NODE_CIDR = ipaddress.ip_network("192.0.2.0/24")
LOOPBACK_CIDR = ipaddress.ip_network("127.0.100.0/24")
LOOPBACK_LABEL = "baton.dev/loopback"
LOOPBACK_TAINT_KEY = "baton.dev/loopback"

# Annotations that make a pod misbehave (hack/kwok/*.yaml implement them).
NEVER_READY = "baton.dev/test-never-ready"        # "true": Running, never Ready
TERMINATE_AFTER = "baton.dev/test-terminate-after"  # Go duration: a delete takes that long

IMAGE = "registry.invalid/baton-test:0"  # never pulled: kwok runs no containers


def assert_loopback(ip: str) -> str:
    """The network rule: tests only dial 127.0.0.0/8. Returns ip when it is loopback."""
    if not ipaddress.ip_address(ip).is_loopback:
        raise AssertionError(f"refusing to dial {ip}: tests only send traffic to 127.0.0.0/8")
    return ip


def pod_manifest(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    grace_seconds: int | None = None,
    loopback: bool = False,
    never_ready: bool = False,
    terminate_after: str | None = None,
    port: int | None = None,
) -> dict[str, Any]:
    """A one-container pod for the kwok nodes.

    loopback=True selects and tolerates kwok-loop (the pod gets a 127.0.100.x IP);
    never_ready / terminate_after set the misbehaviour annotations.
    """
    ann = dict(annotations or {})
    if never_ready:
        ann[NEVER_READY] = "true"
    if terminate_after is not None:
        ann[TERMINATE_AFTER] = terminate_after
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if port is not None:
        container["ports"] = [{"containerPort": port}]
    spec: dict[str, Any] = {"containers": [container]}
    if grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = grace_seconds
    if loopback:
        spec["nodeSelector"] = {LOOPBACK_LABEL: "true"}
        spec["tolerations"] = [
            {"key": LOOPBACK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
        ]
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {}), "annotations": ann}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def is_ready(pod: Any) -> bool:
    """Pod condition Ready=True (a kubernetes.client V1Pod)."""
    conds = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conds)
