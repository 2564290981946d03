"""Objects as large as an API server stores do not freeze any view (issue 23).

A watch event is one line of JSON; aiohttp's line reader refuses lines over about 512 KiB, and
the informer used to resume from the same resourceVersion and replay that line forever: one
700 KB ConfigMap, ToolRuntime or pod froze its view for every runtime the operator watched."""
from __future__ import annotations

from typing import Any, Callable

from kubernetes import client

from harness import operator, runtimes

Start = Callable[..., operator.OperatorProcess]


def _referencing(name: str, configmap: str) -> dict[str, Any]:
    m = runtimes.runtime_manifest(name)
    m["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "CONF", "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "k"}}}]
    return m


def test_a_700kb_configmap_and_a_600kb_runtime_freeze_no_view(
        cluster: Any, operators: Start, namespace: str, make_namespace: Callable[[], str]) -> None:
    big_ns, small_ns = make_namespace(), namespace
    core = client.CoreV1Api(cluster.api_client)
    big_rts, small_rts = runtimes.Runtimes(cluster.api_client, big_ns), runtimes.Runtimes(cluster.api_client, small_ns)
    operators("op-a", namespaces=[big_ns, small_ns])
    # In one namespace: a 700 KB ConfigMap a runtime references, and a 600 KB runtime (its pod
    # carries the same 600 KB, so the pods view gets a line that size too).
    core.create_namespaced_config_map(big_ns, {"metadata": {"name": "dashboards"}, "data": {"k": "d" * 700_000}})
    big_rts.create(_referencing("big-ref", "dashboards"))
    huge = runtimes.runtime_manifest("huge")
    huge["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "BLOB", "value": "b" * 600_000}]
    big_rts.create(huge)
    core.create_namespaced_config_map(small_ns, {"metadata": {"name": "conf"}, "data": {"k": "v1"}})
    small_rts.create(_referencing("small", "conf"))

    for rts, name in ((big_rts, "big-ref"), (big_rts, "huge"), (small_rts, "small")):
        rts.wait_ready(name, 1, timeout=60)
    # Each hands off on a change seen through the view holding the large line.
    core.patch_namespaced_config_map("dashboards", big_ns, {"data": {"k": "e" * 700_000}})
    big_rts.wait_ready("big-ref", 2, timeout=60)
    big_rts.set_image("huge", "example/tool:2")
    big_rts.wait_ready("huge", 2, timeout=60)
    core.patch_namespaced_config_map("conf", small_ns, {"data": {"k": "v2"}})
    small_rts.wait_ready("small", 2, timeout=60)
