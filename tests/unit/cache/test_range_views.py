"""baton.cache.views sharded: one informer set per held range, selected by the hash-bucket label
(ToolRuntimes by shardSelector when the server honours it), every object also judged here (a
server that ignores the shardSelector sends everything), a range counted filled only once all
its views and the unlabelled objects' are listed, and a stopped range's objects forgotten."""

from __future__ import annotations

import asyncio
import re
from typing import Any, AsyncIterator

from baton.cache import views as views_mod
from baton.model import names, shardhash
from baton.sharding import ranges as ranges_mod

RANGES = 4


def runtime(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "3"}}


def pod(name: str, bucket: str | None) -> dict[str, Any]:
    labels = {names.LABEL_RUNTIME: name}
    if bucket is not None:
        labels[names.LABEL_HASH_BUCKET] = bucket
    return {"metadata": {"name": name, "namespace": "ns", "uid": "p-" + name, "resourceVersion": "4", "labels": labels}}


class IgnoringApi:
    """Our adapter boundary (k8s.api.Api's list and watch) as an API server with the sharding gate
    off: it honours label selectors (`in (...)`, `!label`) but answers every ToolRuntime whatever
    the shardSelector. Lists wait for `release`."""

    def __init__(self, runtimes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.runtimes, self.pods = runtimes, pods
        self.lists: list[tuple[str, str | None, str | None]] = []
        self.release = asyncio.Event()

    @staticmethod
    def _selects(selector: str | None, obj: dict[str, Any]) -> bool:
        labels = obj["metadata"].get("labels") or {}
        for part in re.split(r",(?![^(]*\))", selector or ""):  # commas outside "in (...)"
            if not part:
                continue
            if part.startswith("!"):
                if part[1:] in labels:
                    return False
            elif " in (" in part:
                key, _, rest = part.partition(" in (")
                if labels.get(key) not in rest.rstrip(")").split(","):
                    return False
            elif part not in labels:
                return False
        return True

    async def list(self, path: str, *, label_selector: str | None = None, limit: int = 500, each: Any = None,
                   metadata_only: bool = False, shard_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        self.lists.append((path.rsplit("/", 1)[-1], label_selector, shard_selector))
        await self.release.wait()
        if path.endswith("/pods"):
            found = [p for p in self.pods if self._selects(label_selector, p)]
        elif path.endswith("/" + names.PLURAL):
            found = list(self.runtimes)
        else:
            found = []
        return [each(dict(o)) if callable(each) else dict(o) for o in found], "9"

    async def watch(self, path: str, *, resource_version: str, label_selector: str | None = None,
                    timeout_seconds: int = 300, metadata_only: bool = False,
                    shard_selector: str | None = None) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(3600)
        yield {}


def uid_in(index: int) -> str:
    for i in range(10000):
        uid = f"uid-{i}"
        if ranges_mod.range_of(uid, ranges=RANGES) == index:
            return uid
    raise AssertionError("no uid")


def test_a_range_is_watched_alone_filtered_here_and_forgotten_when_stopped() -> None:
    u0, u1 = uid_in(0), uid_in(1)
    api = IgnoringApi(runtimes=[runtime("r0", u0), runtime("r1", u1)],
                      pods=[pod("r0", shardhash.hash_bucket(u0)), pod("r1", shardhash.hash_bucket(u1)), pod("old", None)])

    async def scenario() -> None:
        v = views_mod.Views(namespaces=("ns",), watch_configmaps=False, watch_secrets=False, shard_ranges=RANGES)
        v.runtimes_sharded = True
        v.start(api)  # type: ignore[arg-type]
        v.start_range(0)
        await asyncio.sleep(0.05)
        assert not v.range_synced(0), "nothing listed yet: the range's views are not filled"
        assert not v.range_synced(1), "a range not watched is never filled"
        api.release.set()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if v.range_synced(0):
                break
        assert v.range_synced(0)
        # Range 0's ToolRuntimes asked for by shardSelector, its pods by their buckets; the
        # unlabelled pods apart.
        asked = {(what, label, shard) for what, label, shard in api.lists}
        assert ("toolruntimes", None, ranges_mod.shard_selector(0, ranges=RANGES)) in asked
        assert ("pods", f"{names.LABEL_RUNTIME},{ranges_mod.bucket_selector(0, ranges=RANGES)}", None) in asked
        assert ("pods", f"{names.LABEL_RUNTIME},!{names.LABEL_HASH_BUCKET}", None) in asked
        # The server ignored the shardSelector; the view holds range 0's runtime only.
        assert {o["metadata"]["name"] for o in v.runtimes.items()} == {"r0"}
        assert {o["metadata"]["name"] for o in v.pods.items()} == {"r0", "old"}
        await v.stop_range(0)
        assert list(v.runtimes.items()) == []
        assert {o["metadata"]["name"] for o in v.pods.items()} == {"old"}, "the unlabelled view stays"
        assert v.watched_ranges() == set() and not v.range_synced(0)
        await v.stop()

    asyncio.run(scenario())
