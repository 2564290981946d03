"""Metrics: families and types, and the HTTP endpoints (/metrics through prometheus-client's
aiohttp handler, /livez, /readyz, /healthz). The scrape-time collectors: test_collectors.py."""
from __future__ import annotations

import asyncio
import gzip
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
