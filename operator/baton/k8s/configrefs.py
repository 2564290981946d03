"""Read the ConfigMaps and Secrets a pod template references, reduced to one digest.

Only digests leave this module: Secret data is never logged, evented or written to status.
"""

from __future__ import annotations

import hashlib
import json

from baton.k8s import client


def read_config_digest(
    namespace: str, refs: list[tuple[str, str, bool]]
) -> tuple[str, list[str], list[str]]:
    """(digest over the data of every referenced object, required ones missing, ones not readable)."""
    if not refs:
        return "", [], []
    parts: list[str] = []
    missing: list[str] = []
    unreadable: list[str] = []
    for kind, name, optional in refs:
        try:
            if kind == "ConfigMap":
                resp: object = client.core().read_namespaced_config_map(name, namespace, _preload_content=False)
            else:
                resp = client.core().read_namespaced_secret(name, namespace, _preload_content=False)
        except client.ApiException as exc:
            if client.is_not_found(exc):
                parts.append(f"{kind}/{name}:absent")
                if not optional:
                    missing.append(f"{kind}/{name}")
                continue
            if client.status_of(exc) == 403:
                # Not readable by Baton's ServiceAccount (the chart's rbac values): the runtime
                # still runs; Degraded says that this object's changes start no handoff.
                parts.append(f"{kind}/{name}:unreadable")
                unreadable.append(f"{kind}/{name}")
                continue
            raise
        obj = client.json_of(resp)
        content = json.dumps({"data": obj.get("data") or {}, "binaryData": obj.get("binaryData") or {}}, sort_keys=True)
        parts.append(f"{kind}/{name}:" + hashlib.sha256(content.encode()).hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16], missing, unreadable
