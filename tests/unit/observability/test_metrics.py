"""Metrics: families and types, the one-hot condition gauge, the memory limit, and the HTTP
endpoints (/metrics through prometheus-client's aiohttp handler, /livez, /readyz, /healthz)."""
from __future__ import annotations

import asyncio
import gzip
import pathlib
import subprocess
import sys
from typing import Any

import prometheus_client
import pytest
from aiohttp import test_utils
from prometheus_client import parser as prom_parser

import baton
from baton import metrics, server


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in prom_parser.text_string_to_metric_families(text)}


def test_registry_has_process_python_and_build_info() -> None:
    fams = _families(prometheus_client.generate_latest(metrics.REGISTRY).decode())
    for name in ("process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds",
                 "process_start_time_seconds", "python_info", "python_gc_collections"):
        assert name in fams, sorted(fams)
    assert fams["process_resident_memory_bytes"].type == "gauge"
    # The Prometheus text format has no info type: a gauge named *_info, always 1.
    assert fams["baton_build_info"].type == "gauge"
    [sample] = fams["baton_build_info"].samples
    assert sample.name == "baton_build_info" and sample.value == 1.0
    assert sample.labels == {"version": baton.version()}
    assert baton.version() != "0.0.0+unknown"  # the test venv installs the package


def test_transitions_carry_no_replica_label() -> None:
    # The scrape's target labels (pod, instance) already name the replica.
    with pytest.raises(ValueError):
        metrics.TRANSITIONS.labels(kind="Handoff", replica="op-a")
    metrics.TRANSITIONS.labels(kind="Handoff")


def _collect(rows: list[tuple[str, str, dict[str, str], float | None, float | None]]) -> dict[str, Any]:
    collector = metrics.RuntimeCollector(lambda: rows)
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
    assert metrics.condition_status(value) == expected


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
    assert metrics.memory_limit(paths) == expected
    [family] = metrics.MemoryLimitCollector(paths=paths).collect()
    assert family.name == "baton_memory_limit_bytes"
    assert [s.value for s in family.samples] == ([] if expected is None else [float(expected)])


class _Ready:
    def __init__(self) -> None:
        self.shutting_down = False

    def __call__(self) -> tuple[bool, str]:
        return (not self.shutting_down, "shutting down" if self.shutting_down else "ok")


async def _serve_and_check(same_port: bool) -> None:
    ready = _Ready()
    metrics_bind, health_bind = ("127.0.0.1", 1), ("127.0.0.1", 1 if same_port else 2)
    apps = server.applications(metrics_bind=metrics_bind, health_bind=health_bind, is_ready=ready)
    assert len(apps) == (1 if same_port else 2)
    clients = {}
    for bind, app in apps.items():
        clients[bind] = test_utils.TestClient(test_utils.TestServer(app, host="127.0.0.1"))
        await clients[bind].start_server()
    try:
        m, h = clients[metrics_bind], clients[health_bind]
        plain = await m.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert plain.status == 200
        assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "Content-Encoding" not in plain.headers
        assert "baton_build_info{" in await plain.text()

        zipped = await m.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert b"process_resident_memory_bytes" in gzip.decompress(await zipped.read())

        om = await m.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await om.text()).rstrip().endswith("# EOF")

        for path in ("/livez", "/readyz", "/healthz"):
            r = await h.get(path)
            assert (r.status, await r.text()) == (200, "ok\n"), path
        ready.shutting_down = True
        assert (await h.get("/livez")).status == 200
        for path in ("/readyz", "/healthz"):
            r = await h.get(path)
            assert (r.status, await r.text()) == (503, "shutting down\n"), path
        if not same_port:
            assert (await h.get("/metrics")).status == 404
            assert (await m.get("/readyz")).status == 404
    finally:
        for c in clients.values():
            await c.close()


@pytest.mark.parametrize("same_port", [False, True])
def test_http_endpoints(same_port: bool) -> None:
    asyncio.run(_serve_and_check(same_port))


def test_version_flag_matches_build_info() -> None:
    res = subprocess.run([sys.executable, "-m", "baton", "--version"], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"baton {baton.version()}\n", "")


def test_no_created_series_and_every_known_label_value_has_a_series_from_the_start() -> None:
    import prometheus_client as pc

    text = pc.generate_latest(metrics.REGISTRY).decode()
    assert "_created" not in text
    for outcome in ("Retired", "Reset", "ForceRecovered", "ConnectTimeout", "Suspended", "Deleted", "Lost", "Orphaned"):
        assert f'baton_handoffs_total{{outcome="{outcome}"}}' in text
    for kind in ("Create", "Handoff", "Retire", "Delete"):
        assert f'baton_transitions_total{{kind="{kind}"}}' in text
    for verb in ("reset", "force-recovery", "force-retire"):
        assert f'baton_stale_verbs_total{{verb="{verb}"}}' in text
    assert 'baton_cleanup_failures_total{reason="PodStuckTerminating"}' in text
