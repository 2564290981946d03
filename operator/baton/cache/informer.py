"""List, then watch, one kind of object into a Store; selected on the server. Does I/O (through
``baton.k8s.api``).

Relists on 410 Gone (the watch fell too far behind), after API errors and after a line it
cannot read (``k8s.api.WatchStreamError``), with back-off; a dropped stream resumes from the last
resourceVersion. Bookmarks keep the resume point fresh so restarts rarely need a relist.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Callable

from baton import metrics
from baton.cache import store as store_mod
from baton.k8s import api as k8s_api

log = logging.getLogger("baton.cache")


class Informer:
    def __init__(
        self,
        api: k8s_api.Api,
        *,
        kind: str,
        group_version: str,
        plural: str,
        namespace: str | None,
        store: store_mod.Store,
        label_selector: str | None = None,
        metadata_only: bool = False,
        watch_timeout_seconds: int = 300,
        shard_selector: str | None = None,
        scope: Callable[[store_mod.Obj], bool] | None = None,
    ) -> None:
        """`metadata_only`: list and watch PartialObjectMetadata, never the objects' data.
        `shard_selector`: the API server's shardSelector (sharded list/watch). `scope`: what
        this informer selects, judged here on every object, for a store fed by several
        informers (a list's absences and a watch's deletions concern only what it selects),
        and as the filter of record: an object outside it is not kept, whatever the server
        sent (an API server with the sharding gate off ignores a shardSelector)."""
        self.api, self.kind, self.store = api, kind, store
        self.path = k8s_api.path(group_version, plural, namespace)
        self.namespace = namespace
        self.label_selector = label_selector
        self.shard_selector = shard_selector
        self.scope = scope
        self.metadata_only = metadata_only
        self.watch_timeout_seconds = watch_timeout_seconds
        # A store that keeps a reduced copy (names and versions) gets small pages: one page's
        # objects as sent (metadata can still carry a large last-applied annotation) are all
        # that is held at once.
        self.page_size = 50 if store.reduces else 500
        self.synced = asyncio.Event()
        self.forbidden: str | None = None  # RBAC says no: reported, retried slowly
        metrics.init_watch_errors(kind)

    def _reduce(self, item: dict[str, Any]) -> dict[str, Any]:
        item.setdefault("metadata", {}).setdefault("namespace", self.namespace or "")
        return self.store.reduce(item)

    async def run(self) -> None:
        failures = 0
        gone_in_a_row = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    items, rv = await self.api.list(self.path, label_selector=self.label_selector,
                                                    limit=self.page_size, each=self._reduce,
                                                    metadata_only=self.metadata_only,
                                                    shard_selector=self.shard_selector)
                    if self.scope is not None:
                        items = [item for item in items if self.scope(item)]
                    self.store.replace(self.namespace, items, reduced=True, scope=self.scope)
                    del items
                    metrics.CACHE_OBJECTS.labels(kind=self.kind).set(len(self.store))
                    self.synced.set()
                    self.forbidden = None
                async for event in self.api.watch(self.path, resource_version=rv, label_selector=self.label_selector,
                                                  timeout_seconds=self.watch_timeout_seconds,
                                                  metadata_only=self.metadata_only,
                                                  shard_selector=self.shard_selector):
                    rv = self._handle(event) or rv
                    gone_in_a_row = 0
                failures = 0
            except asyncio.CancelledError:
                raise
            except k8s_api.ApiError as exc:
                self._count(metrics.watch_error_reason(exc.status))
                if exc.status == 410:
                    # Too old: list again, at once the first time; a list whose continue token
                    # expires again (a slow list of a large scope) backs off instead of looping.
                    rv = None
                    gone_in_a_row += 1
                    if gone_in_a_row > 1:
                        failures += 1
                        await self._pause(failures, exc)
                    continue
                failures += 1
                if exc.status == 403:
                    self.forbidden = str(exc)
                    rv = None  # listed again once allowed: the list clears `forbidden`
                # Throttled (429) or a server error: the resume point is still good, so the
                # watch resumes from it after the pause instead of listing everything again.
                await self._pause(failures, exc)
            except k8s_api.WatchStreamError as exc:
                # The same resourceVersion would replay the same line: list again instead.
                self._count(metrics.WatchError.BAD_STREAM)
                failures += 1
                rv = None
                await self._pause(failures, exc)
            except Exception as exc:  # a dropped stream, a timeout: resume from rv
                self._count(metrics.WatchError.DISCONNECTED)
                failures += 1
                await self._pause(failures, exc)

    def _count(self, reason: metrics.WatchError) -> None:
        metrics.WATCH_ERRORS.labels(kind=self.kind, reason=reason.value).inc()

    def _handle(self, event: dict[str, object]) -> str | None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return None
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "") or None
        if kind == "BOOKMARK":
            return rv
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise k8s_api.ApiError(code, str(obj.get("reason") or ""), str(obj.get("message") or ""))
        if kind in ("ADDED", "MODIFIED"):
            if self.scope is None or self.scope(obj):
                self.store.apply(obj, watched=True)
        elif kind == "DELETED":
            self.store.delete(obj, scope=self.scope)
        metrics.WATCH_EVENTS.labels(kind=self.kind).inc()
        metrics.CACHE_OBJECTS.labels(kind=self.kind).set(len(self.store))
        return rv

    async def _pause(self, failures: int, exc: BaseException) -> None:
        delay = min(30.0, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.8, 1.2)
        log.warning("watch of %s (%s) failed: %s; again in %.1fs", self.kind, self.namespace or "all namespaces",
                    str(exc)[:300], delay)
        await asyncio.sleep(delay)


async def wait_synced(informers: list[Informer], timeout: float) -> bool:
    """Whether every one of `informers` listed within `timeout` (forbidden ones included)."""
    try:
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in informers)), timeout)
        return True
    except asyncio.TimeoutError:
        return False


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the informers' tasks, wait until they have ended, and forget them."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
