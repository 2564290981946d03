"""Issue 43 item 3: `kubectl baton wake NAME` (its rule: pure), `kubectl baton status` showing idle
since and the last wake with its latency, and completion knowing the verb."""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.cli import completion, render, requests
from baton.cli.main import parser
from baton.model import names

NOW = datetime.datetime(2026, 11, 27, 12, 0, 0, tzinfo=datetime.timezone.utc)
IDLE = {"afterSeconds": 600, "wakeSeconds": 30}


def _rt(*, idle: dict[str, Any] | None = IDLE, status: dict[str, Any] | None = None, suspend: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"suspend": suspend, "service": {"gateway": True}}
    if idle is not None:
        spec["idle"] = idle
    return {"metadata": {"name": "search", "namespace": "agents", "resourceVersion": "7"}, "spec": spec,
            "status": status or {}}


def test_wake_writes_the_time_of_the_ask_for_an_idle_runtime() -> None:
    wake = requests.wake_request(_rt(status={"idle": {"since": "2026-11-27T11:00:00Z"}}), now=NOW)
    assert wake.value == "2026-11-27T12:00:00.000Z"
    assert "within 30s" in wake.message
    assert wake.as_data(_rt()) == {"kind": "ToolRuntime", "namespace": "agents", "name": "search", "verb": "wake",
                                   "annotations": {names.ANN_WAKE: "2026-11-27T12:00:00.000Z"}, "changed": True,
                                   "message": wake.message}


def test_wake_is_never_older_than_the_idle_it_ends() -> None:
    """This machine's clock behind the operator's: the ask is still after status.idle.since."""
    wake = requests.wake_request(_rt(status={"idle": {"since": "2026-11-27T12:05:00Z"}}), now=NOW)
    assert wake.value == "2026-11-27T12:05:00.001Z"


def test_wake_refuses_a_runtime_without_spec_idle_and_a_suspended_one() -> None:
    with pytest.raises(requests.Refused, match="has no spec.idle: it is never idled"):
        requests.wake_request(_rt(idle=None), now=NOW)
    with pytest.raises(requests.Refused, match="is suspended, not idle"):
        requests.wake_request(_rt(suspend=True, status={"idle": {"since": "2026-11-27T11:00:00Z"}}), now=NOW)
    # Serving: nothing to wake, nothing written.
    wake = requests.wake_request(_rt(status={"current": {"generation": 3}}), now=NOW)
    assert wake.value == "" and "is not idle" in wake.message


def test_status_shows_idle_since_and_the_last_wake_with_its_latency() -> None:
    rt = _rt(status={"idle": {"since": "2026-11-27T11:55:00Z", "lastWake": {
        "requestedAt": "2026-11-27T11:00:00Z", "readyAt": "2026-11-27T11:00:03Z", "seconds": 3.25, "outcome": "Woken"}}})
    text = render.status_text(rt, now=NOW)
    assert "  idle: since 2026-11-27T11:55:00Z (5m ago): no pod; its next call wakes it" in text
    assert "  last wake: requested 2026-11-27T11:00:00Z (60m ago), ready 2026-11-27T11:00:03Z in 3.2s (Woken)" in text
    failed = _rt(status={"idle": {"since": "2026-11-27T11:55:00Z", "lastWake": {
        "requestedAt": "2026-11-27T11:54:00Z", "seconds": 30, "outcome": "Failed",
        "message": "not Ready within 30s (spec.idle.wakeSeconds): image pull back-off"}}})
    text = render.status_text(failed, now=NOW)
    assert "in 30.0s (Failed): not Ready within 30s (spec.idle.wakeSeconds): image pull back-off" in text
    serving = render.status_text(_rt(status={"idle": {"lastWake": {"requestedAt": "2026-11-27T11:59:00Z"}}}), now=NOW)
    assert "  idle: no (idled after 600s without a call that counts" in serving
    assert "(under way)" in serving
    assert "idle" not in render.status_text(_rt(idle=None), now=NOW), "no spec.idle: no idle line"


def test_the_wake_verb_parses_and_completes() -> None:
    assert vars(parser().parse_args(["wake", "search", "-n", "agents", "-o", "json"])) == {
        "verb": "wake", "name": "search", "namespace": "agents", "output": "json"}
    script = completion.script(parser(), shell="bash")
    assert "wake" in script.split('compgen -W "', 1)[1].split('"', 1)[0].split()
    assert "    wake) flags='" in script and "named=1" in script.split("    wake)", 1)[1].split("\n", 1)[0]
