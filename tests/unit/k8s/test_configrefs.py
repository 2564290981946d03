"""ConfigMaps and Secrets read only where referenced (issue 23): the metadata-only list and watch
(what Api asks for, what the informer and view keep of the answer), and the digest cache of the
GET path (baton.k8s.configrefs), against a stub API server on loopback (our adapter boundary)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

import aiohttp.web
import kubernetes
import pytest

from baton.cache import informer as informer_mod
from baton.cache import views as views_mod
from baton.k8s import api as k8s_api
from baton.k8s import client, configrefs


@pytest.fixture(autouse=True)
def _digest_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Digests are keyed (test_configrefs_keyed.py): every read here digests under a test key."""
    monkeypatch.setattr(configrefs, "_key", None)
    configrefs.install_key(b"t" * 32)

Handler = Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.StreamResponse]]


async def _serve(routes: dict[str, Handler]) -> tuple[aiohttp.web.AppRunner, k8s_api.Api]:
    app = aiohttp.web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    # cleanup() waits up to shutdown_timeout for handlers still running (the watch that sleeps
    # until cancelled): 60 s by default, a minute of CI for nothing.
    runner = aiohttp.web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    return runner, k8s_api.Api(cfg, name="test")


def _meta(name: str, rv: str, ns: str = "ns") -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": rv,
                         "labels": {"app": "x"}, "managedFields": [{"manager": "kubectl"}]}}


