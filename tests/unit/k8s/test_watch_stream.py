"""Watch streams that one object cannot freeze: lines split by Baton, of any size an API server
can send, and a line that cannot be read raises the error that makes the watcher list again."""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

import aiohttp.web
import kubernetes
import pytest

from baton.k8s import api as k8s_api


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def _split(data: bytes, size: int, limit: int = k8s_api.MAX_WATCH_LINE_BYTES) -> list[bytes]:
    return [line async for line in k8s_api.split_lines(_chunks(data, size), limit=limit)]


@pytest.mark.parametrize("size", [1, 3, 7, 64, 65536, 10**7])
def test_lines_come_out_whole_however_the_chunks_fall(size: int) -> None:
    big = b"x" * 700_000
    data = b'{"a":1}\n\n' + big + b"\n" + b'{"b":2}'
    assert asyncio.run(_split(data, size)) == [b'{"a":1}', b"", big, b'{"b":2}']


def test_a_line_over_the_limit_is_a_stream_error_not_a_hang() -> None:
    with pytest.raises(k8s_api.WatchStreamError, match="over 100 bytes"):
        asyncio.run(_split(b"y" * 101 + b"\n", 7, limit=100))
    with pytest.raises(k8s_api.WatchStreamError, match="over 100 bytes"):
        asyncio.run(_split(b"y" * 101, 1000, limit=100))  # no newline yet: still bounded
    assert asyncio.run(_split(b"y" * 100 + b"\n", 7, limit=100)) == [b"y" * 100]


def test_a_line_that_is_no_json_object_is_a_stream_error() -> None:
    assert k8s_api.decode_watch_line(b"  \r") is None
    assert k8s_api.decode_watch_line(b'{"type":"ADDED"}') == {"type": "ADDED"}
    for bad in (b'{"type":"ADD', b"[1,2]", b"\xff\xfe"):
        with pytest.raises(k8s_api.WatchStreamError):
            k8s_api.decode_watch_line(bad)


