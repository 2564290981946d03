"""The watch-fed views Baton reads, and the informers that fill them. Does I/O (watches, and the
one authoritative read of a runtime, reread_runtime).

Selected on the server wherever the object carries Baton's label: pods, Leases, Services and
EndpointSlices (the EndpointSlice controller copies a Service's labels onto its slices) by
`baton.dev/runtime`; ToolRuntimes and ToolRuntimeClaims all (in the watched namespaces), claims
indexed by the runtime they name (spec.runtimeRef.name). The gateway's pods: those labelled
baton.dev/component=gateway in the system namespace, one informer (the runtimes routed through
the gateway list them in their EndpointSlice), and the gateway replicas' registration Leases there
(their ANN_WAKE_DEMAND: an idle runtime's wake starts as soon as a replica holds a call for it,
baton.controller). ConfigMaps and Secrets carry
the user's labels, not ours: watched only where the chart grants it, and metadata only
(PartialObjectMetadata: the API server never sends their data, and the store keeps name, UID
and resourceVersion). Their data is read by name only where a template references it
(baton.k8s.configrefs), its digest cached by resourceVersion (`config_digests`) and forgotten
when the object goes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Callable

from baton import metrics

from baton.cache import informer as informer_mod
from baton.cache import store as store_mod
from baton.k8s import api as k8s_api
from baton.k8s import configrefs, runtimes
from baton.model import names
from baton.model import observed as observed_mod
from baton.sharding import ranges as ranges_mod

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
# Only with BATON_ISOLATE_TOOL_PODS (the chart grants it with gateway.isolateToolPods).
POLICY_RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("networking.k8s.io", "networkpolicies", ("list", "watch")),
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


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def unlabelled(obj: dict[str, Any]) -> bool:
    """Made by a version before the hash-bucket label (the owner adds it: baton.controller)."""
    return names.LABEL_HASH_BUCKET not in _labels(obj)


def _in_buckets(buckets: frozenset[str]) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: _labels(obj).get(names.LABEL_HASH_BUCKET) in buckets


def _in_range(index: int, ranges: int) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: ranges_mod.range_of(str((obj.get("metadata") or {}).get("uid") or ""), ranges=ranges) == index


@dataclasses.dataclass
class _RangeWatch:
    """The informers of one held range (and their tasks)."""

    informers: list[informer_mod.Informer]
    tasks: list[asyncio.Task[None]]


class Views:
    def __init__(self, *, namespaces: tuple[str, ...], watch_configmaps: bool, watch_secrets: bool,
                 system_namespace: str = "default", shard_ranges: int = 0,
                 tool_pod_isolation: observed_mod.ToolPodIsolation | None = None) -> None:
        self.namespaces = namespaces
        self.system_namespace = system_namespace
        # Sharded (BATON_SHARD_RANGES): pods, Leases, Services and EndpointSlices are watched per
        # held range (by the hash-bucket label), plus those without the label (made before it) on
        # every replica; ToolRuntimes per range through the API server's shardSelector where it
        # is honoured (runtimes_sharded, set before start), else all of them as unsharded.
        self.shard_ranges = shard_ranges
        self.runtimes_sharded = False
        self._api: k8s_api.Api | None = None
        self._ranges: dict[int, _RangeWatch] = {}
        self.runtimes = store_mod.Store(index_label=None)
        # ToolRuntimeClaims carry the user's labels, not ours: all of them, indexed by runtimeRef.
        self.claims = store_mod.Store(index_label=None, index_by=claim_runtime)
        self.pods = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.leases = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.services = store_mod.Store(selected_by=names.LABEL_RUNTIME)
        self.slices = store_mod.Store(index_label=SERVICE_NAME_LABEL, selected_by=names.LABEL_RUNTIME)
        self.gateway_pods = store_mod.Store(index_label=None, selected_by=names.LABEL_COMPONENT)
        self.gateway_leases = store_mod.Store(index_label=None, selected_by=names.LABEL_COMPONENT)
        # BATON_ISOLATE_TOOL_PODS: the runtimes' tool-pod NetworkPolicies (watched only then).
        self.tool_pod_isolation = tool_pod_isolation
        self.network_policies = (store_mod.Store(selected_by=names.LABEL_RUNTIME)
                                 if tool_pod_isolation is not None else None)
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

    def _owned(self) -> list[tuple[str, str, str, store_mod.Store]]:
        """(kind, apiVersion, plural, store) of the objects Baton makes for a runtime."""
        owned = [("Pod", "v1", "pods", self.pods),
                 ("Lease", "coordination.k8s.io/v1", "leases", self.leases),
                 ("Service", "v1", "services", self.services),
                 ("EndpointSlice", "discovery.k8s.io/v1", "endpointslices", self.slices)]
        if self.network_policies is not None:
            owned.append(("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies", self.network_policies))
        return owned

    def _kinds(self) -> list[tuple[str, str, str, store_mod.Store, str | None, bool]]:
        """(kind, apiVersion, plural, store, label selector, metadata only) of each informer that
        runs from start to stop (sharded: the unlabelled objects' ones; the ranges' are apart)."""
        kinds: list[tuple[str, str, str, store_mod.Store, str | None, bool]] = []
        if not (self.shard_ranges and self.runtimes_sharded):
            kinds.append((names.KIND, names.API_VERSION, names.PLURAL, self.runtimes, None, False))
        kinds.append((names.CLAIM_KIND, names.API_VERSION, names.CLAIM_PLURAL, self.claims, None, False))
        owned = f"{names.LABEL_RUNTIME},!{names.LABEL_HASH_BUCKET}" if self.shard_ranges else names.LABEL_RUNTIME
        kinds += [(kind, gv, plural, store, owned, False) for kind, gv, plural, store in self._owned()]
        if self.configmaps is not None:
            kinds.append(("ConfigMap", "v1", "configmaps", self.configmaps, None, True))
        if self.secrets is not None:
            kinds.append(("Secret", "v1", "secrets", self.secrets, None, True))
        return kinds

    def informer_count(self) -> int:
        """How many informers may run at once: one per kind and watched namespace (or one per
        kind), and sharded, those of every range too (a replica alone holds them all)."""
        per_range = len(self._owned()) + (1 if self.runtimes_sharded else 0)
        return (len(self._kinds()) + self.shard_ranges * per_range) * max(1, len(self.namespaces)) + 2

    def _scope(self) -> Callable[[dict[str, Any]], bool] | None:
        return unlabelled if self.shard_ranges else None

    def start(self, api: k8s_api.Api) -> None:
        self._api = api
        scopes: tuple[str | None, ...] = self.namespaces or (None,)
        for kind, gv, plural, store, selector, metadata_only in self._kinds():
            for ns in scopes:
                scope = self._scope() if store in (self.pods, self.leases, self.services, self.slices,
                                                   self.network_policies) else None
                informer = informer_mod.Informer(api, kind=kind, group_version=gv, plural=plural, namespace=ns,
                                                 store=store, label_selector=selector, metadata_only=metadata_only,
                                                 scope=scope)
                self.informers.append(informer)
                self._tasks.append(asyncio.create_task(informer.run(), name=f"watch {kind} {ns or '*'}"))
        # The gateway's pods: one namespace, whatever the watched ones are (baton.k8s.gateways.RBAC).
        gw = informer_mod.Informer(api, kind="Pod", group_version="v1", plural="pods", namespace=self.system_namespace,
                                   store=self.gateway_pods,
                                   label_selector=f"{names.LABEL_COMPONENT}={names.COMPONENT_GATEWAY}")
        self.informers.append(gw)
        self._tasks.append(asyncio.create_task(gw.run(), name=f"watch gateway pods {self.system_namespace}"))
        # And their registration Leases (baton.k8s.gateways.RBAC): a wake's demand.
        gl = informer_mod.Informer(api, kind="GatewayLease", group_version="coordination.k8s.io/v1", plural="leases",
                                   namespace=self.system_namespace, store=self.gateway_leases,
                                   label_selector=f"{names.LABEL_COMPONENT}={names.COMPONENT_GATEWAY}")
        self.informers.append(gl)
        self._tasks.append(asyncio.create_task(gl.run(), name=f"watch gateway leases {self.system_namespace}"))

    # --- sharded: one set of informers per held range -------------------------------------------

    def start_range(self, index: int) -> None:
        """List and watch range `index`'s objects (their hash-bucket label; ToolRuntimes by the
        server's shardSelector where honoured), each checked here too (the informer's scope)."""
        assert self._api is not None and self.shard_ranges, "start_range before start, or not sharded"
        if index in self._ranges:
            return
        ranges = self.shard_ranges
        label = ranges_mod.bucket_selector(index, ranges=ranges)
        in_buckets = _in_buckets(frozenset(ranges_mod.buckets(index, ranges=ranges)))
        kinds: list[tuple[str, str, str, store_mod.Store, str | None, str | None, Callable[[dict[str, Any]], bool]]] = [
            (kind, gv, plural, store, f"{names.LABEL_RUNTIME},{label}", None, in_buckets)
            for kind, gv, plural, store in self._owned()]
        if self.runtimes_sharded:
            kinds.append((names.KIND, names.API_VERSION, names.PLURAL, self.runtimes, None,
                          ranges_mod.shard_selector(index, ranges=ranges), _in_range(index, ranges)))
        watch = _RangeWatch(informers=[], tasks=[])
        for kind, gv, plural, store, selector, shard, scope in kinds:
            for ns in self.namespaces or (None,):
                informer = informer_mod.Informer(self._api, kind=kind, group_version=gv, plural=plural, namespace=ns,
                                                 store=store, label_selector=selector, shard_selector=shard,
                                                 scope=scope)
                watch.informers.append(informer)
                watch.tasks.append(asyncio.create_task(informer.run(), name=f"watch {kind} {ns or '*'} range {index}"))
        self._ranges[index] = watch
        self.informers.extend(watch.informers)

    async def stop_range(self, index: int) -> None:
        """Stop watching range `index` and forget its objects (quietly: listed again if the range
        comes back)."""
        watch = self._ranges.pop(index, None)
        if watch is None:
            return
        # Cancelled and emptied before any await: a start_range of the same index meanwhile
        # (the range came back) must not see its fresh list dropped after it.
        for task in watch.tasks:
            task.cancel()
        for informer in watch.informers:
            self.informers.remove(informer)
            if informer.scope is not None:
                informer.store.drop(informer.scope)
                metrics.CACHE_OBJECTS.labels(kind=informer.kind).set(len(informer.store))
        await informer_mod.stop(watch.tasks)

    def watched_ranges(self) -> set[int]:
        return set(self._ranges)

    def range_synced(self, index: int) -> bool:
        """Whether every view of range `index` is filled: its own informers and the unlabelled
        objects' (a runtime is acted on only then: an object not yet listed is not absent)."""
        watch = self._ranges.get(index)
        if watch is None:
            return False
        fixed = [i for i in self.informers if i.scope is unlabelled]
        return all(i.synced.is_set() and i.forbidden is None for i in [*watch.informers, *fixed])

    async def wait_synced(self, timeout: float) -> bool:
        return await informer_mod.wait_synced(self.informers, timeout)

    async def stop(self) -> None:
        await informer_mod.stop(self._tasks)
        for index in list(self._ranges):
            await self.stop_range(index)

    def apply(self, obj: dict[str, Any] | None, kind: str = "") -> None:
        """Apply what a write returned to the views (read-your-writes)."""
        if not isinstance(obj, dict) or "metadata" not in obj:
            return
        store = {"Pod": self.pods, "Lease": self.leases, "Service": self.services, "EndpointSlice": self.slices,
                 "ToolRuntime": self.runtimes, "ToolRuntimeClaim": self.claims,
                 "NetworkPolicy": self.network_policies}.get(kind or str(obj.get("kind") or ""))
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

    def gateway_leases_listed(self) -> list[dict[str, Any]] | None:
        """The gateway replicas' Leases as watched, or None until that view is listed (or while
        it is forbidden): then an empty view says nothing."""
        if not self.known(self.gateway_leases, self.system_namespace):
            return None
        return list(self.gateway_leases.items())

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
