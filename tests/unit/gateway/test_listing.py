"""Stateless (2026-07-28) clients at a handoff (baton.gateway.listing; issue 42 item 3): a
`subscriptions/listen` request told from its body, the frame that ends its stream the
specification's way, where a relayed SSE stream is between two events, `ttlMs` capped in JSON
and SSE answers with every other byte unchanged, and when it is capped. Also the seal's ending of
listen streams (baton.gateway.streams: `at_seal`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from baton.gateway import listing
from baton.gateway import streams as streams_mod

CAP = listing.TRANSITION_TTL_MS


def listen(rid: Any = "listen-1", **extra: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen",
                       "params": {"notifications": {"toolsListChanged": True}}, **extra}).encode()


@pytest.mark.parametrize("body,expected", [
    (listen(), "listen-1"),
    (listen(7), 7),
    (listen(0), 0),
    (b' {"method": "subscriptions/listen", "jsonrpc": "2.0", "id": "x"}', "x"),
    (listen(None), None),  # no id: nothing to answer
    (listen(True), None),
    (listen(1.5), None),
    (json.dumps({"jsonrpc": "2.0", "method": "subscriptions/listen"}).encode(), None),  # a notification
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(), None),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "subscriptions/listen"}}).encode(), None),
    (json.dumps({"id": 1, "method": "subscriptions/listen"}).encode(), None),  # not JSON-RPC 2.0
    (b"[" + listen() + b"]", None),  # a batch is no listen
    (b'{"method": "subscriptions/listen", broken', None),
    (b"", None),
    (b"\xff\xfe subscriptions/listen", None),
])
def test_a_listen_request_is_told_from_its_body(body: bytes, expected: Any) -> None:
    assert listing.listen_id(body) == expected


@pytest.mark.parametrize("rid", ["listen-3", 42])
def test_the_end_frame_is_the_listen_requests_result_stamped_with_its_subscription_id(rid: Any) -> None:
    frame = listing.listen_end_frame(rid)
    assert frame.startswith(b"event: message\r\ndata: ") and frame.endswith(b"\r\n\r\n")
    assert frame.count(b"\r\n\r\n") == 1  # one event
    doc = json.loads(frame[len(b"event: message\r\ndata: "):-4])
    # What the SDK's ListenHandler returns at its graceful close (SubscriptionsListenResult).
    assert doc == {"jsonrpc": "2.0", "id": rid,
                   "result": {"_meta": {"io.modelcontextprotocol/subscriptionId": rid}, "resultType": "complete"}}


@pytest.mark.parametrize("stream,at_end", [
    (b"", True),
    (b"event: message\r\ndata: {}\r\n\r\n", True),
    (b"event: message\r\ndata: {}\r\n", False),
    (b"data: {}\n\n", True),
    (b"data: {}\n", False),
    (b"data: {}\r\r", True),
    (b"data: {}\r", False),
    (b": ping\r\n\r\n", True),
    (b"data: {}\n\ndata: {", False),
    (b"data: {}\n\n\n\n", True),
    (b"data: {}\r\n\r\n\r\n", True),
])
def test_the_cursor_knows_whether_the_stream_is_between_events(stream: bytes, at_end: bool) -> None:
    for cut in range(len(stream) + 1):  # however the pod's chunks fall
        cursor = listing.SseCursor()
        cursor.feed(stream[:cut])
        cursor.feed(stream[cut:])
        assert cursor.at_boundary is at_end, (stream, cut)


@pytest.mark.parametrize("before,chunk,expected", [
    (b"", b"data: 1\n\n", 0),  # between events already: nothing more to pass on
    (b"data: 1\n\n", b"data: 2\n\n", 0),
    (b"data: 1\n", b"\ndata: 2\n\n", 1),
    (b"data: 1\r\n", b"\r\ndata: 2\r\n\r\n", 2),  # the LF of the CRLF goes too
    (b"data: 1", b"23\n\nevent: x\n", 4),
    (b"data: 1", b"23\n", None),  # still inside the event
    (b"data: 1\r\n", b"\r", 1),
    (b"data: 1\n", b"", None),
])
def test_until_boundary_passes_on_only_the_rest_of_the_event_under_way(before: bytes, chunk: bytes,
                                                                        expected: int | None) -> None:
    cursor = listing.SseCursor()
    cursor.feed(before)
    assert cursor.until_boundary(chunk) == expected
    if expected is not None:
        assert cursor.at_boundary


def result(**fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "result": fields}


TOOLS = [{"name": "t", "inputSchema": {"type": "object", "properties": {"ttlMs": {"type": "integer"}}},
          "description": "a \"ttlMs\": 99999999 in a string"}]


@pytest.mark.parametrize("doc,ttl", [
    (result(ttlMs=3_600_000, cacheScope="private", tools=TOOLS, resultType="complete"), CAP),
    (result(tools=TOOLS, ttlMs=86_400_000), CAP),
    (result(ttlMs=CAP + 1), CAP),
    (result(ttlMs=CAP), CAP),  # at the cap: unchanged
    (result(ttlMs=0), 0),
    (result(ttlMs=1000), 1000),
    (result(ttlMs=6000.5), CAP),
    (result(ttlMs=True), True),  # not a number
    (result(ttlMs="600000"), "600000"),
])
def test_ttl_is_capped_in_the_result_alone_and_every_other_byte_stays(doc: dict[str, Any], ttl: Any) -> None:
    for dumps in (lambda d: json.dumps(d), lambda d: json.dumps(d, separators=(",", ":")),
                  lambda d: json.dumps(d, indent=2)):
        body = dumps(doc).encode()
        out = listing.cap_ttl(body, cap_ms=CAP)
        assert len(out) == len(body)  # a Content-Length stands
        got = json.loads(out)
        assert got["result"]["ttlMs"] == ttl
        assert got == {**doc, "result": {**doc["result"], "ttlMs": ttl}}  # nothing else changed
        changed = [i for i, (a, b) in enumerate(zip(body, out)) if a != b]
        if changed:  # only the number's own bytes
            start = body.index(b'"ttlMs"', body.index(b'"result"'))
            if b'"tools"' in body and body.index(b'"tools"') < start:
                start = body.index(b'"ttlMs"', body.rindex(b"]"))  # the one after the tools
            assert start < changed[0] and changed[-1] < start + 30


@pytest.mark.parametrize("body", [
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"ttlMs": 999999}}).encode(),  # a request
    json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": TOOLS}}).encode(),  # nested only
    json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m", "data": {"ttlMs": 999999}}}).encode(),
    json.dumps([{"jsonrpc": "2.0", "id": 1, "result": {"ttlMs": 999999}}]).encode(),  # a batch
    b'{"jsonrpc": "2.0", "id": 1, "result": {"ttlMs": 1e9}}',  # too short to hold the cap's digits
    b'{"jsonrpc": "2.0", "id": 1, "result": {"ttlMs": 99999999',  # cut short
    b'{"result": {"ttlMs": 99999999} garbage',
    b"\xff\xfe\"ttlMs\"",
    b"",
])
def test_anything_else_passes_as_it_is(body: bytes) -> None:
    assert listing.cap_ttl(body, cap_ms=CAP) == body


def test_escaped_keys_and_duplicates_are_read_as_a_json_parser_reads_them() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"result":{"ttl\\u004ds":60000,"ttlMs":70000}}'
    assert json.loads(listing.cap_ttl(body, cap_ms=CAP))["result"] == {"ttlMs": CAP}
    twice = b'{"id":1,"result":{"ttlMs":1},"result":{"ttlMs":80000}}'  # the last "result" is kept
    assert json.loads(listing.cap_ttl(twice, cap_ms=CAP))["result"] == {"ttlMs": CAP}


def sse(*docs: dict[str, Any], eol: bytes = b"\r\n") -> bytes:
    return b"".join(b"event: message" + eol + b"data: " + json.dumps(d).encode() + eol + eol for d in docs)


@pytest.mark.parametrize("eol", [b"\r\n", b"\n", b"\r"])
def test_sse_data_lines_are_capped_however_the_chunks_fall(eol: bytes) -> None:
    notice = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"ttlMs": 999999}}
    stream = b": ping" + eol + eol + sse(notice, result(ttlMs=600_000, tools=TOOLS), eol=eol) + b"id: 9" + eol
    expected = stream.replace(b'"ttlMs": 600000', b'"ttlMs": 5000  ')
    assert expected != stream
    for cut in range(len(stream) + 1):
        relay = listing.SseTtlCap(cap_ms=CAP)
        out = relay.feed(stream[:cut]) + relay.feed(stream[cut:]) + relay.flush()
        assert out == expected, cut


def test_an_sse_line_too_long_to_hold_passes_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "CAP_BUFFER_BYTES", 64)
    long = sse(result(ttlMs=600_000, pad="x" * 200))
    short = sse(result(ttlMs=600_000))
    relay = listing.SseTtlCap(cap_ms=CAP)
    parts = [relay.feed(long[i:i + 50]) for i in range(0, len(long), 50)]
    parts += [relay.feed(short), relay.flush()]
    assert b"".join(parts) == long + short.replace(b"600000", b"5000  ")


def test_a_json_answer_is_held_whole_then_capped_or_passed_when_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps(result(ttlMs=600_000, tools=TOOLS)).encode()
    relay = listing.JsonTtlCap(cap_ms=CAP)
    held = [relay.feed(body[i:i + 7]) for i in range(0, len(body), 7)]
    assert held == [b""] * len(held)
    assert relay.flush() == body.replace(b"600000", b"5000  ")
    monkeypatch.setattr(listing, "CAP_BUFFER_BYTES", 40)
    relay = listing.JsonTtlCap(cap_ms=CAP)
    out = b"".join(relay.feed(body[i:i + 7]) for i in range(0, len(body), 7)) + relay.flush()
    assert out == body


@pytest.mark.parametrize("media,capped", [
    ("application/json", True), ("application/vnd.x+json", True), ("text/event-stream", True),
    ("text/plain", False), ("", False),
])
def test_whole_answers_by_media_type(media: str, capped: bool) -> None:
    body = json.dumps(result(ttlMs=600_000)).encode()
    data = sse(result(ttlMs=600_000)) if media == "text/event-stream" else body
    out = listing.cap_ttl_whole(data, media=media, cap_ms=CAP)
    assert (out != data) is capped and len(out) == len(data)


@pytest.mark.parametrize("headers,media", [
    ([("Content-Type", "text/event-stream")], "text/event-stream"),
    ([("content-type", "Application/JSON; charset=utf-8")], "application/json"),
    ([], ""),
])
def test_media_type(headers: list[tuple[str, str]], media: str) -> None:
    assert listing.media_type(headers) == media


def runtime(*, transition: bool = False, pending: str | None = None, observed: int = 3, generation: int = 3) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": observed, "current": {"generation": 1, "uid": "u1"},
                              "conditions": [{"type": "Ready", "status": "True"}]}
    if transition:
        status["transition"] = {"kind": "Handoff", "fromUid": "u1"}
    if pending is not None:
        status["conditions"].append({"type": "UpdatePending", "status": pending, "reason": "WaitingForReset"})
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize("obj,sealed,capped", [
    (runtime(), False, False),  # steady state
    (runtime(pending="False"), False, False),
    (runtime(pending="True"), False, True),  # a change the handoff policy holds back
    (runtime(transition=True), False, True),  # a handoff under way
    (runtime(observed=2, generation=3), False, True),  # a change not yet acted on
    (runtime(), True, True),  # the answering pod is sealed
    (None, False, False),
    (None, True, True),
    ({"status": {"conditions": ["junk", {"type": "UpdatePending"}]}}, False, False),
])
def test_when_ttl_is_capped(obj: dict[str, Any] | None, sealed: bool, capped: bool) -> None:
    assert listing.ttl_capped(obj, pod_sealed=sealed) is capped


def test_a_listen_stream_ends_at_the_seal_however_recently_it_carried_a_byte() -> None:
    now = [100.0]
    s = streams_mod.Streams(clock=lambda: now[0])
    ended: list[str] = []
    get = s.open("u1", lambda: ended.append("get"))
    lst = s.open("u1", lambda: ended.append("listen"), at_seal=True)
    other = s.open("u2", lambda: ended.append("other"), at_seal=True)
    get.last = lst.last = other.last = now[0]
    assert s.end_idle(sealed=set(), idle_seconds=2.0) == 0  # nothing sealed: nothing ends
    assert s.end_idle(sealed={"u1"}, idle_seconds=2.0) == 1
    assert ended == ["listen"] and lst.ended and not get.ended and not other.ended
    now[0] += 2.0
    assert s.end_idle(sealed={"u1"}, idle_seconds=2.0) == 1  # the quiet GET, once; the listen not again
    assert ended == ["listen", "get"]
