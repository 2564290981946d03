"""A call that asks for progress gets it on its own POST's stream, whatever else the client accepts.

Found on kind (tests/e2e/test_gateway_mcp.py, server-everything's long-running operation across a
handoff): the SDK clients send `Accept: application/json, text/event-stream`; the bridge answered
such a POST as JSON and sent the call's progress to the session's GET stream, which the gateway
ends at the seal (a quiet stream), so a call draining across a handoff lost all its progress.
"""

from __future__ import annotations

import pytest

from .conftest import BridgeFactory

pytestmark = pytest.mark.unit


def test_progress_of_a_call_goes_on_its_post_stream_when_the_client_accepts_both(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    session = bridge.initialize()  # no GET stream opened: the progress has only the POST to go to
    answer = bridge.call(session, 1, "slow", {"seconds": 0.2, "who": "a"}, meta={"progressToken": "tok"},
                         accept="application/json, text/event-stream")
    assert answer.status == 200, answer.body
    progress = [m for m in answer.messages if m.get("method") == "notifications/progress"]
    assert [p["params"]["progressToken"] for p in progress] == ["tok"], answer.messages
    assert answer.messages[-1]["id"] == 1 and "result" in answer.messages[-1]


def test_a_call_without_a_progress_token_is_still_answered_as_json(bridges: BridgeFactory) -> None:
    bridge = bridges.start()
    session = bridge.initialize()
    answer = bridge.call(session, 1, "echo", {"n": 1}, accept="application/json, text/event-stream")
    assert answer.status == 200 and answer.headers.get("content-type", "").startswith("application/json"), answer
