"""bench/watched.py, the benches' watch-fed view of a collection, against the real API server:
objects created before it starts are listed, later changes and deletions arrive by the watch,
and stop() ends its thread."""
from __future__ import annotations

from typing import Any

from kubernetes import client, config

from bench import watched
from dev.wait import wait_for


def test_a_watched_collection_follows_creates_changes_and_deletions(cluster: Any, namespace: str) -> None:
    api = config.new_client_from_config(cluster.kubeconfig)
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}, "data": {"v": "1"}})
    view = watched.Watched(api, f"/api/v1/namespaces/{namespace}/configmaps",
                           lambda obj: (obj.get("data") or {}).get("v")).start()
    try:
        assert view.count(lambda name, v: name == "before" and v == "1") == 1  # from the list
        for i in range(3):
            core.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{i}"}, "data": {"v": "1"}})
        core.patch_namespaced_config_map("cm-0", namespace, {"data": {"v": "2"}})
        core.delete_namespaced_config_map("before", namespace)
        wait_for(lambda: view.count(lambda name, v: name.startswith("cm-")) == 3
                 and view.count(lambda name, v: v == "2") == 1
                 and view.count(lambda name, v: name == "before") == 0,
                 timeout=30, what="the watch's view caught up")
        assert view.events >= 5  # three ADDED, one MODIFIED, one DELETED at least
        assert view.summaries({"cm-0", "cm-1", "before"}) == {"cm-0": "2", "cm-1": "1"}  # the deleted one left out
    finally:
        view.stop()
    assert not view._thread.is_alive()
