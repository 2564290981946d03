"""The dashboard's "Hooks" row (issue 45 item 5): hook runs by hook and outcome, summed over the
replicas (baton_hook_runs_total), and the hooks' duration by hook (baton_hook_seconds); evaluated by
the pinned promtool (`promtool test rules`, promql_expr_test). A missing promtool fails, never skips."""
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


def test_the_hooks_panels_count_runs_by_outcome_and_read_their_duration(tmp_path: Path) -> None:
    [runs] = exprs("Hook runs by hook and outcome")
    p50, p95 = exprs("Hook duration p50 / p95 by hook")
    inputs = [
        # Two replicas each ended preRetire hooks (a Lease moved): one series per hook and outcome.
        series("baton_hook_runs_total", "baton-a", "0+1x10", hook="preRetire", outcome="Succeeded"),
        series("baton_hook_runs_total", "baton-b", "0+1x10", hook="preRetire", outcome="Succeeded"),
        series("baton_hook_runs_total", "baton-a", "0 0 0 0 0 1x6", hook="preRetire", outcome="Failed"),
        series("baton_hook_runs_total", "baton-a", "0+2x10", hook="postReady", outcome="Ignored"),
        # Another release's operator, same job name: never counted.
        {"series": 'baton_hook_runs_total{job="baton-metrics",namespace="other-system",pod="x",hook="preRetire",'
                   'outcome="Failed"}', "values": "0+100x10"},
    ]
    # preRetire hooks took between 1 and 2 seconds, postReady ones between 0.1 and 0.5: one a minute each.
    for hook, below, within in (("preRetire", ("0.5", "1.0"), ("2.0", "+Inf")), ("postReady", ("0.1",), ("0.5", "+Inf"))):
        inputs += [series("baton_hook_seconds_bucket", "baton-a", "0x10", hook=hook, le=le) for le in below]
        inputs += [series("baton_hook_seconds_bucket", "baton-a", "0+1x10", hook=hook, le=le) for le in within]
    # $__rate_interval is 10m here (harness.prometheus): evaluated at 10m, a whole window of samples.
    tests = [{"name": "hook runs and their duration", "interval": "1m", "input_series": inputs, "promql_expr_test": [
        {"expr": runs, "eval_time": "10m", "exp_samples": [
            {"labels": '{hook="postReady", outcome="Ignored"}', "value": 20},
            {"labels": '{hook="preRetire", outcome="Failed"}', "value": 1},
            {"labels": '{hook="preRetire", outcome="Succeeded"}', "value": 20}]},
        {"expr": p50, "eval_time": "10m", "exp_samples": [
            # 0.1 + 0.5 × 0.4, as Prometheus computes it in floating point.
            {"labels": '{hook="postReady"}', "value": 0.30000000000000004}, {"labels": '{hook="preRetire"}', "value": 1.5}]},
        {"expr": p95, "eval_time": "10m", "exp_samples": [
            {"labels": '{hook="postReady"}', "value": 0.48}, {"labels": '{hook="preRetire"}', "value": 1.9499999999999997}]},
    ]}]
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    (tmp_path / "panel.test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    proc = subprocess.run([pinned_tool("promtool"), "test", "rules", "panel.test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
