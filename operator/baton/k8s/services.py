"""The runtime's Service and the EndpointSlices that say whether a pod still gets traffic."""

from __future__ import annotations

from typing import Any

from baton.k8s import client


def read_service(namespace: str, name: str) -> dict[str, Any] | None:
    return client.read_or_none(client.core().read_namespaced_service, name, namespace)


class NotOwned(Exception):
    """A Service with the runtime's name exists and the runtime does not own it."""


def apply_service(namespace: str, manifest: dict[str, Any], *, uid: str | None) -> None:
    """Create the Service, or patch the one this runtime owns (`uid`, as observed)."""
    name = manifest["metadata"]["name"]
    if uid is None:
        try:
            client.core().create_namespaced_service(namespace, manifest)  # type: ignore[arg-type]
            return
        except client.ApiException as exc:
            if client.is_conflict(exc):
                raise NotOwned(f"Service {namespace}/{name} was created by someone else meanwhile") from exc
            raise
    # metadata.uid in the patch: the API server refuses it if the name now holds another object.
    patch = {"metadata": {"uid": uid, "labels": manifest["metadata"]["labels"]}, "spec": manifest["spec"]}
    client.core().patch_namespaced_service(name, namespace, patch)


def delete_service(namespace: str, name: str, uid: str) -> None:
    """Delete exactly the Service this runtime owns (UID precondition), never a successor."""
    body = {"preconditions": {"uid": uid}}
    try:
        client.core().delete_namespaced_service(name, namespace, body=body)  # type: ignore[arg-type]
    except client.ApiException as exc:
        if not (client.is_not_found(exc) or client.is_conflict(exc)):
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
