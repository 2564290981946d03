"""The watch-fed views Baton reads, and the informers that fill them. Does I/O (watches, and the
one authoritative read of a runtime, reread_runtime).

Selected on the server wherever the object carries Baton's label: pods, Leases, Services and
EndpointSlices (the EndpointSlice controller copies a Service's labels onto its slices) by
`baton.dev/runtime`; ToolRuntimes and ToolRuntimeClaims all (in the watched namespaces), claims
indexed by the runtime they name (spec.runtimeRef.name). The gateway's pods: those labelled
baton.dev/component=gateway in the system namespace, one informer (the runtimes routed through
the gateway list them in their EndpointSlice). ConfigMaps and Secrets carry
the user's labels, not ours: watched only where the chart grants it, and metadata only
(PartialObjectMetadata: the API server never sends their data, and the store keeps name, UID
and resourceVersion). Their data is read by name only where a template references it
(baton.k8s.configrefs), its digest cached by resourceVersion (`config_digests`) and forgotten
when the object goes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from baton.cache import informer as informer_mod
from baton.cache import store as store_mod
from baton.k8s import api as k8s_api
from baton.k8s import configrefs, runtimes
from baton.model import names

SERVICE_NAME_LABEL = names.LABEL_SERVICE_NAME

# The API rules the informers need (apiGroup, resource, verbs); ConfigMaps and Secrets only where
# the chart grants them (BATON_WATCH_CONFIGMAPS / BATON_WATCH_SECRETS). RBAC has no verb for a
# metadata-only list: `list` is what the API server checks for one.
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


def _names_only(obj: dict[str, Any]) -> dict[str, Any]:
    """What the ConfigMap and Secret views keep: which objects exist, at which version."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}}


class Views:
    def __init__(self, *, namespaces: tuple[str, ...], watch_configmaps: bool, watch_secrets: bool,
                 system_namespace: str = "default") -> None:
        self.namespaces = namespaces
        self.system_namespace = system_namespace
        self.runtimes = store_mod.Store(index_label=None)
        # ToolRuntimeClaims carry the user's labels, not ours: all of them, indexed by runtimeRef.
        self.claims = store_mod.Store(index_label=None, index_by=claim_runtime)
        self.pods = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.leases = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.services = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.slices = store_mod.Store(index_label=SERVICE_NAME_LABEL, selected_by=names.LABEL_RUNTIME)
        self.gateway_pods = store_mod.Store(index_label=None, selected_by=names.LABEL_COMPONENT)
        self.configmaps = store_mod.Store(index_label=None, transform=_names_only) if watch_configmaps else None
        self.secrets = store_mod.Store(index_label=None, transform=_names_only) if watch_secrets else None
        # The data digests of referenced objects, by the version read (baton.k8s.configrefs).
        self.config_digests = configrefs.DigestCache()
        for kind, config_store in (("ConfigMap", self.configmaps), ("Secret", self.secrets)):
            if config_store is not None:
                config_store.listeners.append(self._forget_gone(kind))
        self.informers: list[informer_mod.Informer] = []
        self._tasks: list[asyncio.Task[None]] = []

    def _forget_gone(self, kind: str) -> store_mod.Listener:
        def listener(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            if new is None and old is not None:
                ns, name = store_mod.key_of(old)
                self.config_digests.forget((kind, ns, name))
        return listener

    def forget_config(self, namespace: str, kind: str, name: str) -> None:
        """No runtime references that object any more: its digest need not be kept."""
        self.config_digests.forget((kind, namespace, name))

    def _kinds(self) -> list[tuple[str, str, str, store_mod.Store, str | None, bool]]:
        """(kind, apiVersion, plural, store, label selector, metadata only) of each informer."""
        kinds: list[tuple[str, str, str, store_mod.Store, str | None, bool]] = [
            (names.KIND, names.API_VERSION, names.PLURAL, self.runtimes, None, False),
            (names.CLAIM_KIND, names.API_VERSION, names.CLAIM_PLURAL, self.claims, None, False),
            ("Pod", "v1", "pods", self.pods, names.LABEL_RUNTIME, False),
            ("Lease", "coordination.k8s.io/v1", "leases", self.leases, names.LABEL_RUNTIME, False),
            ("Service", "v1", "services", self.services, names.LABEL_RUNTIME, False),
            ("EndpointSlice", "discovery.k8s.io/v1", "endpointslices", self.slices, names.LABEL_RUNTIME, False),
        ]
        if self.configmaps is not None:
            kinds.append(("ConfigMap", "v1", "configmaps", self.configmaps, None, True))
        if self.secrets is not None:
            kinds.append(("Secret", "v1", "secrets", self.secrets, None, True))
        return kinds

    def informer_count(self) -> int:
        """How many informers `start` runs: one per kind and watched namespace (or one per kind)."""
        return len(self._kinds()) * max(1, len(self.namespaces)) + 1

    def start(self, api: k8s_api.Api) -> None:
        scopes: tuple[str | None, ...] = self.namespaces or (None,)
        for kind, gv, plural, store, selector, metadata_only in self._kinds():
            for ns in scopes:
                informer = informer_mod.Informer(api, kind=kind, group_version=gv, plural=plural, namespace=ns,
                                                 store=store, label_selector=selector, metadata_only=metadata_only)
                self.informers.append(informer)
                self._tasks.append(asyncio.create_task(informer.run(), name=f"watch {kind} {ns or '*'}"))
        # The gateway's pods: one namespace, whatever the watched ones are (baton.k8s.gateways.RBAC).
        gw = informer_mod.Informer(api, kind="Pod", group_version="v1", plural="pods", namespace=self.system_namespace,
                                   store=self.gateway_pods,
                                   label_selector=f"{names.LABEL_COMPONENT}={names.COMPONENT_GATEWAY}")
        self.informers.append(gw)
        self._tasks.append(asyncio.create_task(gw.run(), name=f"watch gateway pods {self.system_namespace}"))

    async def wait_synced(self, timeout: float) -> bool:
        return await informer_mod.wait_synced(self.informers, timeout)

    async def stop(self) -> None:
        await informer_mod.stop(self._tasks)

    def apply(self, obj: dict[str, Any] | None, kind: str = "") -> None:
        """Apply what a write returned to the views (read-your-writes)."""
        if not isinstance(obj, dict) or "metadata" not in obj:
            return
        store = {"Pod": self.pods, "Lease": self.leases, "Service": self.services, "EndpointSlice": self.slices,
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
        """A referenced object's resourceVersion from the view, ABSENT, or None (no view: read it)."""
        store = self.configmaps if kind == "ConfigMap" else self.secrets
        if store is None:
            return None
        if not self.known(store, namespace):
            return None
        obj = store.get(namespace, name)
        if obj is None:
            return configrefs.ABSENT
        return str((obj.get("metadata") or {}).get("resourceVersion") or "") or None
