"""The event sender: events are posted in order by one task, a failed post never stops the
rest, the backlog is bounded (past it new events are dropped and counted), and flush waits for
what was emitted. Faked at Baton's own adapter boundary (baton.k8s.events)."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from baton import metrics
from baton.execute import events as events_mod
from baton.k8s import events


def _event(reason: str) -> dict[str, Any]:
    return {"namespace": "agents", "runtime": "search-mcp", "runtime_uid": "rt-uid-1", "type_": "Normal",
            "reason": reason, "message": reason, "identity": "baton-a"}


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []

    async def emit_event(**event: Any) -> None:
        await asyncio.sleep(0)  # a round trip: the plan that emitted it goes on meanwhile
        if event["reason"] == "Broken":
            raise ConnectionError("reset")
        sent.append(event["reason"])

    monkeypatch.setattr(events, "emit_event", emit_event)
    return sent


def test_events_are_posted_in_order_apart_from_the_plan_and_a_failed_one_does_not_stop_the_rest(
        posted: list[str]) -> None:
    async def run() -> bool:
        sender = events_mod.EventSender()
        for reason in ("TransitionStarted", "Broken", "Draining", "Terminating"):
            sender.post(**_event(reason))
        assert posted == []  # posting does not wait for a round trip
        busy = sender.sending()
        await sender.flush(timeout=5.0)
        assert not sender.sending()
        return busy

    assert asyncio.run(run())
    assert posted == ["TransitionStarted", "Draining", "Terminating"]


def test_past_the_backlog_new_events_are_dropped_and_counted(posted: list[str]) -> None:
    before = metrics.REGISTRY.get_sample_value("baton_events_dropped_total") or 0.0

    async def run() -> None:
        sender = events_mod.EventSender()
        for i in range(events_mod.EVENT_BACKLOG + 3):
            sender.post(**_event(f"E{i}"))
        await sender.flush(timeout=30.0)

    asyncio.run(run())
    assert len(posted) == events_mod.EVENT_BACKLOG
    assert posted[0] == "E0" and posted[-1] == f"E{events_mod.EVENT_BACKLOG - 1}"
    assert (metrics.REGISTRY.get_sample_value("baton_events_dropped_total") or 0.0) - before == 3


def test_flush_with_nothing_posted_returns_at_once(posted: list[str]) -> None:
    sender = events_mod.EventSender()
    assert not sender.sending()
    asyncio.run(sender.flush(timeout=0.0))
    assert posted == []
