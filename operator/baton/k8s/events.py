"""Kubernetes Events about a ToolRuntime (kubectl describe shows them). Does I/O.

core/v1 Events with `eventTime` (MicroTime, microseconds: no ties under `--sort-by`), and repeats
aggregated as client-go's correlator does (tools/events, record.EventCorrelator): an event with
the same involved object, type, reason and message as one posted less than SERIES_WINDOW_SECONDS
ago PATCHes that Event (`count`, `series.count`, `series.lastObservedTime`, `lastTimestamp`)
instead of creating another. The Correlator is the bounded cache of those; one per sender (the
operator's events go out from one task, baton.execute.events).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import uuid

from baton.k8s import api, client
from baton.model import names

# The API rules this module needs (apiGroup, resource, verbs): the chart grants exactly the union
# of these (tests/integration/test_chart_render.py checks both ways, and that the calls below fit).
RBAC: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "events", ("create", "patch")),)

# client-go's tools/events finishes a series 6 minutes after it was last seen; its cache of
# correlated events (record.EventCorrelator) holds 4096 keys.
SERIES_WINDOW_SECONDS = 360.0
CACHE_SIZE = 4096
MESSAGE_LIMIT = 1000
# core/v1 requires an action once eventTime is set: what Baton was doing when it reported this.
ACTION = "Reconcile"


@dataclasses.dataclass(frozen=True)
class Key:
    """What makes two events the same one (client-go's getEventKey, less the source host)."""

    namespace: str
    runtime: str
    runtime_uid: str
    type_: str
    reason: str
    message: str


@dataclasses.dataclass
class Seen:
    name: str  # the Event object
    count: int
    first: datetime.datetime  # eventTime of the Event
    last: datetime.datetime


class Correlator:
    """The bounded cache of posted events by Key (least recently seen evicted first). Pure."""

    def __init__(self, *, size: int = CACHE_SIZE, window_seconds: float = SERIES_WINDOW_SECONDS) -> None:
        self._seen: collections.OrderedDict[Key, Seen] = collections.OrderedDict()
        self.size = size
        self.window = datetime.timedelta(seconds=window_seconds)

    def repeat_of(self, key: Key, now: datetime.datetime) -> Seen | None:
        """The posted Event this one repeats, or None (none, or its series ended)."""
        seen = self._seen.get(key)
        if seen is None:
            return None
        if now - seen.last >= self.window:
            del self._seen[key]
            return None
        return seen

    def record(self, key: Key, seen: Seen) -> None:
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)

    def forget(self, key: Key) -> None:
        self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)


def _stamp(t: datetime.datetime) -> str:
    # firstTimestamp/lastTimestamp are metav1.Time (seconds): kept for `kubectl get events`.
    return client.micro_time(t)[:19] + "Z"


async def emit_event(
    *, namespace: str, runtime: str, runtime_uid: str, type_: str, reason: str, message: str, identity: str,
    correlator: Correlator | None = None, now: datetime.datetime | None = None,
) -> None:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    message = message[:MESSAGE_LIMIT]
    key = Key(namespace, runtime, runtime_uid, type_, reason, message)
    seen = correlator.repeat_of(key, now) if correlator is not None else None
    if seen is not None and correlator is not None:
        count = seen.count + 1
        patch = {
            "count": count,
            "lastTimestamp": _stamp(now),
            "series": {"count": count, "lastObservedTime": client.micro_time(now)},
        }
        try:
            await client.work().request("PATCH", api.path("v1", "events", namespace, seen.name), body=patch,
                                        content_type="application/merge-patch+json")
        except api.ApiError as exc:
            if exc.status != 404:
                raise
            correlator.forget(key)  # removed meanwhile (its TTL): a new series starts below
        else:
            correlator.record(key, Seen(seen.name, count, seen.first, now))
            return
    name = f"{runtime}.{uuid.uuid4().hex[:12]}"
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": names.API_VERSION, "kind": names.KIND,
            "name": runtime, "namespace": namespace, "uid": runtime_uid,
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "action": ACTION,
        "source": {"component": "baton"},
        "reportingComponent": names.REPORTING_COMPONENT,
        "reportingInstance": identity[:128],
        "eventTime": client.micro_time(now),
        "firstTimestamp": _stamp(now),
        "lastTimestamp": _stamp(now),
        "count": 1,
    }
    await client.work().request("POST", api.path("v1", "events", namespace), body=body)
    if correlator is not None:
        correlator.record(key, Seen(name, 1, now, now))