def test_a_watch_event_carrying_a_700_kb_object_is_delivered() -> None:
    # A real HTTP stream on loopback through aiohttp, as Api.watch reads it from an API server.
    data = {"k": "v" * 700_000}
    events = [{"type": "ADDED", "object": {"metadata": {"name": "big", "resourceVersion": "5"}, "data": data}},
              {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}}]

    async def handler(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        resp = aiohttp.web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for event in events:
            line = json.dumps(event).encode() + b"\n"
            for i in range(0, len(line), 50_000):
                await resp.write(line[i:i + 50_000])
        return resp

    async def run() -> list[dict[str, object]]:
        app = aiohttp.web.Application()
        app.router.add_get("/api/v1/configmaps", handler)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        cfg = kubernetes.client.Configuration()
        cfg.host = f"http://127.0.0.1:{port}"
        api = k8s_api.Api(cfg, name="test")
        try:
            return [e async for e in api.watch("/api/v1/configmaps", resource_version="1", timeout_seconds=5)]
        finally:
            await api.close()
            await runner.cleanup()

    got = asyncio.run(run())
    assert got == events


def test_an_unreadable_line_makes_the_informer_list_again_instead_of_resuming_from_it() -> None:
    from baton.cache import informer as informer_mod
    from baton.cache import store as store_mod

    calls: list[str] = []

    class FakeApi:  # our own adapter boundary: what k8s.api.Api answers
        async def list(self, path: str, *, label_selector: str | None = None, limit: int = 500,
                       each: object = None, metadata_only: bool = False,
                       shard_selector: str | None = None) -> tuple[list[dict[str, object]], str]:
            calls.append("list")
            return [], "7"

        async def watch(self, path: str, *, resource_version: str, label_selector: str | None = None,
                        timeout_seconds: int = 300, metadata_only: bool = False,
                        shard_selector: str | None = None) -> AsyncIterator[dict[str, object]]:
            calls.append(f"watch@{resource_version}")
            if sum(c.startswith("watch") for c in calls) <= 2:
                raise k8s_api.WatchStreamError("a watch line over 16777216 bytes")
            await asyncio.sleep(3600)
            yield {}

    async def run() -> None:
        inf = informer_mod.Informer(FakeApi(), kind="ConfigMap", group_version="v1",  # type: ignore[arg-type]
                                    plural="configmaps", namespace=None, store=store_mod.Store())

        async def no_pause(failures: int, exc: BaseException) -> None:
            calls.append(f"pause:{type(exc).__name__}")
        inf._pause = no_pause  # type: ignore[method-assign]
        task = asyncio.create_task(inf.run())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(calls) >= 7:
                break
        task.cancel()

    asyncio.run(run())
    # Each failure lists again (a resume would have been watch@7 with no list between).
    assert calls[:6] == ["list", "watch@7", "pause:WatchStreamError", "list", "watch@7", "pause:WatchStreamError"]


class ScriptedApi:
    """Our adapter boundary (k8s.api.Api's list and watch), answering from a script."""

    def __init__(self, *, watch_errors: list[BaseException], pages: list[list[dict[str, object]]] | None = None) -> None:
        self.calls: list[str] = []
        self.watch_errors = watch_errors
        self.pages = pages or [[]]
        self.held: list[int] = []  # how many items were held (mapped) when each page arrived

    async def list(self, path: str, *, label_selector: str | None = None, limit: int = 500,
                   each: object = None, metadata_only: bool = False,
                   shard_selector: str | None = None) -> tuple[list[dict[str, object]], str]:
        self.calls.append(f"list(limit={limit})")
        items: list[dict[str, object]] = []
        for page in self.pages:
            items += [each(dict(item)) if callable(each) else item for item in page]
            self.held.append(len(items))
        return items, "7"

    async def watch(self, path: str, *, resource_version: str, label_selector: str | None = None,
                    timeout_seconds: int = 300, metadata_only: bool = False,
                    shard_selector: str | None = None) -> AsyncIterator[dict[str, object]]:
        self.calls.append(f"watch@{resource_version}")
        if self.watch_errors:
            raise self.watch_errors.pop(0)
        await asyncio.sleep(3600)
        yield {}


def _run_informer(api: ScriptedApi, store: object, *, until: int) -> list[str]:
    from baton.cache import informer as informer_mod

    async def run() -> None:
        inf = informer_mod.Informer(api, kind="ConfigMap", group_version="v1",  # type: ignore[arg-type]
                                    plural="configmaps", namespace="ns", store=store)  # type: ignore[arg-type]

        async def no_pause(failures: int, exc: BaseException) -> None:
            api.calls.append(f"pause({failures})")
        inf._pause = no_pause  # type: ignore[method-assign]
        task = asyncio.create_task(inf.run())
        for _ in range(200):
            await asyncio.sleep(0.005)
            if len(api.calls) >= until:
                break
        task.cancel()

    asyncio.run(run())
    return api.calls[:until]


def test_a_throttled_or_failing_watch_resumes_from_its_version_without_listing_again() -> None:
    from baton.cache import store as store_mod
    api = ScriptedApi(watch_errors=[k8s_api.ApiError(429, "TooManyRequests", "slow down"),
                                    k8s_api.ApiError(503, "ServiceUnavailable", "")])
    calls = _run_informer(api, store_mod.Store(), until=6)
    assert calls == ["list(limit=500)", "watch@7", "pause(1)", "watch@7", "pause(2)", "watch@7"]


def test_gone_lists_again_at_once_but_gone_again_backs_off() -> None:
    from baton.cache import store as store_mod
    gone = k8s_api.ApiError(410, "Expired", "too old resource version")
    api = ScriptedApi(watch_errors=[gone, gone, gone])
    calls = _run_informer(api, store_mod.Store(), until=8)
    assert calls == ["list(limit=500)", "watch@7", "list(limit=500)", "watch@7", "pause(1)", "list(limit=500)",
                     "watch@7", "pause(2)"]


def test_a_reducing_store_is_listed_in_small_pages_each_reduced_as_it_arrives() -> None:
    from baton.cache import store as store_mod
    big = [{"metadata": {"name": f"cm{i}", "resourceVersion": "3"}, "data": {"k": "x" * 1000}} for i in range(3)]
    reduced = store_mod.Store(index_label=None, transform=lambda o: {"metadata": o["metadata"], "n": len(str(o))})
    api = ScriptedApi(watch_errors=[], pages=[big[:2], big[2:]])
    calls = _run_informer(api, reduced, until=2)
    assert calls == ["list(limit=50)", "watch@7"]
    kept = reduced.get("ns", "cm0")
    assert kept is not None and "data" not in kept and kept["metadata"]["namespace"] == "ns"
    assert kept["n"] > 1000  # reduced once, from the whole object, not again from its reduction


def test_tombstones_are_forgotten_after_their_time_and_meanwhile_keep_late_replies_out() -> None:
    from baton.cache import store as store_mod
    now = [1000.0]
    store = store_mod.Store(index_label=None, clock=lambda: now[0])
    obj = {"metadata": {"namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "5"}}
    for i in range(100):
        store.apply({"metadata": {"namespace": "ns", "name": f"b{i}", "resourceVersion": "1"}})
        store.delete({"metadata": {"namespace": "ns", "name": f"b{i}", "resourceVersion": "2"}})
    store.apply(obj)
    store.delete({"metadata": {**obj["metadata"], "resourceVersion": "9"}})
    assert store.tombstones() == 101
    assert not store.apply({"metadata": {**obj["metadata"], "resourceVersion": "7"}}), "a late reply stays out"
    now[0] += store_mod.TOMBSTONE_SECONDS + 1
    assert store.tombstones() == 0


def test_a_view_is_known_only_once_every_informer_feeding_it_listed_and_none_is_forbidden() -> None:
    from baton.cache import informer as informer_mod
    from baton.cache import views as views_mod

    async def run() -> list[bool]:
        v = views_mod.Views(namespaces=("a", "b"), watch_configmaps=False, watch_secrets=False)
        seen = [v.known(v.slices, "a")]  # no informer at all: nothing known
        for ns in ("a", "b"):
            v.informers.append(informer_mod.Informer(
                None, kind="EndpointSlice", group_version="discovery.k8s.io/v1",  # type: ignore[arg-type]
                plural="endpointslices", namespace=ns, store=v.slices))
        seen.append(v.known(v.slices, "a"))  # not listed yet
        v.informers[0].synced.set()
        seen += [v.known(v.slices, "a"), v.known(v.slices, "b")]
        v.informers[0].forbidden = "403"
        seen.append(v.known(v.slices, "a"))
        return seen

    assert asyncio.run(run()) == [False, False, True, False, False]


def test_every_failed_list_or_watch_is_counted_by_kind_and_reason() -> None:
    from baton import metrics
    from baton.cache import store as store_mod

    kind = "WatchErrorsProbe"  # a kind of its own: the registry is process-wide

    def counts() -> dict[str, float]:
        return {r.value: metrics.WATCH_ERRORS.labels(kind=kind, reason=r.value)._value.get()
                for r in metrics.WatchError}

    errors: list[BaseException] = [
        k8s_api.ApiError(410, "Expired", "too old"), k8s_api.ApiError(403, "Forbidden", "rbac"),
        k8s_api.ApiError(429, "TooManyRequests", ""), k8s_api.ApiError(503, "ServiceUnavailable", ""),
        k8s_api.ApiError(500, "InternalError", ""), k8s_api.WatchStreamError("bad line"),
        ConnectionResetError("dropped"),
    ]
    api = ScriptedApi(watch_errors=list(errors))

    async def run() -> None:
        from baton.cache import informer as informer_mod
        inf = informer_mod.Informer(api, kind=kind, group_version="v1",  # type: ignore[arg-type]
                                    plural="configmaps", namespace="ns", store=store_mod.Store())
        # Every reason has its series before anything failed.
        assert counts() == {r.value: 0.0 for r in metrics.WatchError}

        async def no_pause(failures: int, exc: BaseException) -> None:
            return None
        inf._pause = no_pause  # type: ignore[method-assign]
        task = asyncio.create_task(inf.run())
        for _ in range(400):
            await asyncio.sleep(0.005)
            if not api.watch_errors and api.calls[-1].startswith("watch"):
                break
        task.cancel()

    asyncio.run(run())
    assert not api.watch_errors, api.calls
    assert counts() == {"Gone": 1.0, "Forbidden": 1.0, "Throttled": 1.0, "ApiError": 2.0, "BadStream": 1.0,
                        "Disconnected": 1.0}
