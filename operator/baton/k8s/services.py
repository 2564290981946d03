"""The runtime's Service and the EndpointSlices that say whether a pod still gets traffic."""

from __future__ import annotations

from typing import Any

from baton.k8s import client


def read_service(namespace: str, name: str) -> dict[str, Any] | None:
    return client.read_or_none(client.core().read_namespaced_service, name, namespace)


def apply_service(namespace: str, manifest: dict[str, Any]) -> None:
    name = manifest["metadata"]["name"]
    try:
        client.core().create_namespaced_service(namespace, manifest)  # type: ignore[arg-type]
        return
    except client.ApiException as exc:
        if not client.is_conflict(exc):
            raise
    patch = {"metadata": {"labels": manifest["metadata"]["labels"]}, "spec": manifest["spec"]}
    client.core().patch_namespaced_service(name, namespace, patch)


def delete_service(namespace: str, name: str) -> None:
    try:
        client.core().delete_namespaced_service(name, namespace)
    except client.ApiException as exc:
        if not client.is_not_found(exc):
            raise


def endpoints_list_pod_ready(namespace: str, service: str, pod_uid: str, pod_name: str) -> bool:
    """True while any EndpointSlice of the Service lists the pod as ready."""
    resp = client.discovery().list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}", _preload_content=False
    )
    for eps in client.json_of(resp).get("items", []):
        for ep in eps.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if ref.get("uid") == pod_uid or (ref.get("kind") == "Pod" and ref.get("name") == pod_name and not ref.get("uid")):
                if (ep.get("conditions") or {}).get("ready", True):
                    return True
    return False
