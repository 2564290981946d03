"""The operator as a real process: every line it prints is one JSON object with the agreed fields
(kopf's records too), and /metrics, /livez, /readyz answer as the chart and Prometheus expect."""
from __future__ import annotations

import datetime
import gzip
import json
import pathlib
import re
import signal
import socket
import threading
import urllib.error
import urllib.request
from typing import Any, Callable

import pytest
from prometheus_client import parser as prom_parser

import baton as baton_pkg
from dev.ports import free_port
from dev.wait import wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]
SEVERITIES = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
METRICS_REFERENCE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, dict(r.headers), r.read()


def test_operator_logs_are_json_lines_and_metrics_are_complete(
        operators: Start, rts: Runtimes, namespace: str) -> None:
    # DEBUG: kopf's own per-object records (with their object reference) are printed too.
    op = operators("op-obs", env={"BATON_LOG_LEVEL": "DEBUG"})
    rts.create(runtime_manifest("observed"))
    rts.wait_ready("observed", 1)
    rts.set_image("observed", "example/tool:2")  # a handoff: passes that write, wait and act again
    st = rts.wait_ready("observed", 2)
    conditions = {c["type"]: c["status"] for c in st["conditions"]}
    assert conditions["Ready"] == "True" and conditions["CleanupFailed"] == "False"

    base = f"http://127.0.0.1:{op.metrics_port}/metrics"

    def scrape() -> dict[str, Any]:
        status, headers, body = _get(base)
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return {f.name: f for f in prom_parser.text_string_to_metric_families(body.decode())}

    def one_hot(fams: dict[str, Any]) -> dict[tuple[str, str], float]:
        return {(s.labels["condition"], s.labels["status"]): s.value
                for s in fams["baton_runtime_condition"].samples
                if s.labels["namespace"] == namespace and s.labels["runtime"] == "observed"}

    # The gauges show the status the runtime's worker last read; it reads again right after its
    # own write, so the one-hot series follow the API within moments.
    def settled() -> dict[str, Any] | None:
        fams = scrape()
        return fams if one_hot(fams).get(("Ready", "true")) == 1.0 else None

    fams = wait_for(settled, timeout=10, interval=0.2,
                    what="baton_runtime_condition{condition=Ready,status=true} == 1")
    expected_types = {
        "process_resident_memory_bytes": "gauge", "process_cpu_seconds": "counter",
        "process_open_fds": "gauge", "process_max_fds": "gauge", "python_info": "gauge",
        "python_gc_collections": "counter", "baton_build_info": "gauge",
        "baton_runtime_condition": "gauge", "baton_runtimes": "gauge",
        "baton_lock_wait_seconds": "histogram", "baton_step_duration_seconds": "histogram",
        "baton_transitions": "counter", "baton_handoffs": "counter", "baton_cleanup_failures": "counter",
        "baton_force_recoveries": "counter", "baton_stale_verbs": "counter",
        "baton_lease_conflicts": "counter", "baton_shutting_down": "gauge",
    }
    assert {n: fams[n].type for n in expected_types if n in fams} == expected_types, sorted(fams)
    [build] = fams["baton_build_info"].samples
    assert build.labels == {"version": baton_pkg.version()} and build.value == 1.0

    # Passes and the work queue in controller-runtime's shape, with samples after the handoff.
    def samples(family: str, sample: str | None = None) -> list[Any]:
        return [x for x in fams[family].samples if x.name == (sample or family)]

    passes = {x.labels["result"]: x.value for x in samples("baton_passes", "baton_passes_total")}
    assert set(passes) == {"success", "requeue_after", "requeue", "error"}, passes
    assert sum(passes.values()) >= 5 and passes["requeue_after"] + passes["requeue"] >= 1, passes
    for histogram in ("baton_pass_duration_seconds", "baton_queue_duration_seconds", "baton_queue_work_duration_seconds"):
        assert fams[histogram].type == "histogram"
        [count] = samples(histogram, histogram + "_count")
        assert count.value >= 3, (histogram, count)
    [pass_count] = samples("baton_pass_duration_seconds", "baton_pass_duration_seconds_count")
    assert pass_count.value >= sum(passes.values()) - 1  # a pass may end between the two reads
    [adds] = samples("baton_queue_adds", "baton_queue_adds_total")
    assert adds.value >= 3
    assert [x.value for x in samples("baton_workers_max")] == [8.0]  # BATON_WORKERS' default
    for gauge in ("baton_queue_depth", "baton_queue_retries", "baton_queue_unfinished_work_seconds",
                  "baton_queue_longest_running_processor_seconds"):
        assert fams[gauge].samples, gauge
    print("passes by result after a create and a handoff:", {k: int(v) for k, v in sorted(passes.items())},
          "queue adds:", int(adds.value))

    # Every baton_* family a real operator exports is in the metrics reference, with its type
    # (the text format has no info type: baton_build_info is a gauge there).
    documented: dict[str, str] = {}
    for name, kind in re.findall(r"^\| `(baton_[a-z_]+)` \| (counter|gauge|histogram|info) \|",
                                 METRICS_REFERENCE.read_text(), re.M):
        documented[name.removesuffix("_total") if kind == "counter" else name] = "gauge" if kind == "info" else kind
    live = {n: f.type for n, f in fams.items() if n.startswith("baton_")}
    assert len(live) > 25, sorted(live)
    assert {n: documented.get(n) for n in live} == live, "families not in docs/metrics.md (or of another type)"
    # Watch errors and crashed passes have their series before the first one happens.
    watch_errors = [s for s in fams["baton_watch_errors"].samples if s.name == "baton_watch_errors_total"]
    kinds = {s.labels["kind"] for s in watch_errors}
    assert kinds and {(s.labels["kind"], s.labels["reason"]) for s in watch_errors} == {
        (k, r) for k in kinds for r in ("Gone", "Forbidden", "Throttled", "ApiError", "BadStream", "Disconnected")}
    assert [s.value for s in fams["baton_pass_errors"].samples if s.name == "baton_pass_errors_total"] == [0.0]

    # One-hot, like kube-state-metrics: every condition of the runtime has a true, a false and an
    # unknown series, and only the one matching the status in the API is 1.
    per = one_hot(fams)
    assert {c for c, _ in per} == set(conditions)
    for cond, value in conditions.items():
        hot = value.lower()
        assert {s: per[(cond, s)] for s in ("true", "false", "unknown")} == {
            s: (1.0 if s == hot else 0.0) for s in ("true", "false", "unknown")}, cond
    # The transition that started generation 1 was counted, without a label naming the replica.
    # (Every kind has a series from the start, 0 until its first transition.)
    began = [s for s in fams["baton_transitions"].samples if s.name == "baton_transitions_total"]
    assert all(set(s.labels) == {"kind"} for s in began)
    assert {s.labels["kind"] for s in began} == {"Create", "Handoff", "Retire", "Delete"}
    assert sum(s.value for s in began if s.labels["kind"] == "Create") >= 1

    status, headers, body = _get(base, {"Accept-Encoding": "gzip"})
    assert headers.get("Content-Encoding") == "gzip"
    assert b"baton_runtime_condition{" in gzip.decompress(body)
    status, headers, body = _get(base, {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    om = body.decode()
    assert om.rstrip().endswith("# EOF") and "# TYPE baton_build info" in om

    health = f"http://127.0.0.1:{op.health_port}"
    for path in ("/livez", "/readyz", "/healthz"):
        assert _get(health + path)[0] == 200, path

    op.signal(signal.SIGTERM)
    assert op.wait_exit(20) == 0, op.log_tail()

    lines = op.log_text().splitlines()
    assert lines, "the operator printed nothing"
    records: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"line {n} of the operator's output is not JSON: {line!r}") from exc
        assert isinstance(record, dict), line
        assert record.get("severity") in SEVERITIES, line
        assert isinstance(record.get("message"), str), line
        assert isinstance(record.get("logger"), str) and record["logger"], line
        ts = datetime.datetime.fromisoformat(record["timestamp"])
        assert ts.utcoffset() == datetime.timedelta(0), line
        assert "settings" not in record and "k8s_skip" not in record and "k8s_ref" not in record, line
        records.append(record)
    assert "OperatorSettings" not in op.log_text()
    kopf_records = [r for r in records if r["logger"].startswith("kopf")]
    assert kopf_records, "no record of kopf's own"
    # kopf is the process shell here and handles no object itself (Baton's informers watch), so
    # its records carry no object reference; where one does, it is an object, not a string
    # (tests/unit/observability/test_logs.py shapes a kopf record with k8s_ref).
    refs = [r["object"] for r in kopf_records if "object" in r]
    assert all(isinstance(ref, dict) for ref in refs)
    messages = [r["message"] for r in records if r["logger"].startswith("baton")]
    assert "baton started" in messages and "stopped" in messages
    [started] = [r for r in records if r["message"] == "baton started"]
    assert started["version"] == baton_pkg.version(), started
    assert any(r.get("runtime") == f"{namespace}/observed" for r in records), "no record names the runtime"
    # Every Baton record that speaks of the runtime carries it as a field (filterable, not parsed
    # out of the message), and no message carries a \u escape.
    about = [r for r in records if r["logger"].startswith("baton") and f"{namespace}/observed" in r["message"]]
    assert about, "no record of the pass speaks of the runtime"
    print(f"{len(about)} records speak of {namespace}/observed, all with runtime")
    assert all(r.get("runtime") == f"{namespace}/observed" for r in about), \
        [r for r in about if r.get("runtime") != f"{namespace}/observed"]
    assert "\\u" not in op.log_text()


class _SilentListener:
    """Accepts TCP connections on a kwok-loop pod's IP (loopback) and never answers: a drain
    probe sent to it stays in flight until its own timeoutSeconds."""

    def __init__(self, ip: str, port: int) -> None:
        self.sock = socket.socket()
        self.sock.bind((ip, port))
        self.sock.listen(8)
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()
        self.thread.join(timeout=5)


def _status_of(url: str) -> int:
    try:
        return _get(url)[0]
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.usefixtures("kwok_nodes")
def test_readyz_turns_503_while_shutting_down_and_livez_stays_200(
        operators: Start, rts: Runtimes) -> None:
    port = free_port()
    rts.create(runtime_manifest(
        "closing", loopback=True, budgets={"drainSeconds": 30},
        drain_probe={"httpGet": {"path": "/idle", "port": port}, "periodSeconds": 1, "timeoutSeconds": 15}))
    op = operators("op-a")
    st = rts.wait_ready("closing", 1)
    ip = rts.pod(st["current"]["pod"]).status.pod_ip
    assert ip.startswith("127."), ip
    health = f"http://127.0.0.1:{op.health_port}"
    assert [_status_of(health + p) for p in ("/livez", "/readyz", "/healthz")] == [200, 200, 200]
    listener = _SilentListener(ip, port)
    try:
        rts.set_image("closing", "example/tool:2")
        # The worker now waits on a probe that gets no answer: shutdown has to wait for it.
        assert listener.accepted.wait(20), "the drain probe never connected"
        op.signal(signal.SIGTERM)
        wait_for(lambda: _status_of(health + "/readyz") == 503, timeout=10, interval=0.1,
                 what="/readyz 503 after SIGTERM")
        assert op.proc is not None and op.proc.poll() is None, "still running: the window is real"
        assert _status_of(health + "/healthz") == 503
        assert _status_of(health + "/livez") == 200
    finally:
        listener.close()
    assert op.wait_exit(30) == 0, op.log_tail()
