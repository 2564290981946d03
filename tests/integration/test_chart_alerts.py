"""The chart's alerts under `promtool test rules` (promtool: Debian's `prometheus` package).

The rules are rendered from the chart (release "baton", namespace "baton-system", default
thresholds), extracted by hack/extract-alert-rules.py and tested with
tests/alerts/baton-alerts.test.yaml. A missing promtool fails: it is never a silent skip.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.chart import CHART, ROOT, helm

TEST_FILE = ROOT / "tests" / "alerts" / "baton-alerts.test.yaml"


def promtool() -> str:
    found = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if not found:
        pytest.fail("promtool not found: install Debian's prometheus package "
                    "(apt-get install -y --no-install-recommends prometheus); .ci/run does", pytrace=False)
    return found


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    rendered = helm("template", "baton", str(CHART), "-n", "baton-system",
                    "--set", "prometheusRule.enabled=true").stdout
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
    assert "SUCCESS: 6 rules found" in proc.stdout


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
