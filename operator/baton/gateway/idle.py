"""Idle runtimes at the gateway (issue 43; docs/gateway.md, "Idle runtimes and wake"): which
forwarded calls count as activity, which calls for an idle runtime are held for a wake, and what
a runtime's view says about its idleness. No I/O.

Activity (what keeps a runtime awake, reported by GET /v1/activity): a forwarded POST whose body
is a JSON-RPC request (an "id" and a "method") other than the handshake, the liveness check and
the list calls (NOT_ACTIVITY). Notifications, GET streams, health checks never count. A POST whose
body the gateway streams to the pod unread (over 64 KiB) counts: it cannot be told from a tool
call, and counting it errs on the side of staying awake.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping

# JSON-RPC methods that never count as activity: a client's handshake, liveness check and list
# calls (which SDKs send on their own: a client that only lists is not using the tool), and the
# event stream of MCP 2026-07-28 (subscriptions/listen: the POST form of a GET stream).
NOT_ACTIVITY = frozenset({"ping", "initialize", "tools/list", "prompts/list", "resources/list",
                          "resources/templates/list", "subscriptions/listen"})
# The one request that never wakes an idle runtime: a liveness check answered 503 Idle at once.
NO_WAKE = frozenset({"ping"})
WAKE_SECONDS_DEFAULT = 45


def request_methods(body: bytes | None) -> list[str] | None:
    """The methods of the JSON-RPC requests in `body` (a request, or a batch of them; a
    notification, without an id, is none). None: the body is no JSON-RPC at all."""
    if not body:
        return None
    try:
        doc: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    messages = doc if isinstance(doc, list) else [doc]
    if not messages or not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in messages):
        return None
    return [str(m["method"]) for m in messages if "id" in m and isinstance(m.get("method"), str)]


def counts_as_activity(*, http_method: str, methods: list[str] | None, streamed: bool) -> bool:
    """Whether a forwarded call counts as activity for its runtime. `methods`: request_methods()
    of its body as the gateway read it (None: none, not read, or no JSON-RPC); `streamed`: a body
    sent to the pod unread."""
    if http_method != "POST":
        return False
    if streamed:
        return True
    return any(m not in NOT_ACTIVITY for m in methods or ())


def is_call(*, http_method: str, methods: list[str] | None, websocket: bool) -> bool:
    """Whether a forwarded request counts in flight for its runtime (GET /v1/activity's
    `inflight`: a runtime with one is never idled): anything but a stream a client keeps open
    (GET event streams, WebSockets, a subscriptions/listen POST)."""
    if http_method == "GET" or websocket:
        return False
    return "subscriptions/listen" not in (methods or ())


def wakes(*, http_method: str, body: bytes | None) -> bool:
    """Whether a call for an idle runtime is held for its wake (and is demand for one): a POST
    whose body is a JSON-RPC request other than ping. Anything else (ping, a notification, a GET
    or HEAD health check, a body that is no JSON-RPC) is answered 503 Idle at once."""
    if http_method != "POST":
        return False
    return any(m not in NO_WAKE for m in request_methods(body) or ())


def idle_since(runtime: Mapping[str, Any] | None) -> str | None:
    """status.idle.since as the view shows it (None: not idle)."""
    since = (((runtime or {}).get("status") or {}).get("idle") or {}).get("since")
    return str(since) if since else None


def wake_seconds(runtime: Mapping[str, Any] | None) -> int:
    """spec.idle.wakeSeconds: how long a call held for a wake waits from its arrival."""
    value = (((runtime or {}).get("spec") or {}).get("idle") or {}).get("wakeSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else WAKE_SECONDS_DEFAULT


def _parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.timezone.utc)


def backoff_left(runtime: Mapping[str, Any] | None, *, now: datetime.datetime) -> float | None:
    """Seconds left of a failed wake's back-off (status.retry.notBefore after `now`), else None."""
    not_before = _parse_time((((runtime or {}).get("status") or {}).get("retry") or {}).get("notBefore"))
    if not_before is None:
        return None
    left = (not_before - now).total_seconds()
    return left if left > 0 else None
