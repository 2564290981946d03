"""baton-bridge as a real process on 127.0.0.1 with a real stdio child (stdio_child.py)."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import time
from typing import Any

import pytest

from dev import wait

from .conftest import Answer, BridgeFactory, tool_text

pytestmark = pytest.mark.unit


def received(bridge_events: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    return [e for e in bridge_events if e["event"] == "received" and e["method"] == method]


def test_the_bridge_initializes_the_child_once_and_answers_clients_from_it(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    first, second = bridge.initialize(), bridge.initialize(version="2025-03-26")
    assert first != second
    events = bridge.child_events()
    inits = received(events, "initialize")
    assert len(inits) == 1
    assert inits[0]["params"]["protocolVersion"] == "2025-11-25"
    assert inits[0]["params"]["clientInfo"]["name"] == "baton-bridge"
    assert inits[0]["params"]["capabilities"] == {}
    assert len(received(events, "notifications/initialized")) == 1
    assert bridge.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status == 400  # no session
    assert bridge.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session="nope").status == 404


def test_two_clients_at_once_never_see_each_others_answers(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    sessions = {"a": bridge.initialize(), "b": bridge.initialize()}

    def client(name: str) -> list[tuple[int, dict[str, Any]]]:
        out = []
        for request_id in range(1, 21):  # both clients use the same ids
            answer = bridge.call(sessions[name], request_id, "echo", {"client": name, "n": request_id})
            assert answer.status == 200, answer.body
            out.append((answer.messages[-1]["id"], json.loads(tool_text(answer))))
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(sessions, pool.map(client, sessions)))
    child_ids = set()
    for name, answers in results.items():
        for n, (answer_id, echoed) in enumerate(answers, start=1):
            assert answer_id == n
            assert echoed["arguments"] == {"client": name, "n": n}
            child_ids.add(echoed["received_id"])
    # Remapped: the child saw 40 distinct ids for the clients' 20 shared ones.
    assert len(child_ids) == 40


def test_cancellation_and_progress_reach_the_right_call(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    a, b = bridge.initialize(), bridge.initialize()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        # SSE only: the progress for a's call comes on its own POST stream.
        cancelled = pool.submit(bridge.call, a, 5, "slow", {"seconds": 30, "who": "a"}, meta={"progressToken": "tok-a"},
                                accept="text/event-stream")
        kept = pool.submit(bridge.call, b, 5, "slow", {"seconds": 1.5, "who": "b"})
        calls = wait.wait_for(lambda: len(slow_calls(bridge)) == 2 and slow_calls(bridge), timeout=10, interval=0.05,
                              what="both slow calls at the child")
        assert bridge.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "test"}},
                           session=a).status == 202
        cancelled_answer: Answer = cancelled.result(timeout=10)
        kept_answer: Answer = kept.result(timeout=10)
    child_id_a = calls["a"]["id"]
    child_id_b = calls["b"]["id"]
    assert child_id_a != 5 and child_id_a != child_id_b
    cancels = received(bridge.child_events(), "notifications/cancelled")
    assert [c["params"]["requestId"] for c in cancels] == [child_id_a]
    assert [e["id"] for e in bridge.child_events() if e["event"] == "slow-cancelled"] == [child_id_a]
    # a: its progress with its own token, then the cancellation's error, on its stream.
    progress = [m for m in cancelled_answer.messages if m.get("method") == "notifications/progress"]
    assert [p["params"]["progressToken"] for p in progress] == ["tok-a"]
    assert calls["a"]["params"]["_meta"]["progressToken"] != "tok-a"
    assert cancelled_answer.messages[-1]["id"] == 5 and cancelled_answer.messages[-1]["error"]["code"] == -32800
    assert kept_answer.messages[-1]["id"] == 5 and json.loads(tool_text(kept_answer))["received_id"] == child_id_b


def slow_calls(bridge: Any) -> dict[str, dict[str, Any]]:
    return {e["params"]["arguments"]["who"]: e for e in received(bridge.child_events(), "tools/call")
            if e["params"]["name"] == "slow"}


def test_sigterm_waits_for_the_call_in_flight_then_eof_before_any_signal(bridges: BridgeFactory) -> None:
    bridge = bridges.start("--drain-seconds", "20", "--eof-seconds", "5")
    session = bridge.initialize()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        in_flight = pool.submit(bridge.call, session, 1, "slow", {"seconds": 2, "who": "a"})
        wait.wait_for(lambda: slow_calls(bridge), timeout=10, interval=0.05, what="the call at the child")
        assert bridge.get("/baton/drain") == (503, b'{"inflight":1}\n')
        bridge.process.send_signal(signal.SIGTERM)
        wait.wait_for(lambda: bridge.get("/baton/ready")[0] == 503, timeout=5, interval=0.05, what="ready 503 once draining")
        refused = bridge.call(session, 2, "echo")
        assert refused.status == 503, refused.body
        answer = in_flight.result(timeout=20)
    assert answer.status == 200 and answer.messages[-1]["id"] == 1 and "result" in answer.messages[-1]
    assert bridge.wait_exit(timeout=20) == 0
    order = [e["event"] for e in bridge.child_events() if e["event"] in ("slow-answered", "stdin-eof", "sigterm")]
    assert order == ["slow-answered", "stdin-eof"]
    steps = [r["msg"] for r in bridge.log_records()]
    assert "drain: no call in flight" in steps and "closed the child's stdin (EOF)" in steps
    assert not any("SIGTERM" in s or "SIGKILL" in s for s in steps)
    assert bridge.termination_log.read_text().startswith("exit status 0; stderr: ")


def test_a_child_ignoring_eof_is_sigtermed_then_sigkilled_at_the_bounds(bridges: BridgeFactory) -> None:
    bridge = bridges.start("--drain-seconds", "0.5", "--eof-seconds", "0.5", "--term-seconds", "0.5", mode="ignore-eof")
    session = bridge.initialize()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        cut = pool.submit(bridge.call, session, "long-one", "slow", {"seconds": 60, "who": "a"})
        wait.wait_for(lambda: slow_calls(bridge), timeout=10, interval=0.05, what="the call at the child")
        t0 = time.monotonic()
        bridge.process.send_signal(signal.SIGTERM)
        assert bridge.wait_exit(timeout=20) == 128 + signal.SIGKILL
        elapsed = time.monotonic() - t0
        answer = cut.result(timeout=10)
    assert answer.messages[-1]["id"] == "long-one" and answer.messages[-1]["error"]["code"] == -32000
    assert elapsed >= 1.5  # drain, EOF and TERM bounds, each 0.5 s
    events = [e["event"] for e in bridge.child_events() if e["event"] in ("stdin-eof", "sigterm")]
    assert events == ["stdin-eof", "sigterm"]
    records = bridge.log_records()
    cut_record = next(r for r in records if r["msg"].startswith("drain: --drain-seconds passed"))
    assert [(c["method"], c["clientId"]) for c in cut_record["cut"]] == [("tools/call", "long-one")]
    msgs = [r["msg"] for r in records]
    assert msgs.index("closed the child's stdin (EOF)") < msgs.index("the child did not exit on EOF: sent SIGTERM") \
        < msgs.index("the child did not exit on SIGTERM: sent SIGKILL")
    assert bridge.termination_log.read_text().startswith('drain cut 1 call(s) [tools/call:"long-one"]; exit status 137')


def test_a_child_that_dies_leaves_its_status_and_stderr_tail(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    session = bridge.initialize()
    answer = bridge.call(session, 1, "die", {"status": 3, "lines": 2000})
    assert answer.messages[-1]["error"]["code"] == -32000
    assert bridge.wait_exit(timeout=10) == 3
    message = bridge.termination_log.read_text()
    assert message.startswith("exit status 3; stderr: ")
    assert message.endswith("dying line 1999\nthe last words")
    assert len(message.encode()) <= 4096
    # Passed through to the bridge's stderr too.
    assert "the last words" in bridge.log()


def test_an_overlong_line_and_a_non_json_line_are_dropped_and_the_stream_goes_on(bridges: BridgeFactory) -> None:
    bridge = bridges.start("--max-line-bytes", "2048")
    session = bridge.initialize()
    conn = bridge.connection(timeout=10)
    conn.request("GET", "/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": session})
    stream = conn.getresponse()
    assert stream.status == 200
    try:
        assert tool_text(bridge.call(session, 1, "long_line", {"bytes": 5000})) == "after the long line"
        assert tool_text(bridge.call(session, 2, "not_json")) == "after the non-JSON line"
        assert tool_text(bridge.call(session, 3, "notify")) == "notified"
        # The first thing on the GET stream is the list_changed: the long line was not forwarded.
        first = ""
        for _ in range(10):
            line = stream.fp.readline().decode()
            if line.startswith("data:"):
                first = line
                break
        assert json.loads(first[len("data:"):])["method"] == "notifications/tools/list_changed"
    finally:
        conn.close()
    msgs = [r for r in bridge.log_records()]
    long_line = [r for r in msgs if "longer than --max-line-bytes" in r["msg"]]
    assert len(long_line) == 1 and long_line[0]["bytes"] > 5000
    assert any("not a JSON-RPC message" in r["msg"] and r["line"] == "this is not JSON at all" for r in msgs)


def test_a_client_slower_than_the_child_has_its_stream_ended_not_the_bridges_memory_grown(bridges: BridgeFactory) -> None:
    bridge = bridges.start("--client-buffer-bytes", "65536")
    session = bridge.initialize()
    conn = bridge.connection(timeout=30)
    conn.request("GET", "/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": session})
    stream = conn.getresponse()  # never read: the client that does not keep up
    try:
        # 400 x 64 KiB = 25 MiB, past loopback's socket buffers and the 64 KiB bound.
        assert tool_text(bridge.call(session, 1, "flood", {"count": 400, "bytes": 65536})) == "flooded"
        wait.wait_for(lambda: any("past --client-buffer-bytes" in r["msg"] for r in bridge.log_records()),
                      timeout=10, interval=0.05, what="the slow stream ended")
        rss_kib = int(next(line.split()[1] for line in open(f"/proc/{bridge.process.pid}/status") if line.startswith("VmRSS:")))
        assert rss_kib < 64 * 1024, rss_kib
        # The bridge still serves.
        assert tool_text(bridge.call(session, 2, "echo")).startswith("{")
    finally:
        stream.close()
        conn.close()


def test_a_child_that_never_answers_initialize(bridges: BridgeFactory) -> None:
    bridge = bridges.start("--init-seconds", "1", "--eof-seconds", "0.5", "--term-seconds", "0.5", mode="no-init", wait_ready=False)
    assert bridge.get("/baton/ready")[0] == 503
    assert bridge.wait_exit(timeout=15) == 1
    assert bridge.termination_log.read_text().startswith("the child did not answer initialize within 1s; stderr: ")
    assert [e["event"] for e in bridge.child_events() if e["event"] == "stdin-eof"] == ["stdin-eof"]


def test_a_server_to_client_request_is_answered_with_an_error(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    session = bridge.initialize()
    answer = json.loads(tool_text(bridge.call(session, 1, "sample")))
    assert answer["id"] == "child-req-1" and answer["error"]["code"] == -32601
    assert any(r["msg"].startswith("the child sent a server-to-client request") for r in bridge.log_records())


def test_delete_ends_a_session(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    session = bridge.initialize()
    conn = bridge.connection(timeout=5)
    conn.request("DELETE", "/mcp", headers={"Mcp-Session-Id": session})
    assert conn.getresponse().status == 200
    conn.close()
    assert bridge.call(session, 1, "echo").status == 404
