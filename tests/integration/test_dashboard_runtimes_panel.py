"""The dashboard's "Runtimes by condition" panel counts every runtime once, however the replicas
report them, evaluated by the pinned promtool (`promtool test rules`, promql_expr_test):

- unsharded, the metrics Lease's holder reports every runtime and the other replica none;
- unsharded without that Lease (RBAC refuses it), every replica reports every runtime;
- sharded (`baton_shard_ranges` > 0), each replica reports its own ranges' runtimes, so the
  count is the sum of the replicas' shares (a `max` showed one replica's share only).

promtool is the one `make tools` builds (hack/versions.env); a missing one fails, never skips.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from harness import prometheus
from harness.tools import pinned_tool

TITLE = "Runtimes by condition"


def panel_expr() -> str:
    [expr] = [expr for title, expr in prometheus.dashboard_queries() if title == TITLE]
    return expr


def series(name: str, pod: str, value: int, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f'{name}{{job="baton-metrics",namespace="baton-system",pod="{pod}"{extra}}}',
            "values": f"{value}x10"}


def case(name: str, reports: dict[str, tuple[int, int]], *, ranges: int) -> dict[str, object]:
    """`reports`: per replica pod, the (Ready=true, Ready=false) counts it exports (absent: none)."""
    inputs = [series("baton_shard_ranges", pod, ranges) for pod in ("baton-a", "baton-b")]
    for pod, (ready, not_ready) in reports.items():
        inputs.append(series("baton_runtimes", pod, ready, condition="Ready", status="true"))
        inputs.append(series("baton_runtimes", pod, not_ready, condition="Ready", status="false"))
    # Another release's operator in another namespace, same job name: never counted.
    inputs.append({"series": 'baton_runtimes{job="baton-metrics",namespace="other-system",pod="x",'
                             'condition="Ready",status="true"}', "values": "999x10"})
    return {"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": [{
        "expr": panel_expr(), "eval_time": "5m",
        "exp_samples": [{"labels": '{condition="Ready",status="false"}', "value": 400},
                        {"labels": '{condition="Ready",status="true"}', "value": 600}]}]}


def test_the_runtimes_panel_counts_each_runtime_once_sharded_or_not(tmp_path: Path) -> None:
    tests = [
        case("unsharded: the metrics Lease's holder reports all", {"baton-a": (600, 400)}, ranges=0),
        case("unsharded, no metrics Lease: every replica reports all",
             {"baton-a": (600, 400), "baton-b": (600, 400)}, ranges=0),
        case("sharded: each replica its own ranges", {"baton-a": (350, 150), "baton-b": (250, 250)}, ranges=16),
    ]
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    (tmp_path / "panel.test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    proc = subprocess.run([pinned_tool("promtool"), "test", "rules", "panel.test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
