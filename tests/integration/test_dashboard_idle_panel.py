"""The dashboard's "Idle runtimes and wakes" panel (issue 43 item 4) counts each idle runtime once,
however the replicas report baton_runtimes_idle (as the runtimes panel: one reporter, every
replica reporting all, or each replica its own ranges), and its wake latency panel reads
baton_wake_seconds; evaluated by the pinned promtool (`promtool test rules`, promql_expr_test).
A missing promtool fails, never skips."""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from harness import prometheus
from harness.tools import pinned_tool


def exprs(title: str) -> list[str]:
    return [expr for t, expr in prometheus.dashboard_queries() if t == title]


def series(name: str, pod: str, values: str, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f'{name}{{job="baton-metrics",namespace="baton-system",pod="{pod}"{extra}}}', "values": values}


def idle_case(name: str, reports: dict[str, int], *, ranges: int, expected: int) -> dict[str, object]:
    idle, _wakes = exprs("Idle runtimes and wakes")
    inputs = [series("baton_shard_ranges", pod, f"{ranges}x10") for pod in ("baton-a", "baton-b")]
    inputs += [series("baton_runtimes_idle", pod, f"{n}x10") for pod, n in reports.items()]
    # Another release's operator, same job name: never counted.
    inputs.append({"series": 'baton_runtimes_idle{job="baton-metrics",namespace="other-system",pod="x"}',
                   "values": "999x10"})
    return {"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": [{
        "expr": idle, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": expected}]}]}


def wakes_case() -> dict[str, object]:
    _idle, wakes = exprs("Idle runtimes and wakes")
    p50, p95 = exprs("Wake latency p50 / p95")
    inputs = [series("baton_wakes_total", "baton-a", "0+2x10", outcome="woken"),
              series("baton_wakes_total", "baton-a", "0+1x10", outcome="failed")]
    # Every wake took between 2 and 3 seconds: one a minute, all in the le=3 bucket.
    for le in ("1.0", "2.0"):
        inputs.append(series("baton_wake_seconds_bucket", "baton-a", "0x10", le=le))
    for le in ("3.0", "+Inf"):
        inputs.append(series("baton_wake_seconds_bucket", "baton-a", "0+1x10", le=le))
    # $__rate_interval is 10m here (harness.prometheus): evaluated at 10m, a whole window of samples.
    return {"name": "wakes by outcome and their latency", "interval": "1m", "input_series": inputs,
            "promql_expr_test": [
                {"expr": wakes, "eval_time": "10m",
                 "exp_samples": [{"labels": '{outcome="failed"}', "value": 10}, {"labels": '{outcome="woken"}', "value": 20}]},
                {"expr": p50, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 2.5}]},
                # 2 + (0.95 × rate) / rate, as Prometheus computes it in floating point: 2.95.
                {"expr": p95, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 2.9499999999999997}]},
            ]}


def test_the_idle_panel_counts_each_idle_runtime_once_and_reads_the_wakes(tmp_path: Path) -> None:
    tests = [
        idle_case("unsharded: the metrics Lease's holder reports", {"baton-a": 990}, ranges=0, expected=990),
        idle_case("unsharded, no metrics Lease: every replica reports all", {"baton-a": 990, "baton-b": 990},
                  ranges=0, expected=990),
        idle_case("sharded: each replica its own ranges", {"baton-a": 600, "baton-b": 390}, ranges=16, expected=990),
        wakes_case(),
    ]
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    (tmp_path / "panel.test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    proc = subprocess.run([pinned_tool("promtool"), "test", "rules", "panel.test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
