"""The scrape-time collectors (baton.collectors): the one-hot condition gauge and the runtime
gauges, the condition's status label, the memory limit read from the cgroup."""
from __future__ import annotations

import pathlib
from typing import Any

import pytest

from baton import collectors


def _collect(rows: list[tuple[str, str, dict[str, str], float | None, float | None]]) -> dict[str, Any]:
    collector = collectors.RuntimeCollector(lambda: rows)
    return {f.name: f for f in collector.collect()}


def test_runtime_condition_is_one_hot_by_status() -> None:
    fams = _collect([
        ("agents", "a", {"Ready": "True", "CleanupFailed": "False", "Degraded": "Unknown"}, None, None),
        ("agents", "b", {"Ready": "False", "CleanupFailed": "True"}, 1000.0, 190.0),
    ])
    per = {(s.labels["runtime"], s.labels["condition"], s.labels["status"]): s.value
           for s in fams["baton_runtime_condition"].samples}
    assert fams["baton_runtime_condition"].type == "gauge"
    expected_hot = {("a", "Ready"): "true", ("a", "CleanupFailed"): "false", ("a", "Degraded"): "unknown",
                    ("b", "Ready"): "false", ("b", "CleanupFailed"): "true"}
    for (runtime, cond), hot in expected_hot.items():
        for status in ("true", "false", "unknown"):
            assert per[(runtime, cond, status)] == (1.0 if status == hot else 0.0), (runtime, cond, status)
    assert len(per) == 3 * len(expected_hot)
    # False and Unknown are different series, so an alert can tell them apart.
    assert per[("a", "Degraded", "unknown")] == 1.0 and per[("a", "Degraded", "false")] == 0.0
    by_cond = {(s.labels["condition"], s.labels["status"]): s.value for s in fams["baton_runtimes"].samples}
    assert by_cond == {("Ready", "true"): 1, ("Ready", "false"): 1, ("CleanupFailed", "false"): 1,
                       ("CleanupFailed", "true"): 1, ("Degraded", "unknown"): 1}
    [budget] = fams["baton_transition_budget_seconds"].samples
    assert budget.labels == {"namespace": "agents", "runtime": "b"} and budget.value == 190.0
    [age] = fams["baton_transition_age_seconds"].samples
    assert age.labels == {"namespace": "agents", "runtime": "b"} and age.value > 0


@pytest.mark.parametrize("value, expected", [
    ("True", "true"), ("False", "false"), ("Unknown", "unknown"), ("", "unknown"), ("Maybe", "unknown"),
])
def test_condition_status_label(value: str, expected: str) -> None:
    assert collectors.condition_status(value) == expected


@pytest.mark.parametrize("files, expected", [
    ({"v2": "268435456\n"}, 268435456),
    ({"v2": "max\n", "v1": "1024"}, None),  # v2 says unlimited: v1 is not consulted
    ({"v1": "536870912"}, 536870912),
    ({"v1": "9223372036854771712"}, None),  # v1's "no limit"
    ({}, None),
    ({"v2": "garbage", "v1": "4096"}, 4096),
])
def test_memory_limit_from_cgroup(tmp_path: pathlib.Path, files: dict[str, str], expected: int | None) -> None:
    paths = [tmp_path / "v2", tmp_path / "v1"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert collectors.memory_limit(paths) == expected
    [family] = collectors.MemoryLimitCollector(paths=paths).collect()
    assert family.name == "baton_memory_limit_bytes"
    assert [s.value for s in family.samples] == ([] if expected is None else [float(expected)])
