"""The gateway's Prometheus metrics, in the operator's registry (served by ``baton.server``).
Bounded labels only: an outcome and a reason from ``route.Reason``, never a runtime or a pod."""

from __future__ import annotations

import functools
from typing import Callable

import prometheus_client

from baton import metrics

CALLS = prometheus_client.Counter(
    "baton_gateway_calls_total",
    "Calls by outcome (forwarded, held_then_forwarded, refused, cancelled: the client left while it was held, never sent) and reason (refusals; else empty).",
    ["outcome", "reason"], registry=metrics.REGISTRY)
HOLD_SECONDS = prometheus_client.Histogram(
    "baton_gateway_hold_seconds", "How long held calls waited for a serving generation (forwarded or refused).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 3600), registry=metrics.REGISTRY)
WAKE_HOLD_SECONDS = prometheus_client.Histogram(
    "baton_gateway_wake_hold_seconds",
    "How long calls held for an idle runtime's wake waited, by outcome (forwarded: the woken generation "
    "answered; refused: WakeTimeout, WakeFailed or another refusal; cancelled: the client left).",
    ["outcome"], buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 45, 60, 120, 300, 600), registry=metrics.REGISTRY)
INFLIGHT = prometheus_client.Gauge(
    "baton_gateway_inflight", "Calls forwarded and not yet answered in full, open streams and WebSockets.",
    registry=metrics.REGISTRY)
HELD = prometheus_client.Gauge("baton_gateway_held", "Calls held now, waiting for a serving generation.",
                               registry=metrics.REGISTRY)
# Read at scrape time from the ledger (watch_buffered_bytes): no lock taken per call.
BUFFERED_BYTES = prometheus_client.Gauge(
    "baton_gateway_buffered_bytes", "Bytes of request bodies in memory now (held calls' bodies, small bodies read whole).",
    registry=metrics.REGISTRY)


def watch_buffered_bytes(read: Callable[[], float]) -> None:
    BUFFERED_BYTES.set_function(read)
CONNECTIONS = prometheus_client.Gauge("baton_gateway_connections", "Client connections open now.",
                                      registry=metrics.REGISTRY)
CONNECTIONS_REFUSED = prometheus_client.Counter(
    "baton_gateway_connections_refused_total",
    "Client connections answered 503 Overloaded and closed at once, by the bound reached (total, per_client).",
    ["bound"], registry=metrics.REGISTRY)
CUT_UPSTREAM = prometheus_client.Counter(
    "baton_gateway_calls_cut_total",
    "Calls forwarded whose client left before the answer was sent in full: the pod's connection was closed.",
    registry=metrics.REGISTRY)
STREAMS_ENDED = prometheus_client.Counter(
    "baton_gateway_streams_ended_total",
    "Open GET event streams and WebSockets of a sealed pod ended once quiet, so their clients reconnect to the next generation.",
    registry=metrics.REGISTRY)
UPSTREAM_ERRORS = prometheus_client.Counter(
    "baton_gateway_upstream_errors_total", "Failures talking to a pod (connect, request, stream), and calls refused for want of an upstream connection (pool).",
    ["kind"], registry=metrics.REGISTRY)
REGISTERED = prometheus_client.Gauge(
    "baton_gateway_forwarding", "1 while this replica forwards (registered, renewed within the margin, views listed).",
    registry=metrics.REGISTRY)
SESSIONS_REBOUND = prometheus_client.Counter(
    "baton_gateway_sessions_rebound_total",
    "Handshake-era MCP sessions of a retired generation re-bound to the serving one (spec.service.sessions: Rebind), "
    "by outcome: rebound (initialize replayed), failed (the replay failed: 404 SessionReplayFailed), not_sealed "
    "(an initialize too large to keep in the session id: that session expires at a handoff).",
    ["outcome"], registry=metrics.REGISTRY)
HEADER_TIMEOUTS = prometheus_client.Counter(
    "baton_gateway_header_timeouts_total",
    "Connections closed because their request head was not complete within BATON_GATEWAY_HEADER_SECONDS.",
    registry=metrics.REGISTRY)


@functools.lru_cache(maxsize=None)  # bounded: outcomes x reasons
def calls(outcome: str, reason: str) -> prometheus_client.Counter:
    """CALLS' child for these labels, looked up once (labels() takes a lock and builds a key on
    every call: about 1.5 % of the gateway's CPU per call when done per call)."""
    return CALLS.labels(outcome=outcome, reason=reason)
