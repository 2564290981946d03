"""The ConfigMaps and Secrets a pod template references, reduced to one digest.

Only digests leave this module: Secret data is never logged, evented, cached or written to status.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from baton.k8s import api, client

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "configmaps", ("get",)), ("", "secrets", ("get",)))

ABSENT = "absent"
UNREADABLE = "unreadable"
# (kind, namespace, name) -> a digest, ABSENT, or None when the caller has no cached view of it.
Lookup = Callable[[str, str, str], str | None]


def data_digest(obj: dict[str, Any]) -> str:
    content = json.dumps({"data": obj.get("data") or {}, "binaryData": obj.get("binaryData") or {}}, sort_keys=True)
    return hashlib.sha256(content.encode()).hexdigest()


async def _read(kind: str, namespace: str, name: str) -> str:
    plural = "configmaps" if kind == "ConfigMap" else "secrets"
    try:
        obj = await client.work().get_or_none(api.path("v1", plural, namespace, name))
    except api.ApiError as exc:
        if exc.status == 403:
            # Not readable by Baton's ServiceAccount (the chart's rbac values): the runtime
            # still runs; Degraded says that this object's changes start no handoff.
            return UNREADABLE
        raise
    return ABSENT if obj is None else data_digest(obj)


async def read_config_digest(
    namespace: str, refs: list[tuple[str, str, bool]], lookup: Lookup | None = None
) -> tuple[str, list[str], list[str], list[tuple[str, str]]]:
    """(digest over the data of every referenced object, required ones missing, ones not readable,
    each object's own digest as ("Kind/name", digest)). Objects the caller's watch-fed view holds
    are not read again."""
    if not refs:
        return "", [], [], []
    parts: list[str] = []
    missing: list[str] = []
    unreadable: list[str] = []
    for kind, name, optional in refs:
        found = lookup(kind, namespace, name) if lookup is not None else None
        if found is None:
            found = await _read(kind, namespace, name)
        parts.append(f"{kind}/{name}:{found}")
        if found == ABSENT and not optional:
            missing.append(f"{kind}/{name}")
        elif found == UNREADABLE:
            unreadable.append(f"{kind}/{name}")
    each = [(f"{kind}/{name}", hashlib.sha256(part.encode()).hexdigest()[:16])
            for (kind, name, _), part in zip(refs, parts)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16], missing, unreadable, each
