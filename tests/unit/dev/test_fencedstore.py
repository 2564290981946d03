"""dev.fencedstore (issue 45): the external store the hook tests write to, over real HTTP on
loopback. It accepts a write whose fence is not older than what it accepted, refuses an older
generation or an older token of the same writer with 409 naming which, records every request, and
can be told to fail (500) or hang; every test stops what it starts (the context manager)."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any

import pytest

from dev import fencedstore as fs
from dev.wait import wait_for
from baton.model import names

RUNTIME = "agents/search"


def _post(store: fs.FencedStore, *, generation: int | str, token: int | str, hook: str | None = None,
          path: str = "/write", runtime: str = RUNTIME, body: Any = None,
          timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    headers = {names.HEADER_RUNTIME: runtime, names.HEADER_GENERATION: str(generation),
               names.HEADER_FENCING_TOKEN: str(token), "Content-Type": "application/json"}
    if hook is not None:
        headers[names.HEADER_HOOK] = hook
    conn = http.client.HTTPConnection("127.0.0.1", store.port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body if body is not None else {}), headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_it_listens_on_loopback_and_stops() -> None:
    with fs.FencedStore() as store:
        assert store.url == f"http://127.0.0.1:{store.port}" and store.port > 0
        assert _post(store, generation=1, token=1)[0] == 200
        port = store.port
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_an_older_generation_is_refused_naming_the_generation() -> None:
    with fs.FencedStore() as store:
        assert _post(store, generation=3, token=5)[0] == 200
        assert _post(store, generation=4, token=5, body={"k": "v"})[0] == 200
        status, answer = _post(store, generation=3, token=9)  # a higher token does not make g3 current again
        assert status == 409 and answer["refused"] == "generation"
        assert answer["reason"] == "generation 3 is older than generation 4 of agents/search"
        # Another runtime has its own fence.
        assert _post(store, generation=1, token=1, runtime="agents/other")[0] == 200
        assert [(f.generation, f.writer) for f, _, _ in store.accepted()] == [(3, "tool"), (4, "tool"), (1, "tool")]
        assert json.loads(store.accepted()[1][2]) == {"k": "v"}


def test_a_hook_resumed_by_a_new_holder_refuses_the_old_holders_late_call() -> None:
    with fs.FencedStore() as store:
        assert _post(store, generation=7, token=41)[0] == 200  # the tool of g7, its creation token
        assert _post(store, generation=7, token=42, hook="preRetire", path="/release")[0] == 200  # new holder
        status, answer = _post(store, generation=7, token=41, hook="preRetire", path="/release")  # old holder, late
        assert status == 409 and answer["refused"] == "fencingToken"
        assert answer["reason"] == "fencing token 41 is older than 42 (preRetire of generation 7 of agents/search)"
        # The same call again (at least once) is accepted: the receiver deduplicates by generation.
        assert _post(store, generation=7, token=42, hook="preRetire", path="/release")[0] == 200
        # The tool's own writes carry its creation token: another writer than the hook, not refused.
        assert _post(store, generation=7, token=41)[0] == 200
        assert [r.status for r in store.requests(path="/release")] == [200, 409, 200]


def test_every_request_is_recorded_with_its_headers_body_and_time() -> None:
    before = time.time()
    with fs.FencedStore() as store:
        body = {"runtime": "search", "namespace": "agents", "generation": 2, "fencingToken": 3,
                "hook": "postReady", "pod": "search"}
        _post(store, generation=2, token=3, hook="postReady", path="/warm", body=body)
        _post(store, generation="x", token=3)
        first, bad = store.requests()
        assert (first.method, first.path, first.status) == ("POST", "/warm", 200)
        assert first.header("baton-hook") == "postReady" and first.header(names.HEADER_FENCING_TOKEN) == "3"
        assert first.json() == body and before <= first.at <= time.time()
        assert bad.status == 400


def test_a_request_without_a_valid_fence_is_refused_naming_the_header() -> None:
    with fs.FencedStore() as store:
        status, answer = _post(store, generation=1, token=1, runtime="search")
        assert (status, answer["reason"]) == (400, "header Baton-Runtime must be <namespace>/<name>, not 'search'")
        status, answer = _post(store, generation=1, token="-2")
        assert (status, answer["reason"]) == (400, "header Baton-Fencing-Token must be a decimal integer, not '-2'")
        assert store.accepted() == []


def test_it_can_fail_a_path_and_heal() -> None:
    with fs.FencedStore() as store:
        store.answer(500, path="/release")
        assert _post(store, generation=1, token=1, hook="preRetire", path="/release")[0] == 500
        assert _post(store, generation=1, token=1, path="/write")[0] == 200  # other paths are judged
        store.heal(path="/release")
        assert _post(store, generation=1, token=1, hook="preRetire", path="/release")[0] == 200
        assert [r.status for r in store.requests()] == [500, 200, 200]
        with pytest.raises(ValueError, match="status must be an HTTP status"):
            store.answer(42)


def test_a_hang_holds_the_caller_until_its_own_deadline_and_ends_with_the_store() -> None:
    with fs.FencedStore(hang_seconds=60) as store:
        store.hang()
        with pytest.raises(TimeoutError):
            _post(store, generation=1, token=1, hook="preRetire", timeout=0.5)
        [hung] = store.requests()
        assert hung.status is None and hung.header(names.HEADER_HOOK) == "preRetire"
        # A second caller hangs too; stopping the store answers it (bounded: the store's threads end).
        result: list[int] = []
        caller = threading.Thread(target=lambda: result.append(_post(store, generation=1, token=1, timeout=30)[0]))
        caller.start()
        wait_for(lambda: len(store.requests()) == 2, timeout=10, what="the second call arrived")
        store.heal()
        caller.join(timeout=30)
        assert result == [503] and not caller.is_alive()
        assert _post(store, generation=1, token=1)[0] == 200, "healed: judged again"


def test_healing_one_path_leaves_another_paths_hang_alone() -> None:
    with fs.FencedStore(hang_seconds=60) as store:
        store.hang(path="/a")
        store.hang(path="/b")
        store.heal(path="/a")
        assert _post(store, generation=1, token=1, path="/a")[0] == 200
        with pytest.raises(TimeoutError):
            _post(store, generation=1, token=1, path="/b", timeout=0.5)
        assert [r.status for r in store.requests(path="/b")] == [None], "still hung, not answered"

