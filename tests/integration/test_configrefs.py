"""ConfigMaps and Secrets are read only where a template references them (issue 23).

The operator (a real process, through the API proxy whose request log shows what it asked for)
lists and watches these kinds metadata only: the API server never sends it their data. It reads
a referenced object by name, once per resourceVersion; an unreferenced one is never read, and its
changes wake nothing. A change of a referenced object's data still hands off at once."""
from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any, Callable

from kubernetes import client

from dev.wait import stays, wait_for
from harness import apiproxy, operator, runtimes

Start = Callable[..., operator.OperatorProcess]


def _referencing(name: str, configmap: str) -> dict[str, Any]:
    m = runtimes.runtime_manifest(name)
    m["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "CONF", "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "k"}}}]
    return m


def test_configmaps_and_secrets_are_read_only_where_referenced(
        cluster: Any, operators: Start, rts: runtimes.Runtimes, namespace: str, tmp_path: Path) -> None:
    core = client.CoreV1Api(cluster.api_client)
    # 300 KB of base64 noise: gzip on the wire cannot shrink it below what the checks allow.
    blob = base64.b64encode(os.urandom(225_000)).decode()
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "bystander"}, "data": {"k": blob}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "bystander-secret"},
                                              "data": {"k": base64.b64encode(blob.encode()).decode()}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "conf"}, "data": {"k": "v1"}})
    ns_path = f"/api/v1/namespaces/{namespace}"

    def gets(plural: str, name: str) -> list[apiproxy.LogEntry]:
        return proxy.requests(apiproxy.matching("GET", f"{ns_path}/{plural}/{re.escape(name)}"))

    def lists_and_watches(plural: str) -> list[apiproxy.LogEntry]:
        return proxy.requests(apiproxy.matching("GET", f"{ns_path}/{plural}"))

    with apiproxy.ApiProxy(cluster.kubeconfig, tmp_path) as proxy:
        op = operators("op-cfg", kubeconfig=proxy.kubeconfig)
        rts.create(_referencing("user", "conf"))
        rts.wait_ready("user", 1, timeout=60)
        assert op.metric("baton_cache_objects", kind="ConfigMap") >= 2  # bystander and conf, listed

        # An unreferenced ConfigMap changes: the event reaches the operator (its watch stream
        # grows), and wakes nothing: no GET of it, no handoff.
        [cm_watch] = [e for e in lists_and_watches("configmaps") if e.info.is_watch]
        before = cm_watch.bytes_out
        core.patch_namespaced_config_map("bystander", namespace, {"data": {"k": blob[::-1]}})
        wait_for(lambda: [e for e in lists_and_watches("configmaps") if e.id == cm_watch.id][0].bytes_out > before,
                 timeout=30, what="the bystander's change on the operator's ConfigMap watch")
        stays(lambda: rts.status("user")["current"]["generation"] == 1 and not gets("configmaps", "bystander"),
              duration=5, what="no read and no handoff for an unreferenced ConfigMap")

        # The referenced ConfigMap's data changes: a handoff, as before.
        core.patch_namespaced_config_map("conf", namespace, {"data": {"k": "v2"}})
        rts.wait_ready("user", 2, timeout=60)

        # What went over the wire: the lists and watches asked for metadata only, and carried
        # less than one copy of the bystanders' data; only the referenced object was read.
        for plural in ("configmaps", "secrets"):
            entries = lists_and_watches(plural)
            assert entries and all(e.status == 200 for e in entries), entries
            assert all("as=PartialObjectMetadata" in e.accept for e in entries), [e.accept for e in entries]
            sent = sum(e.bytes_out for e in entries)
            assert sent < 100_000, f"{plural}: {sent} bytes listed and watched (a bystander holds 300 KB)"
        assert not gets("configmaps", "bystander") and not gets("secrets", "bystander-secret")
        conf_reads = gets("configmaps", "conf")
        # Once per version it had (v1, v2), plus at most one read racing a change.
        assert 1 <= len(conf_reads) <= 3, [(e.started, e.status) for e in conf_reads]
        assert rts.status("user")["current"]["generation"] == 2
