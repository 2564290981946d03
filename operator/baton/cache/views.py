"""The watch-fed views Baton reads, and the informers that fill them. Does I/O (watches, and the
one authoritative read of a runtime, reread_runtime).

Selected on the server wherever the object carries Baton's label: pods, Leases, Services and
EndpointSlices (the EndpointSlice controller copies a Service's labels onto its slices) by
`baton.dev/runtime`; ToolRuntimes and ToolRuntimeClaims all (in the watched namespaces), claims
indexed by the runtime they name (spec.runtimeRef.name). ConfigMaps and Secrets carry
the user's labels, not ours: watched only where the chart grants it, and stored as a digest of
their data (never the data itself: Secrets stay out of the heap).
"""

from __future__ import annotations

import asyncio
from typing import Any

from baton.cache import informer as informer_mod
from baton.cache import store as store_mod
from baton.k8s import api as k8s_api
from baton.k8s import configrefs, runtimes
from baton.model import names

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

# The API rules the informers need (apiGroup, resource, verbs); ConfigMaps and Secrets only where
# the chart grants them (BATON_WATCH_CONFIGMAPS / BATON_WATCH_SECRETS).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (names.GROUP, names.PLURAL, ("list", "watch")),
    (names.GROUP, names.CLAIM_PLURAL, ("list", "watch")),
    ("", "pods", ("list", "watch")),
    ("coordination.k8s.io", "leases", ("list", "watch")),
    ("", "services", ("list", "watch")),
    ("discovery.k8s.io", "endpointslices", ("list", "watch")),
    ("", "configmaps", ("list", "watch")),
    ("", "secrets", ("list", "watch")),
)


def claim_runtime(obj: dict[str, Any]) -> str | None:
    """The runtime a ToolRuntimeClaim names (spec.runtimeRef.name): the claims view's index."""
    ref = (obj.get("spec") or {}).get("runtimeRef") or {}
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) and name else None


def _digest_only(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
            "digest": configrefs.data_digest(obj)}


class Views:
    def __init__(self, *, namespaces: tuple[str, ...], watch_configmaps: bool, watch_secrets: bool) -> None:
        self.namespaces = namespaces
        self.runtimes = store_mod.Store(index_label=None)
        # ToolRuntimeClaims carry the user's labels, not ours: all of them, indexed by runtimeRef.
        self.claims = store_mod.Store(index_label=None, index_by=claim_runtime)
        self.pods = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.leases = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.services = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.slices = store_mod.Store(index_label=SERVICE_NAME_LABEL, selected_by=names.LABEL_RUNTIME)
        self.configmaps = store_mod.Store(index_label=None, transform=_digest_only) if watch_configmaps else None
        self.secrets = store_mod.Store(index_label=None, transform=_digest_only) if watch_secrets else None
        self.informers: list[informer_mod.Informer] = []
        self._tasks: list[asyncio.Task[None]] = []

    def _kinds(self) -> list[tuple[str, str, str, store_mod.Store, str | None]]:
        kinds: list[tuple[str, str, str, store_mod.Store, str | None]] = [
            (names.KIND, names.API_VERSION, names.PLURAL, self.runtimes, None),
            (names.CLAIM_KIND, names.API_VERSION, names.CLAIM_PLURAL, self.claims, None),
            ("Pod", "v1", "pods", self.pods, names.LABEL_RUNTIME),
            ("Lease", "coordination.k8s.io/v1", "leases", self.leases, names.LABEL_RUNTIME),
            ("Service", "v1", "services", self.services, names.LABEL_RUNTIME),
            ("EndpointSlice", "discovery.k8s.io/v1", "endpointslices", self.slices, names.LABEL_RUNTIME),
        ]
        if self.configmaps is not None:
            kinds.append(("ConfigMap", "v1", "configmaps", self.configmaps, None))
        if self.secrets is not None:
            kinds.append(("Secret", "v1", "secrets", self.secrets, None))
        return kinds

    def informer_count(self) -> int:
        """How many informers `start` runs: one per kind and watched namespace (or one per kind)."""
        return len(self._kinds()) * max(1, len(self.namespaces))

    def start(self, api: k8s_api.Api) -> None:
        scopes: tuple[str | None, ...] = self.namespaces or (None,)
        for kind, gv, plural, store, selector in self._kinds():
            for ns in scopes:
                informer = informer_mod.Informer(api, kind=kind, group_version=gv, plural=plural, namespace=ns,
                                        store=store, label_selector=selector)
                self.informers.append(informer)
                self._tasks.append(asyncio.create_task(informer.run(), name=f"watch {kind} {ns or '*'}"))

    async def wait_synced(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in self.informers)), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def apply(self, obj: dict[str, Any] | None, kind: str = "") -> None:
        """Apply what a write returned to the views (read-your-writes)."""
        if not isinstance(obj, dict) or "metadata" not in obj:
            return
        store = {"Pod": self.pods, "Lease": self.leases, "Service": self.services,
                 "ToolRuntime": self.runtimes, "ToolRuntimeClaim": self.claims}.get(kind or str(obj.get("kind") or ""))
        if store is not None:
            store.apply(obj)

    async def reread_runtime(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The runtime as stored now (an authoritative read), applied to the view; None if gone."""
        stored = await runtimes.read_runtime(*key)
        self.apply(stored, "ToolRuntime")
        return stored

    def known(self, store: store_mod.Store, namespace: str) -> bool:
        """Whether `store`'s view of `namespace` is filled: listed by every informer that feeds it,
        none of them forbidden. Until then an empty view says nothing."""
        informers = [i for i in self.informers if i.store is store and i.namespace in (None, namespace)]
        return bool(informers) and all(i.synced.is_set() and i.forbidden is None for i in informers)

    def claims_known(self, namespace: str) -> bool:
        """Whether the claims view of `namespace` is filled (listed, not forbidden): until it is,
        a retire cannot tell whether a claim pins its generation."""
        return self.known(self.claims, namespace)

    def config_lookup(self, kind: str, namespace: str, name: str) -> str | None:
        """A referenced object's digest from the view, ABSENT, or None (no view: read it)."""
        store = self.configmaps if kind == "ConfigMap" else self.secrets
        if store is None:
            return None
        if not self.known(store, namespace):
            return None
        obj = store.get(namespace, name)
        return configrefs.ABSENT if obj is None else str(obj["digest"])
