"""The chart's alerts: scoped to the release, with absolute runbook links, and under
`promtool test rules`.

promtool is the one `make tools` builds from the pinned Prometheus Go module (hack/versions.env),
not one on PATH; a missing one fails, it is never a silent skip. The rules are rendered from the
chart (release "baton", namespace "baton-system", default thresholds), extracted by
hack/extract-alert-rules.py and tested with tests/alerts/baton-alerts.test.yaml.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.chart import CHART, ROOT, helm
from harness.prometheus import stuck_threshold_in_runbook
from harness.tools import pinned_tool

TEST_FILE = ROOT / "tests" / "alerts" / "baton-alerts.test.yaml"
RUNBOOKS = "https://git.example.internal/platform/baton/-/blob/main/docs/runbooks.md"


def promtool() -> str:
    return pinned_tool("promtool")


def rendered_rules(release: str = "baton", namespace: str = "baton-system", *sets: str) -> list[dict[str, Any]]:
    out = helm("template", release, str(CHART), "-n", namespace, "--set", "prometheusRule.enabled=true",
               "--set", f"prometheusRule.runbookBaseUrl={RUNBOOKS}", "--set", "gateway.enabled=true", *sets).stdout
    [rule] = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "PrometheusRule"]
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    rendered = helm("template", "baton", str(CHART), "-n", "baton-system",
                    "--set", "prometheusRule.enabled=true", "--set", "gateway.enabled=true",
                    "--set", f"prometheusRule.runbookBaseUrl={RUNBOOKS}").stdout
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "extract-alert-rules.py")],
                          input=rendered, capture_output=True, text=True, timeout=60, check=True)
    (tmp_path / "baton-rules.yaml").write_text(proc.stdout)
    shutil.copy(TEST_FILE, tmp_path / TEST_FILE.name)
    return tmp_path


def test_rendered_rules_are_valid(rules_dir: Path) -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(rules_dir / "baton-rules.yaml")],
                          capture_output=True, text=True, timeout=60)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 16 rules found" in proc.stdout


def test_alert_unit_tests_pass(rules_dir: Path) -> None:
    proc = subprocess.run([promtool(), "test", "rules", TEST_FILE.name], cwd=rules_dir,
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_every_alert_has_a_unit_test() -> None:
    text = TEST_FILE.read_text()
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()

    for alert in re.findall(r"- alert: (\w+)", rules):
        assert f"alertname: {alert}" in text, f"{alert} has no promtool test"
        assert re.search(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels", text), \
            f"{alert}: no test case where it fires"


# Every series an alert reads: Baton's metrics, the process's own and `up`.
SELECTOR = re.compile(r"\b(baton_[a-z_]+|process_[a-z_]+|up)\b\s*(\{[^}]*\})?")
# Gauges of the operator process itself: like counters, they carry the target's namespace.
PROCESS_GAUGES = {"baton_memory_limit_bytes"}


@pytest.mark.parametrize("release, namespace, sets, op_job, gw_job", [
    ("baton", "baton-system", (), "baton-metrics", "baton-gateway-metrics"),
    ("edge", "tenant-ops", (), "edge-baton-metrics", "edge-baton-gateway-metrics"),
    ("edge", "tenant-ops", ("--set", "prometheusRule.scrapeJob=kubernetes-pods",
                            "--set", "prometheusRule.gatewayScrapeJob=gw-pods"), "kubernetes-pods", "gw-pods"),
])
def test_every_expression_is_scoped_to_the_release_job_and_namespace(
        release: str, namespace: str, sets: tuple[str, ...], op_job: str, gw_job: str) -> None:
    """Another release (or another exporter with the same metric names) must neither fire nor
    silence these alerts: each expression names the release's scrape job and namespace, and each
    series it reads selects that job. promtool's cases with look-alike series prove the effect."""
    rules = rendered_rules(release, namespace, *sets)
    assert rules
    assert "BatonGatewayRefusingCalls" in {r["alert"] for r in rules}
    for r in rules:
        # The gateway's alert reads the gateway's scrape job, every other one the operator's.
        job = gw_job if r["alert"].startswith("BatonGateway") else op_job
        expr = r["expr"]
        assert f'job="{job}"' in expr, f"{r['alert']}: no job=\"{job}\" in {expr}"
        assert f'namespace="{namespace}"' in expr, f"{r['alert']}: no namespace=\"{namespace}\" in {expr}"
        selectors = SELECTOR.findall(expr)
        assert selectors, f"{r['alert']}: reads no series? {expr}"
        for metric, matchers in selectors:
            assert f'job="{job}"' in matchers, f"{r['alert']}: {metric} is not scoped to job {job}: {expr}"
            # Counters and `up` carry the target's namespace; the per-runtime gauges carry the
            # runtime's (honorLabels) and are tied to the release's targets through `up`.
            if metric == "up" or metric.endswith("_total") or metric.startswith("process_") \
                    or metric in PROCESS_GAUGES:
                assert f'namespace="{namespace}"' in matchers, f"{r['alert']}: {metric} not scoped to {namespace}"
            else:
                assert f'and on (job, instance) up{{job="{job}", namespace="{namespace}"}}' in expr, \
                    f"{r['alert']}: {metric} is not tied to the release's targets: {expr}"


def test_runbook_urls_are_absolute_and_point_at_a_runbook_section() -> None:
    anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.M)}
    for r in rendered_rules():
        assert r["annotations"]["runbook_url"] == f"{RUNBOOKS}#{r['alert'].lower()}"
        assert r["alert"].lower() in anchors, f"docs/runbooks.md has no section {r['alert']}"


@pytest.mark.parametrize("base", [None, "docs/runbooks.md", "git.example.com/baton/runbooks.md"])
def test_prometheus_rule_without_an_absolute_runbook_url_is_refused(base: str | None) -> None:
    args = ["template", "baton", str(CHART), "--set", "prometheusRule.enabled=true"]
    if base is not None:
        args += ["--set", f"prometheusRule.runbookBaseUrl={base}"]
    proc = helm(*args, check=False)
    assert proc.returncode != 0
    # Empty: the template's message; relative: the schema's pattern. Both name the value.
    assert re.search(r"prometheusRule[./]runbookBaseUrl", proc.stderr), proc.stderr


def test_stuck_alert_description_names_the_runbooks_sum_of_budgets() -> None:
    terms = stuck_threshold_in_runbook()
    assert terms and all(re.fullmatch(r"[a-z]+Seconds", t) for t in terms), terms
    [stuck] = [r for r in rendered_rules() if r["alert"] == "BatonTransitionStuck"]
    assert f"({' + '.join(terms)})" in stuck["annotations"]["description"]
