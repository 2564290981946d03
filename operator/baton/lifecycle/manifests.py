"""Pure builders of the objects Baton owns: generation pods and the runtime's Service."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from baton.model import names, spec as spec_model


def template_hash(template: dict[str, Any], config_digest: str = "") -> str:
    """Hash of the pod template plus the digest of the config data it references."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((canonical + "\n" + config_digest).encode()).hexdigest()[:16]


def owner_reference(*, name: str, uid: str, block_owner_deletion: bool = True) -> dict[str, Any]:
    """The controller reference to ToolRuntime `name`. Pods and the Service block the owner's
    deletion; the Lease's reference (baton.k8s.leases) has always been sent with False."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


def build_pod(
    *,
    namespace: str,
    runtime: str,
    runtime_uid: str,
    template: dict[str, Any],
    generation: int,
    fencing_token: int,
    template_hash: str,
) -> dict[str, Any]:
    """Generation N's pod. Created not serving: it joins the Service only once Ready."""
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(
        {names.LABEL_RUNTIME: runtime, names.LABEL_GENERATION: str(generation), names.LABEL_SERVING: "false"}
    )
    annotations = dict(meta.get("annotations") or {})
    annotations.update(
        {
            names.ANN_GENERATION: str(generation),
            names.ANN_FENCING_TOKEN: str(fencing_token),
            names.ANN_TEMPLATE_HASH: template_hash,
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(runtime),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(name=runtime, uid=runtime_uid)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def service_selector(runtime: str) -> dict[str, str]:
    return {names.LABEL_RUNTIME: runtime, names.LABEL_SERVING: "true"}


def build_service(
    *, namespace: str, runtime: str, runtime_uid: str, service: spec_model.ServiceSpec
) -> dict[str, Any]:
    ports = []
    for p in service.ports:
        port: dict[str, Any] = {"port": p.port, "protocol": p.protocol}
        if p.name:
            port["name"] = p.name
        port["targetPort"] = p.target_port if p.target_port is not None else p.port
        ports.append(port)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": runtime,
            "namespace": namespace,
            "labels": {names.LABEL_RUNTIME: runtime},
            "ownerReferences": [owner_reference(name=runtime, uid=runtime_uid)],
        },
        "spec": {
            "selector": service_selector(runtime),
            "ports": ports,
            "sessionAffinity": service.session_affinity,
        },
    }


def config_refs(template: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(kind, name, optional) of every ConfigMap and Secret the pod template references."""
    spec = template.get("spec") or {}
    refs: set[tuple[str, str, bool]] = set()

    def add(kind: str, ref: dict[str, Any] | None, name_key: str = "name") -> None:
        if ref and ref.get(name_key):
            refs.add((kind, str(ref[name_key]), bool(ref.get("optional", False))))

    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            for env in c.get("env") or []:
                source = env.get("valueFrom") or {}
                add("ConfigMap", source.get("configMapKeyRef"))
                add("Secret", source.get("secretKeyRef"))
            for env_from in c.get("envFrom") or []:
                add("ConfigMap", env_from.get("configMapRef"))
                add("Secret", env_from.get("secretRef"))
    for vol in spec.get("volumes") or []:
        add("ConfigMap", vol.get("configMap"))
        add("Secret", vol.get("secret"), "secretName")
        for source in (vol.get("projected") or {}).get("sources") or []:
            add("ConfigMap", source.get("configMap"))
            add("Secret", source.get("secret"))
    # One entry per object; a reference that is required anywhere is required.
    merged: dict[tuple[str, str], bool] = {}
    for kind, name, optional in refs:
        merged[(kind, name)] = merged.get((kind, name), True) and optional
    return sorted((k, n, o) for (k, n), o in merged.items())
