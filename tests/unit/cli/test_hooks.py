"""`kubectl baton retry` and the hook lines of `kubectl baton status` (issue 45), pure: the rules
read the ToolRuntime as the API server returns it (plain dicts, docs/hooks.md's status fields)."""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.cli import render, requests

NOW = datetime.datetime(2026, 12, 6, 12, 0, 10, tzinfo=datetime.timezone.utc)


def _rt(*, conditions: list[dict[str, Any]] | None = None, hook: dict[str, Any] | None = None,
        history: list[dict[str, Any]] | None = None, current: dict[str, Any] | None = None) -> dict[str, Any]:
    transition: dict[str, Any] = {"kind": "Handoff", "trigger": "TemplateChanged", "from": 7, "to": 8,
                                  "step": "CleanupFailed", "startedAt": "2026-12-06T11:59:00Z"}
    if hook is not None:
        transition["hook"] = hook
    status: dict[str, Any] = {"conditions": conditions or [], "transition": transition, "history": history or [],
                              "current": current or {"generation": 7, "pod": "search", "uid": "u7"}}
    return {"metadata": {"namespace": "agents", "name": "search"}, "spec": {}, "status": status}


def _cond(kind: str, value: str, reason: str) -> dict[str, Any]:
    return {"type": kind, "status": value, "reason": reason, "message": "m"}


FAILED_PRE = {"hook": "preRetire", "generation": 7, "startedAt": "2026-12-06T12:00:00Z", "attempts": 2,
              "outcome": "Failed", "message": "HTTP 500: vendor down"}


def test_retry_names_the_generation_whose_pre_retire_hook_failed() -> None:
    rt = _rt(conditions=[_cond("CleanupFailed", "True", "HookFailed")], hook=FAILED_PRE)
    req = requests.retry_hook_request(rt)
    assert (req.annotation, req.generation) == ("baton.dev/retry-hook", 7)
    assert req.message == ("toolruntime/search: retry of the preRetire hook of generation 7 requested "
                           "(it failed: it answered HTTP 500: vendor down)")
    assert req.as_data(rt, verb="retry")["annotations"] == {"baton.dev/retry-hook": "7"}


def test_retry_names_the_new_generation_whose_post_ready_hook_failed() -> None:
    hook = {"hook": "postReady", "generation": 8, "startedAt": "2026-12-06T12:00:00Z", "outcome": "Failed"}
    rt = _rt(conditions=[_cond("CleanupFailed", "False", "Clean"), _cond("Degraded", "True", "HookFailed")], hook=hook)
    req = requests.retry_hook_request(rt)
    assert (req.generation, req.message) == (8, "toolruntime/search: retry of the postReady hook of generation 8 "
                                                "requested (it failed)")


@pytest.mark.parametrize("conditions, hook, why", [
    ([], None, "no hook failed (CleanupFailed=Unknown (-), Degraded=Unknown (-))"),
    # A cleanup failure that is no hook's: force-recover's business, not retry's.
    ([_cond("CleanupFailed", "True", "PodStuckTerminating")], None,
     "no hook failed (CleanupFailed=True (PodStuckTerminating), Degraded=Unknown (-))"),
    # Retried already: the run is under way again.
    ([_cond("CleanupFailed", "False", "HookRetried")], {**FAILED_PRE, "outcome": None, "attempts": 3},
     "its preRetire hook of generation 7 is running (attempt 3), not failed"),
    # A failed Ignore hook holds nothing (no HookFailed condition): nothing to retry.
    ([_cond("Degraded", "False", "AsExpected")], {**FAILED_PRE, "outcome": "Ignored"},
     "no hook failed (CleanupFailed=Unknown (-), Degraded=False (AsExpected))"),
    # The condition without the run naming the same hook: the generation cannot be read, so refused.
    ([_cond("Degraded", "True", "HookFailed")], FAILED_PRE,
     "no hook failed (CleanupFailed=Unknown (-), Degraded=True (HookFailed))"),
])
def test_retry_is_refused_when_no_hook_failed(conditions: list[dict[str, Any]], hook: dict[str, Any] | None,
                                              why: str) -> None:
    with pytest.raises(requests.Refused) as err:
        requests.retry_hook_request(_rt(conditions=conditions, hook=hook))
    assert str(err.value) == f"toolruntime 'search' has no failed hook to retry: {why}"


def test_status_shows_the_failed_hook_and_how_to_release_it() -> None:
    rt = _rt(conditions=[_cond("CleanupFailed", "True", "HookFailed")], hook=FAILED_PRE)
    text = render.status_text(rt, now=NOW)
    assert ("    hook: preRetire of generation 7: Failed (attempt 2): HTTP 500: vendor down; held: "
            "`kubectl baton retry search` runs it again, `kubectl baton force-recover search` retires without it"
            ) in text.splitlines()


def test_status_shows_a_hook_in_progress() -> None:
    hook = {"hook": "postReady", "generation": 8, "startedAt": "2026-12-06T12:00:00Z", "attempts": 1}
    text = render.status_text(_rt(hook=hook), now=NOW)
    assert "    hook: postReady of generation 8: running since 2026-12-06T12:00:00Z (10s ago) (attempt 1)" in text


def test_status_shows_the_hooks_of_the_last_retired_and_the_current_generation() -> None:
    history = [
        {"generation": 6, "outcome": "Retired", "hooks": [{"hook": "preRetire", "outcome": "Failed", "seconds": 9}]},
        {"generation": 7, "outcome": "Retired", "hooks": [
            {"hook": "postReady", "outcome": "Ignored", "seconds": 1.25, "attempts": 2, "message": "HTTP 500"},
            {"hook": "preRetire", "outcome": "ForceRecovered", "seconds": 30.0, "attempts": 1}]},
    ]
    current = {"generation": 8, "pod": "search", "uid": "u8",
               "hooks": [{"hook": "postReady", "outcome": "Succeeded", "seconds": 0.4}]}
    lines = render.status_text(_rt(history=history, current=current), now=NOW).splitlines()
    assert ("  hooks of generation 7 (last retired): postReady Ignored in 1.2s (2 attempts): HTTP 500; "
            "preRetire ForceRecovered in 30.0s") in lines
    assert "  hooks of generation 8 (current): postReady Succeeded in 0.4s" in lines
    assert not any("generation 6" in line for line in lines), "only the last retired entry's"


def test_status_without_hooks_says_nothing_of_them() -> None:
    rt = _rt(history=[{"generation": 6, "outcome": "Retired", "hooks": "junk"}])
    assert "hook" not in render.status_text(rt, now=NOW)
