"""A failed postReady hook (Degraded=True reason HookFailed) is the refusal a held call gets at its
admission bound (baton.gateway.route.hook_failed; the proxy's past-admission answer)."""

from __future__ import annotations

from typing import Any

from baton.gateway import route


def runtime(status: str, reason: str, message: str = "postReady hook of generation 1 failed") -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Degraded", "status": status, "reason": reason, "message": message}]}}


def test_degraded_hook_failed_names_the_hook() -> None:
    assert route.hook_failed(runtime("True", "HookFailed")) == "postReady hook of generation 1 failed"
    assert route.Reason.HOOK_FAILED.value == "HookFailed" and route.status_of(route.Reason.HOOK_FAILED) == 503


def test_anything_else_is_not_a_hook_failure() -> None:
    assert route.hook_failed(runtime("False", "HookFailed")) is None
    assert route.hook_failed(runtime("True", "ConnectTimeout")) is None
    assert route.hook_failed({}) is None and route.hook_failed(None) is None
