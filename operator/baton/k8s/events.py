"""Kubernetes Events about a ToolRuntime (kubectl describe shows them)."""

from __future__ import annotations

import datetime
import uuid

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "events", ("create",)),)


async def emit_event(
    *, namespace: str, runtime: str, runtime_uid: str, type_: str, reason: str, message: str, identity: str
) -> None:
    now = client.micro_time(datetime.datetime.now(datetime.timezone.utc))
    stamp = now[:19] + "Z"
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{runtime}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": names.API_VERSION, "kind": names.KIND,
            "name": runtime, "namespace": namespace, "uid": runtime_uid,
        },
        "type": type_,
        "reason": reason,
        "message": message[:1000],
        "source": {"component": "baton"},
        "reportingComponent": names.REPORTING_COMPONENT,
        "reportingInstance": identity[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    await client.work().request("POST", api.path("v1", "events", namespace), body=body)