def test_a_metadata_only_informer_asks_for_metadata_and_keeps_names_and_versions() -> None:
    accepts: dict[str, list[str]] = {"list": [], "watch": []}
    sent_full = {"n": 0}

    async def configmaps(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        accept = request.headers.get("Accept", "")
        if request.query.get("watch") == "true":
            accepts["watch"].append(accept)
            resp = aiohttp.web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for event in ({"type": "MODIFIED", "object": _meta("a", "12")},
                          {"type": "DELETED", "object": _meta("b", "13")},
                          {"type": "ADDED", "object": _meta("c", "14")}):
                await resp.write(json.dumps(event).encode() + b"\n")
            await asyncio.sleep(3600)
            return resp
        accepts["list"].append(accept)
        if "as=PartialObjectMetadataList" not in accept:
            sent_full["n"] += 1  # what an old client got: whole objects, data and all
        if request.query.get("continue") is None:
            page = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"resourceVersion": "10", "continue": "p2"}, "items": [_meta("a", "5")]}
        else:
            page = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"resourceVersion": "10"}, "items": [_meta("b", "6")]}
        return aiohttp.web.json_response(page)

    async def run() -> tuple[views_mod.Views, list[dict[str, Any] | None], informer_mod.Informer]:
        runner, api = await _serve({"/api/v1/configmaps": configmaps})
        v = views_mod.Views(namespaces=(), watch_configmaps=True, watch_secrets=False)
        assert v.configmaps is not None
        v.config_digests.put(("ConfigMap", "ns", "b"), "6", "digest-of-b")
        inf = informer_mod.Informer(api, kind="ConfigMap", group_version="v1", plural="configmaps", namespace=None,
                                    store=v.configmaps, metadata_only=True)
        v.informers.append(inf)
        task = asyncio.create_task(inf.run())
        try:
            for _ in range(500):
                await asyncio.sleep(0.01)
                if v.configmaps.get("ns", "c") is not None:
                    break
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()
            await runner.cleanup()
        return v, [v.configmaps.get("ns", n) for n in ("a", "b", "c")], inf

    v, (a, b, c), inf = asyncio.run(run())
    assert accepts["list"] == [k8s_api.ACCEPT_METADATA_LIST] * 2  # both pages
    assert accepts["watch"] == [k8s_api.ACCEPT_METADATA]
    assert k8s_api.ACCEPT_METADATA_LIST.startswith("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    assert k8s_api.ACCEPT_METADATA.startswith("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    assert sent_full["n"] == 0
    assert inf.page_size == 50
    # Kept: which objects exist, at which version; nothing else (no labels, no managedFields).
    assert a == {"metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "resourceVersion": "12"}}
    assert b is None and c is not None
    assert v.config_lookup("ConfigMap", "ns", "a") == "12"
    assert v.config_lookup("ConfigMap", "ns", "b") == configrefs.ABSENT
    assert v.config_lookup("Secret", "ns", "a") is None  # no Secret view: read it
    # The deleted object's cached digest went with it.
    assert v.config_digests.get(("ConfigMap", "ns", "b"), "6") is None and len(v.config_digests) == 0


def test_full_objects_from_a_server_that_cannot_convert_are_reduced_all_the_same() -> None:
    full = {"kind": "ConfigMap", "apiVersion": "v1", "data": {"k": "x" * 10_000},
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                         "annotations": {"note": "y" * 1000}}}
    store = views_mod.Views(namespaces=(), watch_configmaps=True, watch_secrets=False).configmaps
    assert store is not None and store.reduces
    assert store.apply(full)
    assert store.get("ns", "a") == {"metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "3"}}


class _ConfigServer:
    """GET /api/v1/namespaces/ns/{configmaps,secrets}/<name> from a dict; every GET counted."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets: list[str] = []
        self.forbidden: set[str] = set()

    def put(self, plural: str, name: str, rv: str, data: dict[str, str]) -> None:
        self.objects[(plural, name)] = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
                                        "data": data}

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        plural, name = request.match_info["plural"], request.match_info["name"]
        self.gets.append(f"{plural}/{name}")
        if name in self.forbidden:
            return aiohttp.web.json_response({"reason": "Forbidden", "message": "no"}, status=403)
        obj = self.objects.get((plural, name))
        if obj is None:
            return aiohttp.web.json_response({"reason": "NotFound", "message": "gone"}, status=404)
        return aiohttp.web.json_response(obj)


@pytest.fixture
def config_server() -> _ConfigServer:
    return _ConfigServer()


def _digest_runs(server: _ConfigServer, steps: list[Callable[[], Awaitable[None]]]) -> None:
    async def run() -> None:
        runner, api = await _serve({"/api/v1/namespaces/ns/{plural}/{name}": server.handle})
        saved = client._WORK
        client._WORK = api
        try:
            for step in steps:
                await step()
        finally:
            client._WORK = saved
            await api.close()
            await runner.cleanup()
    asyncio.run(run())


def test_referenced_objects_are_read_once_per_resource_version(config_server: _ConfigServer) -> None:
    s = config_server
    s.put("configmaps", "conf", "5", {"k": "v1"})
    s.put("secrets", "key", "6", {"t": "MTIzNA=="})
    view = {("ConfigMap", "conf"): "5", ("Secret", "key"): "6"}  # what the metadata view shows
    cache = configrefs.DigestCache()
    refs = [("ConfigMap", "conf", False), ("Secret", "key", False)]
    results: list[tuple[str, list[str], list[str], list[tuple[str, str]], Any]] = []

    def lookup(kind: str, namespace: str, name: str) -> str | None:
        return view.get((kind, name), configrefs.ABSENT)

    async def digest() -> None:
        results.append(await configrefs.read_config_digest("ns", refs, lookup, cache=cache))

    async def change_conf() -> None:
        s.put("configmaps", "conf", "9", {"k": "v2"})
        view[("ConfigMap", "conf")] = "9"

    async def relabel_conf() -> None:  # metadata only: a new version, the same data
        s.put("configmaps", "conf", "11", {"k": "v2"})
        view[("ConfigMap", "conf")] = "11"

    _digest_runs(s, [digest, digest, change_conf, digest, digest, relabel_conf, digest])
    first, again, changed, changed_again, relabelled = results
    assert s.gets == ["configmaps/conf", "secrets/key",  # first pass: each referenced object once
                      "configmaps/conf",                   # the ConfigMap's new version: read again
                      "configmaps/conf"]                   # and after the relabel
    assert first == again and changed == changed_again
    assert changed[0] != first[0], "new data, new digest"
    assert relabelled == changed, "same data, same digest: no handoff"
    assert dict(first[3])["Secret/key"] == dict(changed[3])["Secret/key"]
    assert len(cache) == 2


def test_absent_in_the_view_is_not_read_and_gone_or_forbidden_is_not_cached(config_server: _ConfigServer) -> None:
    s = config_server
    s.put("configmaps", "lagging", "4", {"k": "v"})
    s.forbidden.add("hidden")
    cache = configrefs.DigestCache()
    cache.put(("ConfigMap", "ns", "deleted"), "3", "old")
    view = {"lagging": "4", "deleted": "3", "hidden": "8"}
    results: list[tuple[str, list[str], list[str], list[tuple[str, str]], Any]] = []

    def lookup(kind: str, namespace: str, name: str) -> str | None:
        return view.get(name, configrefs.ABSENT)

    refs = [("ConfigMap", "deleted", False), ("ConfigMap", "hidden", True), ("ConfigMap", "missing", False)]

    async def digest() -> None:
        results.append(await configrefs.read_config_digest("ns", refs, lookup, cache=cache))

    async def view_lags_a_deletion() -> None:
        view["deleted"] = "7"  # a newer version the view saw; the GET then finds it gone

    _digest_runs(s, [view_lags_a_deletion, digest, digest])
    _, missing, unreadable, _, _ = results[0]
    assert missing == ["ConfigMap/deleted", "ConfigMap/missing"]
    assert unreadable == ["ConfigMap/hidden"]
    # "missing" is absent in the view: never read. The others are read every pass: nothing cached.
    assert s.gets == ["configmaps/deleted", "configmaps/hidden"] * 2
    assert len(cache) == 0


def test_without_a_view_every_pass_reads_and_nothing_is_cached(config_server: _ConfigServer) -> None:
    s = config_server
    s.put("configmaps", "conf", "5", {"k": "v1"})
    cache = configrefs.DigestCache()

    async def digest() -> None:
        await configrefs.read_config_digest("ns", [("ConfigMap", "conf", False)], lambda *_: None, cache=cache)

    _digest_runs(s, [digest, digest])
    assert s.gets == ["configmaps/conf"] * 2 and len(cache) == 0


def test_the_digest_cache_is_bounded_and_keyed_by_version() -> None:
    cache = configrefs.DigestCache(max_entries=2)
    cache.put(("ConfigMap", "ns", "a"), "10", "da")
    cache.put(("ConfigMap", "ns", "b"), "11", "db")
    assert cache.get(("ConfigMap", "ns", "a"), "10") == "da"
    assert cache.get(("ConfigMap", "ns", "a"), "9") == "da"  # read after the version the view shows
    assert cache.get(("ConfigMap", "ns", "a"), "12") is None  # the view has a newer one
    assert cache.get(("Secret", "ns", "a"), "10") is None  # kinds apart
    cache.get(("ConfigMap", "ns", "a"), "10")  # a used last: b goes first
    cache.put(("ConfigMap", "ns", "c"), "12", "dc")
    assert len(cache) == 2 and cache.get(("ConfigMap", "ns", "b"), "11") is None
    cache.forget(("ConfigMap", "ns", "a"))
    assert len(cache) == 1
    opaque = configrefs.DigestCache()
    opaque.put(("ConfigMap", "ns", "a"), "x1", "d")
    assert opaque.get(("ConfigMap", "ns", "a"), "x1") == "d" and opaque.get(("ConfigMap", "ns", "a"), "x2") is None

