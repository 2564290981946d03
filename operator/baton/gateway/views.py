"""The gateway's watch-fed views: ToolRuntimes (all, in the watched namespaces) and pods
selected on the server by baton.dev/runtime, exactly as the operator lists them
(``baton.cache.informer``). Does I/O (the informers). Every change wakes the calls held for
the runtime it concerns; `relist` lists everything again (after a lapse of the registration).

A third view, of every pod in the watched namespaces, keeps only each pod's address(es) and
namespace (``clients.client_addresses``): who a caller is, from its source address (tenant
isolation, docs/gateway.md "Who may call").
"""

from __future__ import annotations

import asyncio
from typing import Any

from baton.gateway import clients, route

from baton.cache import informer as informer_mod
from baton.cache import store as store_mod
from baton.gateway import state as state_mod
from baton.k8s import api as k8s_api
from baton.model import names

# The API rules the views need (apiGroup, resource, verbs): the chart's gateway ClusterRole/Roles
# grant exactly these (tests/integration/test_chart_render.py checks it).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (names.GROUP, names.PLURAL, ("list", "watch")),
    ("", "pods", ("list", "watch")),  # generation pods, and every pod's IP (who a caller is)
)


def pod_address(pod: dict[str, Any]) -> dict[str, Any]:
    """What the address view keeps of a pod (its store's transform): its name, namespace, UID
    and version, and the addresses that identify it as a caller; nothing else of it."""
    meta = pod.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
            "addresses": list(clients.client_addresses(pod))}


class GatewayViews:
    def __init__(self, *, namespaces: tuple[str, ...], state: state_mod.State) -> None:
        self.namespaces = namespaces
        self.state = state
        self.runtimes = store_mod.Store(index_label=None)
        self.pods = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.runtimes.listeners.append(self._runtime_changed)
        self.pods.listeners.append(self._pod_changed)
        # Every pod (no selector), reduced to its addresses; `_by_ip` indexes them.
        self.addresses = store_mod.Store(index_label=None, transform=pod_address)
        self.addresses.listeners.append(self._address_changed)
        self._by_ip: dict[str, dict[store_mod.Key, str]] = {}
        self.addresses_listed = asyncio.Event()  # set once every address informer has listed
        self._address_informers: list[informer_mod.Informer] = []
        self.informers: list[informer_mod.Informer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._api: k8s_api.Api | None = None

    def informer_count(self) -> int:
        return 3 * max(1, len(self.namespaces))

    def _runtime_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new or old or {}
        self.state.wake(store_mod.key_of(obj))

    def _pod_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for obj in (old, new):
            meta = (obj or {}).get("metadata") or {}
            runtime = (meta.get("labels") or {}).get(names.LABEL_RUNTIME)
            if runtime:
                self.state.wake((str(meta.get("namespace") or ""), runtime))

    def _address_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            key = store_mod.key_of(obj)
            for ip in obj.get("addresses") or ():
                holders = self._by_ip.setdefault(ip, {})
                if add:
                    holders[key] = key[0]
                else:
                    holders.pop(key, None)
                    if not holders:
                        del self._by_ip[ip]

    def namespace_of(self, ip: str) -> str | None:
        """The namespace of the pod at `ip`; None when no pod is known there, or pods of several
        namespaces claim it (an IP reused before the old pod's deletion was seen: no guess)."""
        holders = self._by_ip.get(ip)
        if not holders:
            return None
        namespaces = set(holders.values())
        return namespaces.pop() if len(namespaces) == 1 else None

    async def wait_addresses_listed(self, timeout: float) -> bool:
        """Whether the address view has been listed once (within `timeout`). A relist keeps the
        view it replaces meanwhile, so this waits only at startup."""
        if self.addresses_listed.is_set():
            return True
        if not self._address_informers:
            return False  # not started
        if await informer_mod.wait_synced(self._address_informers, timeout):
            self.addresses_listed.set()
        return self.addresses_listed.is_set()

    def start(self, api: k8s_api.Api) -> None:
        self._api = api
        scopes: tuple[str | None, ...] = self.namespaces or (None,)
        kinds = ((names.KIND, names.API_VERSION, names.PLURAL, self.runtimes, None),
                 ("Pod", "v1", "pods", self.pods, names.LABEL_RUNTIME),
                 ("PodAddress", "v1", "pods", self.addresses, None))  # a metric label: Pod is the other view
        self.informers = []
        self._address_informers = []
        for kind, gv, plural, store, selector in kinds:
            for ns in scopes:
                inf = informer_mod.Informer(api, kind=kind, group_version=gv, plural=plural, namespace=ns,
                                            store=store, label_selector=selector)
                self.informers.append(inf)
                if store is self.addresses:
                    self._address_informers.append(inf)
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
