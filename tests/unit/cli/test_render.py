"""The plugin's pure helpers, table by table: times, conditions, column widths, the server's Table."""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.cli import render
from baton.model import meta

UTC = datetime.timezone.utc


@pytest.mark.parametrize("text, parsed", [
    ("2026-11-30T11:59:30Z", datetime.datetime(2026, 11, 30, 11, 59, 30, tzinfo=UTC)),
    ("2026-11-30T11:59:30.250000Z", datetime.datetime(2026, 11, 30, 11, 59, 30, 250000, tzinfo=UTC)),
    ("2026-11-30T13:59:30+02:00", datetime.datetime(2026, 11, 30, 11, 59, 30, tzinfo=UTC)),
    (None, None), ("", None), ("yesterday", None), ("2026-13-01T00:00:00Z", None),
])
def test_parse_time_is_none_on_a_bad_value(text: str | None, parsed: datetime.datetime | None) -> None:
    assert meta.parse_time(text) == parsed


@pytest.mark.parametrize("status, kind, found", [
    ({"conditions": [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}]}, "Degraded",
     {"type": "Degraded", "status": "False"}),
    ({"conditions": [{"type": "Ready", "status": "True"}]}, "CleanupFailed", {}),
    ({"conditions": None}, "Ready", {}),
    (None, "Ready", {}),
])
def test_condition(status: dict[str, Any] | None, kind: str, found: dict[str, Any]) -> None:
    assert render.condition({"metadata": {"name": "x"}, "status": status}, kind) == found


@pytest.mark.parametrize("rows, text", [
    ([["A", "B"], ["long", "x"]], "A      B\nlong   x"),
    ([["NAME", "AGE"], ["a", ""]], "NAME   AGE\na"),  # trailing blanks stripped
    ([["ONLY"]], "ONLY"),
])
def test_table(rows: list[list[str]], text: str) -> None:
    assert render.table(rows) == text


# A Table as kube-apiserver 1.36 sends it for the ToolRuntime CRD (cells trimmed to what is used):
# the Name column, the printer columns (Step and Message at priority 1), nulls for absent values.
TABLE = {
    "kind": "Table", "apiVersion": "meta.k8s.io/v1",
    "columnDefinitions": [
        {"name": "Name", "type": "string", "format": "name", "priority": 0},
        {"name": "Generation", "type": "integer", "priority": 0},
        {"name": "Ready", "type": "string", "priority": 0},
        {"name": "Step", "type": "string", "priority": 1},
        {"name": "Age", "type": "date", "priority": 0},
    ],
    "rows": [
        {"cells": ["search-mcp", 3, "True", "Draining", "5d"], "object": {"metadata": {"namespace": "agents"}}},
        {"cells": ["browser", None, None, None, "12s"], "object": {"metadata": {"namespace": "ops"}}},
    ],
}


def test_server_table_prints_the_priority_0_columns_as_kubectl_get() -> None:
    # kubectl's tabwriter: each column as wide as its widest cell plus 3, at least 6; the last
    # column unpadded; an absent value an empty cell. Compared with `kubectl get trt` in
    # tests/integration/test_plugin.py against the real API server.
    assert render.server_table(TABLE, all_namespaces=False) == (
        "NAME         GENERATION   READY   AGE\n"
        "search-mcp   3            True    5d\n"
        "browser                           12s")
    assert render.server_table(TABLE, all_namespaces=True).splitlines() == [
        "NAMESPACE   NAME         GENERATION   READY   AGE",
        "agents      search-mcp   3            True    5d",
        "ops         browser                           12s"]


def test_server_table_cells_as_kubectl_writes_them() -> None:
    table = {"columnDefinitions": [{"name": "A"}, {"name": "b"}, {"name": "Last"}],
             "rows": [{"cells": [True, "two\nlines", "esc\x1b[31m"]}, {"cells": [1.5, None, False]},
                      {"cells": ["short"]}]}
    assert render.server_table(table, all_namespaces=False).splitlines() == [
        "A       B        LAST",
        "true    two...   esc^[[31m",
        "1.5              false",
        "short            ",
    ]


