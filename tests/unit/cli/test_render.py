"""The plugin's pure helpers, table by table: times, ages, conditions, column widths."""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.cli import render
from baton.model import meta

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)
UTC = datetime.timezone.utc


@pytest.mark.parametrize("text, parsed", [
    ("2026-11-30T11:59:30Z", datetime.datetime(2026, 11, 30, 11, 59, 30, tzinfo=UTC)),
    ("2026-11-30T11:59:30.250000Z", datetime.datetime(2026, 11, 30, 11, 59, 30, 250000, tzinfo=UTC)),
    ("2026-11-30T13:59:30+02:00", datetime.datetime(2026, 11, 30, 11, 59, 30, tzinfo=UTC)),
    (None, None), ("", None), ("yesterday", None), ("2026-13-01T00:00:00Z", None),
])
def test_parse_time_is_none_on_a_bad_value(text: str | None, parsed: datetime.datetime | None) -> None:
    assert meta.parse_time(text) == parsed


@pytest.mark.parametrize("created, text", [
    ("2026-11-30T11:59:15Z", "45s"), ("2026-11-30T11:56:40Z", "3m20s"), ("2026-11-27T11:00:00Z", "3d1h"),
    ("2026-11-30T12:00:10Z", "0s"),  # a clock behind the server's: never negative
    (None, "<unknown>"), ("not a time", "<unknown>"),
])
def test_age(created: str | None, text: str) -> None:
    assert render.age(created, now=NOW) == text


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
