"""The gateway's Prometheus metrics, in the operator's registry (served by ``baton.server``).
Bounded labels only: an outcome and a reason from ``route.Reason``, never a runtime or a pod."""

from __future__ import annotations

import functools

import prometheus_client

from baton import metrics

CALLS = prometheus_client.Counter(
    "baton_gateway_calls_total",
    "Calls by outcome (forwarded, held_then_forwarded, refused) and reason (refusals; else empty).",
    ["outcome", "reason"], registry=metrics.REGISTRY)
HOLD_SECONDS = prometheus_client.Histogram(
    "baton_gateway_hold_seconds", "How long held calls waited for a serving generation (forwarded or refused).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 3600), registry=metrics.REGISTRY)
INFLIGHT = prometheus_client.Gauge(
    "baton_gateway_inflight", "Calls forwarded and not yet answered in full, open streams and WebSockets.",
    registry=metrics.REGISTRY)
HELD = prometheus_client.Gauge("baton_gateway_held", "Calls held now, waiting for a serving generation.",
                               registry=metrics.REGISTRY)
UPSTREAM_ERRORS = prometheus_client.Counter(
    "baton_gateway_upstream_errors_total", "Failures talking to a pod: connect, timeout, reset.",
    ["kind"], registry=metrics.REGISTRY)
REGISTERED = prometheus_client.Gauge(
    "baton_gateway_forwarding", "1 while this replica forwards (registered, renewed within the margin, views listed).",
    registry=metrics.REGISTRY)
HEADER_TIMEOUTS = prometheus_client.Counter(
    "baton_gateway_header_timeouts_total",
    "Connections closed because their request head was not complete within BATON_GATEWAY_HEADER_SECONDS.",
    registry=metrics.REGISTRY)


@functools.lru_cache(maxsize=None)  # bounded: outcomes x reasons
def calls(outcome: str, reason: str) -> prometheus_client.Counter:
    """CALLS' child for these labels, looked up once (labels() takes a lock and builds a key on
    every call: about 1.5 % of the gateway's CPU per call when done per call)."""
    return CALLS.labels(outcome=outcome, reason=reason)
