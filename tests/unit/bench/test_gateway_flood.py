"""The pure parts of the gateway flood benchmark (bench/gateway_flood.py): the flood's plan of
connections, the bodies it sends, how an answer is read, the gateway's metrics parsed, the
chart's memory limit, and the victim's calls accounted for (lost, run twice)."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from bench import gateway_flood as flood

SPREAD = [f"127.0.0.{i}" for i in range(10, 18)]


def test_the_plan_spreads_the_slow_kinds_and_sends_more_than_the_bound_from_one_address() -> None:
    conns = flood.plan(connections=2000, held=400, slow_bodies=250, slowloris=250, per_client_bound=1024,
                       spread=SPREAD, burst_address="127.0.0.9")
    assert len(conns) == 2000
    kinds = collections.Counter(c.kind for c in conns)
    assert kinds == {flood.Kind.HELD: 400, flood.Kind.SLOW_BODY: 250, flood.Kind.SLOWLORIS: 250, flood.Kind.BURST: 1100}
    by_address = collections.Counter(c.local for c in conns)
    assert by_address["127.0.0.9"] == 1100 > 1024
    assert all(by_address[a] in (112, 113) for a in SPREAD)
    assert {c.local for c in conns if c.kind is flood.Kind.BURST} == {"127.0.0.9"}
    # The 1 MiB held calls come first: they meet the body-memory bound, not the held count.
    assert [c.kind for c in conns[:400]] == [flood.Kind.HELD] * 400


def test_the_plan_refuses_what_would_not_exercise_the_bounds_or_leave_loopback() -> None:
    kw = dict(held=400, slow_bodies=250, slowloris=250, per_client_bound=1024, spread=SPREAD, burst_address="127.0.0.9")
    with pytest.raises(ValueError, match="not more than the per-client bound 1024"):
        flood.plan(connections=1924, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not loopback"):
        flood.plan(connections=2000, **dict(kw, burst_address="10.0.0.9"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="add addresses to the spread"):
        flood.plan(connections=3000, **dict(kw, spread=["127.0.0.10"], held=1000, slowloris=250))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="held=-1"):
        flood.plan(connections=2000, **dict(kw, held=-1))  # type: ignore[arg-type]


def test_a_padded_call_is_exactly_its_size_and_still_json_rpc() -> None:
    body = flood.call_body("flood-held", flood.MIB)
    assert len(body) == flood.MIB
    msg = json.loads(body)
    assert (msg["jsonrpc"], msg["id"], msg["method"]) == ("2.0", "flood-held", "tools/call")
    assert json.loads(flood.call_body("idle-7"))["id"] == "idle-7"
    with pytest.raises(ValueError, match="below"):
        flood.call_body("x", 10)


def test_an_answer_is_its_status_and_baton_reason() -> None:
    raw = (b"HTTP/1.1 503 Service Unavailable\r\nbaton-reason: Overloaded\r\nRetry-After: 1\r\n"
           b"Content-Length: 2\r\n\r\n{}")
    assert flood.answer_of(raw) == "503 Overloaded"
    assert flood.answer_of(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == "200"
    assert flood.answer_of(b"") == "no answer"
    assert flood.answer_of(b"garbage") == "no answer"


def test_metrics_are_parsed_summed_and_keyed_by_labels() -> None:
    text = "\n".join([
        "# HELP baton_gateway_calls_total Calls",
        "# TYPE baton_gateway_calls_total counter",
        'baton_gateway_calls_total{outcome="refused",reason="Overloaded"} 76.0',
        'baton_gateway_calls_total{outcome="refused",reason="Transitioning"} 3.0',
        'baton_gateway_calls_total{outcome="forwarded",reason=""} 4000.0',
        'baton_gateway_calls_total{outcome="cancelled",reason=""} 0.0',
        'baton_gateway_connections_refused_total{bound="per_client"} 76.0',
        "baton_gateway_held 12.0",
    ])
    samples = flood.parse_metrics(text)
    assert flood.metric_sum(samples, "baton_gateway_calls_total", outcome="refused") == 79
    assert flood.metric_sum(samples, "baton_gateway_held") == 12
    assert flood.by_labels(samples, "baton_gateway_calls_total", "outcome", "reason") == {
        "refused Overloaded": 76, "refused Transitioning": 3, "forwarded": 4000}
    assert flood.by_labels(samples, "baton_gateway_connections_refused_total", "bound") == {"per_client": 76}


def test_memory_quantities_and_the_charts_limit(tmp_path: Path) -> None:
    assert flood.memory_bytes("256Mi") == 256 * 1024 * 1024
    assert flood.memory_bytes("1G") == 10 ** 9
    assert flood.memory_bytes("134217728") == 134217728
    with pytest.raises(ValueError, match="'256MB'"):
        flood.memory_bytes("256MB")
    values = tmp_path / "values.yaml"
    values.write_text("gateway:\n  resources:\n    limits:\n      memory: 300Mi\n")
    assert flood.chart_memory_limit(values) == "300Mi"
    values.write_text("gateway: {}\n")
    with pytest.raises(ValueError, match="gateway.resources.limits.memory"):
        flood.chart_memory_limit(values)
    # The chart this repository ships sets one.
    assert flood.memory_bytes(flood.chart_memory_limit(flood.ROOT / "charts" / "baton" / "values.yaml")) > 0


def test_the_victims_calls_are_accounted_lost_twice_and_unknown() -> None:
    clean = flood.account(sent=["a", "b"], ok=["a", "b"], tool_counts={"a": 1, "b": 1})
    assert clean.clean and (clean.sent, clean.failed, clean.lost, clean.twice, clean.unknown) == (2, 0, 0, 0, 0)
    bad = flood.account(sent=["a", "b", "c", "d"], ok=["a", "b", "c"], tool_counts={"a": 2, "c": 1, "z": 1})
    assert (bad.failed, bad.lost, bad.twice, bad.unknown) == (1, 1, 1, 1)  # d failed, b lost, a twice, z unknown
    assert not bad.clean
    assert flood.yes_no(True) == "met" and flood.yes_no(False) == "NOT met"


def test_a_refusals_message_tells_apart_the_bounds_behind_one_reason() -> None:
    def response(body: bytes, length: int | None = None) -> bytes:
        n = len(body) if length is None else length
        return b"HTTP/1.1 503 Service Unavailable\r\nBaton-Reason: Overloaded\r\nContent-Length: %d\r\n\r\n%s" % (n, body)
    plain = response(json.dumps({"error": "more than 1000 calls held for this runtime", "reason": "Overloaded"}).encode())
    assert flood.message_of(plain) == "more than 1000 calls held for this runtime"
    assert flood.body_complete(plain)
    rpc = response(json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "bodies at their bound"}}).encode())
    assert flood.message_of(rpc) == "bodies at their bound"
    partial = response(b'{"error": "x"}', length=100)
    assert flood.message_of(partial) == "" and not flood.body_complete(partial)
    assert not flood.body_complete(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert flood.message_of(response(b"not json")) == ""
