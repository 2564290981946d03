"""A real Prometheus for tests: the server `make tools` builds from the pinned Prometheus module.

- ``chart_rules(**alert_values)``: the chart's PrometheusRule rendered for release "baton" in
  namespace "baton-system", extracted by hack/extract-alert-rules.py into a rules file's text.
- ``Prometheus(workdir, rules, target_port)``: scrapes one operator's /metrics on 127.0.0.1 the
  way the chart's ServiceMonitor does (job "baton-metrics", target label
  namespace="baton-system", honor_labels), every second, and evaluates ``rules`` every second.
  ``.start()``, ``.stop()``, ``.query(expr)``, ``.alerts(name, **labels)``.
- ``stuck_threshold_in_runbook()``: the budgets whose sum docs/runbooks.md says BatonTransitionStuck
  compares with.

Only loopback addresses are dialled.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from dev.ports import free_port
from dev.wait import wait_for
from harness.chart import CHART, ROOT, helm
from harness.tools import pinned_tool

RELEASE, RELEASE_NAMESPACE, JOB = "baton", "baton-system", "baton-metrics"
RUNBOOKS = "https://git.example.internal/platform/baton/-/blob/main/docs/runbooks.md"
DASHBOARD = CHART / "dashboards" / "baton.json"
# What Grafana puts in for the dashboard's variables: our scrape job and namespace, no `cluster`
# label (one Prometheus, one cluster: cluster="" matches the series without it), the chart's
# gateway job, and a rate window that covers a whole test.
DASHBOARD_VARIABLES = {"$job": JOB, "$namespace": RELEASE_NAMESPACE, "$cluster": "",
                       "$gateway_job": "baton-gateway-metrics", "$__rate_interval": "10m"}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, query with the variables filled in) of every panel of the chart's dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in sorted(DASHBOARD_VARIABLES.items(), key=lambda kv: -len(kv[0])):  # $gateway_job before $job
                expr = expr.replace(var, value)
            assert "$" not in expr, f"panel {panel['title']!r}: a variable this harness does not know: {expr}"
            out.append((panel["title"], expr))
    return out


def chart_rules(**alerts: str) -> str:
    sets = ["--set", "prometheusRule.enabled=true", "--set", f"prometheusRule.runbookBaseUrl={RUNBOOKS}"]
    for k, v in alerts.items():
        sets += ["--set", f"prometheusRule.alerts.{k}={v}"]
    rendered = helm("template", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, *sets).stdout
    return subprocess.run([sys.executable, str(ROOT / "hack" / "extract-alert-rules.py")], input=rendered,
                          capture_output=True, text=True, timeout=60, check=True).stdout


def stuck_threshold_in_runbook() -> list[str]:
    runbook = (ROOT / "docs" / "runbooks.md").read_text()
    section = runbook.split("## BatonTransitionStuck", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"sum of the runtime's budgets \(`([^`]*)`\)", " ".join(section.split()))
    assert m, "the BatonTransitionStuck runbook no longer states the sum of budgets"
    return [t.strip() for t in m.group(1).split("+")]


class Prometheus:
    def __init__(self, workdir: Path, rules: str, target_port: int) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        (self.dir / "rules.yaml").write_text(rules)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.dir / "rules.yaml")],
            "scrape_configs": [{
                "job_name": JOB,
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"],
                                    "labels": {"namespace": RELEASE_NAMESPACE, "pod": "baton-test"}}],
            }],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = self.dir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Prometheus":
        binary = pinned_tool("prometheus")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir)

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, \
                f"prometheus exited {self.proc and self.proc.returncode}:\n{self.log_tail()}"
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)

        wait_for(ready, timeout=60, what="prometheus /-/ready", ignore=(OSError,))
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None:
            self._log.close()

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422: a bad query, with Prometheus' message
            body = json.loads(e.read() or b"{}")
        assert body.get("status") == "success", f"GET {url}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def alerts(self, name: str, **labels: str) -> list[dict[str, Any]]:
        """Pending and firing alerts `name` whose labels include `labels` (resolved ones are gone)."""
        return [a for a in self.api("alerts")["alerts"]
                if a["labels"].get("alertname") == name and all(a["labels"].get(k) == v for k, v in labels.items())]