def _draining(calls: dict[str, Any] | None, *, step: str = "Draining") -> dict[str, Any]:
    t: dict[str, Any] = {"kind": "Handoff", "from": 1, "to": 2, "trigger": "TemplateChanged", "step": step}
    if calls is not None:
        t["gatewayCalls"] = calls
    return {"metadata": {"namespace": "ns", "name": "rt"}, "spec": {"service": {"gateway": True}},
            "status": {"transition": t}}


@pytest.mark.parametrize("calls, step, line", [
    ({"inflight": 1, "held": 2, "replicas": 2, "unconfirmed": 0}, "Draining",
     "    gateway calls: 1 in flight on g1, 2 held for g2 (2 of 2 gateway replicas answered)"),
    ({"inflight": 0, "replicas": 2, "unconfirmed": 1}, "StoppingAdmission",
     "    gateway calls: 0 in flight on g1, ? held for g2 (1 of 2 gateway replicas answered)"),
    ({"replicas": 1, "unconfirmed": 1}, "Draining",
     "    gateway calls: ? in flight on g1, ? held for g2 (0 of 1 gateway replica answered)"),
    ({"inflight": 0, "held": 0, "replicas": 0, "unconfirmed": 0}, "Draining",
     "    gateway calls: no live gateway replica (nothing can forward a call)"),
])
def test_status_shows_the_gateway_calls_the_operator_recorded(calls: dict[str, Any], step: str, line: str) -> None:
    text = render.status_text(_draining(calls, step=step), now=datetime.datetime(2026, 12, 2, tzinfo=UTC))
    assert line in text.splitlines(), text


@pytest.mark.parametrize("calls, step", [(None, "Draining"), ({"inflight": 1, "replicas": 1}, "Creating")])
def test_status_shows_no_gateway_calls_outside_the_drain(calls: dict[str, Any] | None, step: str) -> None:
    text = render.status_text(_draining(calls, step=step), now=datetime.datetime(2026, 12, 2, tzinfo=UTC))
    assert "gateway calls" not in text, text


def _handed_off(entry: dict[str, Any], service: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "rt"}, "spec": {"service": service},
            "status": {"current": {"generation": 2, "pod": "rt-g2", "uid": "u2"},
                       "history": [{"generation": 0, "outcome": "Retired", "sessionsToRebind": 9},
                                   {"generation": 1, "outcome": "Retired", **entry}]}}


@pytest.mark.parametrize("entry, service, line", [
    ({"sessionsToRebind": 3}, {"gateway": True},
     "  sessions: 3 on generation 1, re-bound at their next call (sessions: Rebind)"),
    ({"sessionsToRebind": 1}, {"gateway": True, "sessions": "Rebind"},
     "  sessions: 1 on generation 1, re-bound at its next call (sessions: Rebind)"),
    ({"sessionsToRebind": 2}, {"gateway": True, "sessions": "Expire"},
     "  sessions: 2 on generation 1, ended (sessions: Expire)"),
    ({"sessionsToRebind": 0}, {"gateway": True}, "  sessions: 0 on generation 1 (sessions: Rebind)"),
])
def test_status_shows_the_sessions_of_the_last_handoff(entry: dict[str, Any], service: dict[str, Any],
                                                       line: str) -> None:
    text = render.status_text(_handed_off(entry, service), now=datetime.datetime(2026, 12, 2, tzinfo=UTC))
    assert line in text.splitlines(), text
    assert sum(1 for ln in text.splitlines() if ln.startswith("  sessions:")) == 1, "only the last handoff's"


@pytest.mark.parametrize("entry", [{}, {"sessionsToRebind": None}, {"sessionsToRebind": "3"}, {"sessionsToRebind": True}])
def test_status_shows_no_session_line_when_the_last_handoff_has_no_count(entry: dict[str, Any]) -> None:
    text = render.status_text(_handed_off(entry, {"gateway": True}), now=datetime.datetime(2026, 12, 2, tzinfo=UTC))
    assert "sessions:" not in text, text
