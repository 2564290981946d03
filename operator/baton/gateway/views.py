"""The gateway's watch-fed views: ToolRuntimes (all, in the watched namespaces) and pods
selected on the server by baton.dev/runtime, exactly as the operator lists them
(``baton.cache.informer``). Does I/O (the informers). Every change wakes the calls held for
the runtime it concerns; `relist` lists everything again (after a lapse of the registration).
"""

from __future__ import annotations

import asyncio
from typing import Any

from baton.cache import informer as informer_mod
from baton.cache import store as store_mod
from baton.gateway import state as state_mod
from baton.k8s import api as k8s_api
from baton.model import names

# The API rules the views need (apiGroup, resource, verbs): the chart's gateway ClusterRole/Roles
# grant exactly these (tests/integration/test_chart_render.py checks it).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (names.GROUP, names.PLURAL, ("list", "watch")),
    ("", "pods", ("list", "watch")),
)


class GatewayViews:
    def __init__(self, *, namespaces: tuple[str, ...], state: state_mod.State) -> None:
        self.namespaces = namespaces
        self.state = state
        self.runtimes = store_mod.Store(index_label=None)
        self.pods = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.runtimes.listeners.append(self._runtime_changed)
        self.pods.listeners.append(self._pod_changed)
        self.informers: list[informer_mod.Informer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._api: k8s_api.Api | None = None

    def informer_count(self) -> int:
        return 2 * max(1, len(self.namespaces))

    def _runtime_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new or old or {}
        self.state.wake(store_mod.key_of(obj))

    def _pod_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for obj in (old, new):
            meta = (obj or {}).get("metadata") or {}
            runtime = (meta.get("labels") or {}).get(names.LABEL_RUNTIME)
            if runtime:
                self.state.wake((str(meta.get("namespace") or ""), runtime))

    def start(self, api: k8s_api.Api) -> None:
        self._api = api
        scopes: tuple[str | None, ...] = self.namespaces or (None,)
        kinds = ((names.KIND, names.API_VERSION, names.PLURAL, self.runtimes, None),
                 ("Pod", "v1", "pods", self.pods, names.LABEL_RUNTIME))
        self.informers = []
        for kind, gv, plural, store, selector in kinds:
            for ns in scopes:
                inf = informer_mod.Informer(api, kind=kind, group_version=gv, plural=plural, namespace=ns,
                                            store=store, label_selector=selector)
                self.informers.append(inf)
                self._tasks.append(asyncio.create_task(inf.run(), name=f"gateway watch {kind} {ns or '*'}"))

    def synced(self) -> bool:
        return bool(self.informers) and all(i.synced.is_set() and i.forbidden is None for i in self.informers)

    async def wait_synced(self, timeout: float) -> bool:
        return await informer_mod.wait_synced(self.informers, timeout) and self.synced()

    async def stop(self) -> None:
        await informer_mod.stop(self._tasks)

    async def relist(self) -> None:
        """List everything again from scratch (new informers on the same stores: a list replaces
        what a store holds); `synced` is False until every new list is in."""
        await self.stop()
        assert self._api is not None
        self.start(self._api)

    def runtime(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.runtimes.get(namespace, name)

    def pods_of(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.pods.by_label(namespace, name)

    def pod_present(self, uid: str) -> bool:
        return any((p.get("metadata") or {}).get("uid") == uid for p in self.pods.items())
