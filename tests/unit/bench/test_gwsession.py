"""The handshake-era MCP client of the gateway benchmark (bench/gwsession.py): the messages, how an
answer is judged, the tool's per-pod sessions, and which calls were re-bound."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gateway, gwsession
from dev import ports, wait

S = gwsession.SessionCall


def test_the_messages_are_the_2025_11_25_handshake_and_a_call() -> None:
    init = json.loads(gwsession.initialize(0))
    assert (init["id"], init["method"], init["params"]["protocolVersion"]) == (0, "initialize", "2025-11-25")
    note = json.loads(gwsession.initialized())
    assert note == {"jsonrpc": "2.0", "method": "notifications/initialized"}  # no id: a notification
    assert json.loads(gwsession.tool_call(7))["method"] == "tools/call"


def test_an_answer_fails_on_a_status_a_json_rpc_error_or_no_json_rpc() -> None:
    ok = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()
    assert gwsession.cause_of_answer(200, None, ok) == ""
    assert gwsession.cause_of_answer(202, None, b"") == ""
    assert gwsession.cause_of_answer(404, "UnknownSession", b"{}") == "HTTP 404 UnknownSession"
    assert gwsession.cause_of_answer(404, None, b"") == "HTTP 404"
    err = json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "before initialization"}}).encode()
    assert gwsession.cause_of_answer(200, None, err) == "JSON-RPC error -32600: before initialization"
    assert gwsession.cause_of_answer(200, None, b"<html>") == "not JSON-RPC"
    assert gwsession.cause_of_answer(200, None, b"[]") == "not JSON-RPC"
    assert gwsession.cause_of_answer(200, None, b'{"jsonrpc": "2.0", "id": 1}') == "not JSON-RPC"


def tool() -> gwsession.SessionTool:
    ids = (f"s{i}" for i in itertools.count(1))
    return gwsession.SessionTool(new_id=lambda: next(ids))


def test_the_tool_keeps_sessions_per_pod_and_only_after_the_handshake() -> None:
    t = tool()
    a = t.post(ip="127.0.100.1", session=None, body=gwsession.initialize(0))
    assert (a.status, a.session) == (200, "s1")
    assert json.loads(a.body)["result"]["protocolVersion"] == "2025-11-25"
    # A call before notifications/initialized: refused inside a 200, as the Python SDK's server does.
    early = t.post(ip="127.0.100.1", session="s1", body=gwsession.tool_call(1))
    assert gwsession.cause_of_answer(early.status, None, early.body).startswith("JSON-RPC error -32600")
    assert t.post(ip="127.0.100.1", session="s1", body=gwsession.initialized()) == gwsession.Answer(202, b"")
    call = t.post(ip="127.0.100.1", session="s1", body=gwsession.tool_call(2))
    assert gwsession.cause_of_answer(call.status, None, call.body) == ""
    # Another pod (another generation) never saw s1: 404, as a handshake-era server answers.
    other = t.post(ip="127.0.100.2", session="s1", body=gwsession.tool_call(3))
    assert other.status == 404 and json.loads(other.body)["error"]["code"] == gwsession.SESSION_NOT_FOUND
    assert t.post(ip="127.0.100.2", session="s1", body=gwsession.initialized()).status == 404
    # No session on a call: 400. Not JSON-RPC: 400.
    assert t.post(ip="127.0.100.1", session=None, body=gwsession.tool_call(4)).status == 400
    assert t.post(ip="127.0.100.1", session="s1", body=b"nope").status == 400
    assert t.counts == {"initialize": 1, "before initialized": 1, "initialized": 1, "call": 1,
                        "unknown session": 2, "no session": 1, "not JSON-RPC": 1}


def test_the_tools_sessions_go_with_its_pod_and_with_a_delete() -> None:
    t = tool()
    t.post(ip="127.0.100.1", session=None, body=gwsession.initialize(0))
    t.post(ip="127.0.100.1", session="s1", body=gwsession.initialized())
    t.forget("127.0.100.1")
    assert t.post(ip="127.0.100.1", session="s1", body=gwsession.tool_call(1)).status == 404
    t.post(ip="127.0.100.1", session=None, body=gwsession.initialize(0))  # s2
    assert t.delete(ip="127.0.100.1", session="s2").status == 200
    assert t.delete(ip="127.0.100.1", session="s2").status == 404
    assert t.delete(ip="127.0.100.1", session=None).status == 400
    assert t.post(ip="127.0.100.1", session="s2", body=gwsession.initialized()).status == 404


def test_the_tool_keeps_a_bounded_number_of_sessions_per_pod() -> None:
    t = tool()
    for _ in range(gwsession.SESSIONS_PER_POD + 5):
        t.post(ip="127.0.100.1", session=None, body=gwsession.initialize(0))
    assert len(t.sessions["127.0.100.1"]) == gwsession.SESSIONS_PER_POD
    assert t.post(ip="127.0.100.1", session="s1", body=gwsession.initialized()).status == 404  # the oldest went


def test_the_re_bound_calls_are_the_first_answered_by_each_new_generation() -> None:
    calls = [S(0.0, 0.001, "", 1), S(0.1, 0.001, "", 1),
             S(0.2, 0.008, "", 2), S(0.3, 0.001, "", 2),
             S(0.4, 0.5, "HTTP 404 UnknownSession", None), S(0.5, 0.5, "timeout", 3),
             S(0.6, 0.009, "", 3), S(0.7, 0.002, "", 3)]
    # A failed call never counts, even with a generation on its answer.
    assert gwsession.rebound(calls, first_generation=1) == [2, 6]
    # Generation 1 was not the initialize's: the first call is re-bound too.
    assert gwsession.rebound(calls, first_generation=None) == [0, 2, 6]
    a = gwsession.added(calls, first_generation=1)
    assert a is not None and (a.rebound, a.ordinary) == (2, 4)
    assert a.rebound_p50 == pytest.approx(0.0085)
    assert a.ordinary_p50 == pytest.approx(0.001)
    assert a.added_p50 == pytest.approx(0.0075)
    assert a.added_p95 == pytest.approx(a.rebound_p95 - a.ordinary_p95)


def test_no_comparison_without_a_re_bound_or_an_ordinary_call() -> None:
    assert gwsession.added([S(0.0, 0.001, "", 1)], first_generation=1) is None
    assert gwsession.added([S(0.0, 0.001, "", 2)], first_generation=1) is None
    assert gwsession.added([S(0.0, 0.001, "HTTP 404", None)] * 3, first_generation=1) is None


def test_the_tool_host_in_session_mode_answers_the_client_and_forgets_a_stopped_pod(tmp_path: Path) -> None:
    """The real pieces on loopback: the tool host process (bench.gateway --tool-host, session mode)
    and the bench's SessionClient, no gateway between them. A pod's tool stopped and started again
    on the same IP is another process: the session it issued is unknown there (404)."""
    root = Path(gateway.__file__).resolve().parents[1]
    port, stats = ports.free_port(), tmp_path / "sessions.json"
    host = subprocess.Popen([sys.executable, "-m", "bench.gateway", "--tool-host", str(port), "60", "--tool-sessions", str(stats)],
                            cwd=root, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert host.stdin is not None

    def send(line: str) -> None:
        assert host.stdin is not None
        host.stdin.write(line.encode() + b"\n")
        host.stdin.flush()

    def listening() -> bool:
        return gateway.post("127.0.0.1", port, "tool", gwsession.tool_call(0), 2)[0] == 400  # no session: 400

    def refused() -> bool:
        try:
            listening()
        except OSError:
            return True
        return False

    try:
        send("start 127.0.0.1")
        wait.wait_for(listening, timeout=30, what="the session tool listening", interval=0.1, ignore=(OSError,))
        client = gateway.SessionClient(ip="127.0.0.1", port=port, host="tool", timeout=5)
        client.open()
        assert client.session and client.first_generation is None  # no gateway: no Baton-Generation
        assert [client.call(i).cause for i in range(3)] == ["", "", ""]
        send("stop 127.0.0.1")
        wait.wait_for(refused, timeout=30, what="the tool stopped", interval=0.1)
        send("start 127.0.0.1")
        wait.wait_for(listening, timeout=30, what="the tool listening again", interval=0.1, ignore=(OSError,))
        assert client.call(3).cause == "HTTP 404"
        assert client.close() == "HTTP 404"
    finally:
        host.stdin.close()
        try:
            host.wait(20)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait(10)
    seen = json.loads(stats.read_text())
    assert seen["initialize"] == 1 and seen["initialized"] == 1 and seen["call"] == 3
    assert seen["unknown session"] == 1 and seen["delete unknown"] == 1
