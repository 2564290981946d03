"""How `python -m baton` (operator and gateway) ends when it cannot run, and where it listens:

- a bad setting: exit code 2 and exactly one JSON line on stderr naming the variable, nothing on
  stdout, no traceback (the settings are parsed before anything else runs);
- the API server unreachable: after the bounded startup check, one JSON CRITICAL line, exit 1,
  no traceback and no aiohttp "Unclosed client session"/"Unclosed connector" noise;
- IPv6: a bind written `[::1]:port` serves on ::1, and an empty host (`:port`, the default) on
  both 127.0.0.1 and ::1."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from dev.ports import free_port
from dev.wait import wait_for
from harness.operator import ROOT, OperatorProcess

Start = Callable[..., OperatorProcess]


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("argv,variable,value", [
    (["-m", "baton"], "BATON_LEASE_SECONDS", "abc"),
    (["-m", "baton"], "BATON_METRICS_BIND", "::1:8080"),
    (["-m", "baton", "gateway"], "BATON_GATEWAY_LEASE_SECONDS", "abc"),
])
def test_a_bad_setting_is_one_json_line_on_stderr_naming_the_variable(
        cluster: Any, tmp_path: Path, argv: list[str], variable: str, value: str) -> None:
    op = OperatorProcess(cluster, tmp_path, identity="bad-setting", namespaces=["default"], env={variable: value})
    done = subprocess.run([sys.executable, *argv], env=op.env, cwd=ROOT, capture_output=True, timeout=120)
    err, out = done.stderr.decode(), done.stdout.decode()
    print(f"rc={done.returncode} stderr={err!r}")
    assert done.returncode == 2, (done.returncode, err, out)
    assert out == "", out
    [line] = err.splitlines()
    record = json.loads(line)
    assert record["severity"] == "CRITICAL" and record["variable"] == variable, record
    assert variable in record["message"] and repr(value) in record["message"], record
    assert "Traceback" not in err and "exception" not in record


def test_an_unreachable_api_server_ends_startup_with_one_line_and_no_noise(
        cluster: Any, tmp_path: Path) -> None:
    kubeconfig = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    # A loopback port nothing listens on: every connection is refused at once.
    for c in kubeconfig["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    unreachable = tmp_path / "unreachable.kubeconfig"
    unreachable.write_text(yaml.safe_dump(kubeconfig))
    op = OperatorProcess(cluster, tmp_path, identity="no-api", namespaces=["default"], kubeconfig=str(unreachable))
    op.launch()
    try:
        code = op.wait_exit(180)  # the startup check retries for 60 s
    finally:
        op.kill()
    text = op.log_text()
    print(text[-2000:])
    assert code == 1, op.log_tail()
    records = _json_lines(text)  # every line is JSON
    assert "Traceback" not in text and "Unclosed" not in text, op.log_tail()
    assert [r["severity"] for r in records].count("CRITICAL") == 1, op.log_tail()
    last = records[-1]
    assert last["severity"] == "CRITICAL" and last["message"].startswith("startup failed:"), last
    assert "Connect" in last["message"] and last["version"], last
    assert not [r for r in records if r["severity"] == "ERROR"], op.log_tail()


def test_ipv6_and_dual_stack_binds_serve(operators: Start) -> None:
    v6, dual = free_port(), free_port()
    op = operators("op-v6", wait=False)
    op.env.update({"BATON_METRICS_BIND": f"[::1]:{v6}", "BATON_HEALTH_BIND": f":{dual}"})
    op.launch()

    def get(url: str) -> tuple[int, str]:
        if op.proc is not None and op.proc.poll() is not None:
            raise AssertionError(f"the operator exited with {op.proc.returncode}:\n{op.log_tail()}")
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status), r.read().decode()

    wait_for(lambda: get(f"http://127.0.0.1:{dual}/healthz")[0] == 200, timeout=90,
             what="/healthz on 127.0.0.1 (empty host)", ignore=(OSError,))
    assert get(f"http://[::1]:{dual}/healthz")[0] == 200
    status, body = get(f"http://[::1]:{v6}/metrics")
    assert status == 200 and "baton_build_info" in body
    with pytest.raises(OSError):
        get(f"http://127.0.0.1:{v6}/metrics")  # [::1] is IPv6 only
    assert "[Errno" not in op.log_text(), op.log_tail()
