"""Posts Kubernetes Events in order from one sender task, apart from the plans that emit them.
Does I/O (through baton.k8s.events).

A plan (and the next pass of its runtime) never waits on an event's round trip. Measured on a
handoff's critical path: TransitionStarted sat between the label flip and the Terminating write.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from baton import metrics
from baton.k8s import client, events

log = logging.getLogger("baton.execute")

EVENT_BACKLOG = 1000  # events waiting to be posted; past it new ones are dropped (counted)


def _where(event: dict[str, Any]) -> dict[str, str]:
    return {"runtime": f"{event['namespace']}/{event['runtime']}"}


class EventSender:
    def __init__(self) -> None:
        self._backlog: collections.deque[dict[str, Any]] = collections.deque()
        self._sender: asyncio.Task[None] | None = None
        # Repeats of a posted event patch its count (client-go's correlation), per sender.
        self._correlator = events.Correlator()

    def post(self, **event: Any) -> None:
        if len(self._backlog) >= EVENT_BACKLOG:
            metrics.EVENTS_DROPPED.inc()
            log.warning("event %s for %s/%s dropped: %d events wait to be posted", event["reason"],
                        event["namespace"], event["runtime"], len(self._backlog), extra=_where(event))
            return
        self._backlog.append(event)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send(), name="post events")

    def sending(self) -> bool:
        """Whether the sender task is still posting."""
        return self._sender is not None and not self._sender.done()

    async def _send(self) -> None:
        while self._backlog:
            event = self._backlog.popleft()
            try:
                await events.emit_event(**event, correlator=self._correlator)
            except Exception as exc:  # an event is a notification, never a reason to stop
                log.warning("event %s for %s/%s not posted: %s", event["reason"], event["namespace"],
                            event["runtime"], client.short(exc), extra=_where(event))

    async def flush(self, timeout: float) -> None:
        """Wait (bounded) until the events emitted so far are posted: at shutdown."""
        sender = self._sender
        if sender is not None and not sender.done():
            try:
                await asyncio.wait_for(asyncio.shield(sender), timeout)
            except asyncio.TimeoutError:
                log.warning("%d events not posted within %.0fs", len(self._backlog), timeout)
