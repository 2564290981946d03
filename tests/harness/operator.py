"""``OperatorProcess``: ``python -m baton`` in a subprocess, its own ports, killed by pid."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from dev.digestkey import ensure as ensure_digest_key
from dev.ports import free_port
from dev.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]


class ChildProcess:
    """What the harness does with a Baton process it started (the operator, the gateway): signal,
    kill (a stopped one too), wait for its exit, read its log."""

    proc: subprocess.Popen[bytes] | None
    log_path: Path

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


class OperatorProcess(ChildProcess):
    """One operator replica. Every test stops what it starts (fixture teardown kills by pid)."""

    def __init__(self, cluster: Any, log_dir: Path, *, identity: str, namespaces: list[str],
                 env: dict[str, str] | None = None, kubeconfig: str | None = None) -> None:
        self.identity = identity
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_dir / f"operator-{identity}.log"
        self.env = dict(cluster.env)
        self.env.update({
            "KUBECONFIG": kubeconfig or cluster.kubeconfig,
            "BATON_INSTANCE_ID": identity,
            "BATON_NAMESPACES": ",".join(namespaces),
            "BATON_METRICS_BIND": f"127.0.0.1:{self.metrics_port}",
            "BATON_HEALTH_BIND": f"127.0.0.1:{self.health_port}",
            "BATON_LEASE_SECONDS": "5",
            "BATON_BACKOFF_BASE_SECONDS": "2",
            # Tests never dial pod IPs outside loopback (kwok-a's 192.0.2.0/24 is not ours).
            "BATON_PROBE_ALLOWED_CIDRS": "127.0.0.0/8",
            "PYTHONUNBUFFERED": "1",
            # One key per log directory (a test's replicas share it, so they agree on every hash).
            "BATON_DIGEST_KEY_FILE": ensure_digest_key(log_dir / "digest.key"),
            # The gateway admin key: the same file the test's gateways get (harness.gateway).
            "BATON_GATEWAY_ADMIN_KEY_FILE": ensure_digest_key(log_dir / "gateway-admin.key"),
        })
        if namespaces:
            # The system namespace holds the per-runtime metrics Lease (baton.exporter): the test's
            # own, deleted with it, rather than a Lease left in `default` by every test.
            self.env["BATON_SYSTEM_NAMESPACE"] = namespaces[0]
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "OperatorProcess":
        return self.launch().wait_healthy()

    def launch(self) -> "OperatorProcess":
        """Start the process without waiting for it (several replicas start side by side)."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "baton"], env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def wait_healthy(self, timeout: float = 30) -> "OperatorProcess":
        wait_for(self.healthy, timeout=timeout, what=f"operator {self.identity} /healthz",
                 ignore=(OSError,))
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"operator {self.identity} exited with {self.proc.returncode}:\n"
                                 + self.log_tail())
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
            return r.status == 200

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric_name = head.split("{", 1)[0]
            if metric_name != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

