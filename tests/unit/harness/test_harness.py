"""The test harness itself, without a cluster: bounded waits, kwok stages, plane settings."""
from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from dev import ports
from dev.wait import WaitTimeout, stays, wait_for
from harness import kwok
from harness.cluster import load_plane_module

REPO = Path(__file__).resolve().parents[3]


def test_wait_for_returns_the_first_truthy_value() -> None:
    calls = iter([None, 0, "ok"])
    assert wait_for(lambda: next(calls), timeout=2, interval=0.01, what="x") == "ok"


def test_wait_for_is_bounded_in_time_and_count() -> None:
    calls = []
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout, match="never"):
        wait_for(lambda: calls.append(1), timeout=0.3, interval=0.05, what="never")
    assert time.monotonic() - t0 < 1.0
    assert len(calls) <= int(0.3 / 0.05) + 1


def test_wait_for_ignores_only_listed_exceptions() -> None:
    def boom() -> bool:
        raise KeyError("x")
    with pytest.raises(WaitTimeout):
        wait_for(boom, timeout=0.1, interval=0.02, what="k", ignore=(KeyError,))
    with pytest.raises(KeyError):
        wait_for(boom, timeout=0.1, interval=0.02, what="k")


def test_stays_fails_when_the_condition_breaks() -> None:
    values = iter([True, True, False, True])
    with pytest.raises(AssertionError, match="stopped holding"):
        stays(lambda: next(values), duration=1, interval=0.01, what="v")


def test_kwok_stages_parse_and_use_the_documented_annotations() -> None:
    stages = {}
    for path in sorted((REPO / "hack" / "kwok").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert doc["kind"] == "Stage" and doc["apiVersion"] == "kwok.x-k8s.io/v1alpha1", path
        stages[doc["metadata"]["name"]] = doc
    assert {"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-never-ready",
            "pod-unready", "pod-delete", "pod-delete-after"} <= set(stages)
    text = "".join((REPO / "hack" / "kwok" / f"{n}.yaml").read_text() for n in stages)
    readme = (REPO / "tests" / "README.md").read_text()
    for ann in (kwok.NEVER_READY, kwok.TERMINATE_AFTER):
        assert ann in text and ann in readme
    delete = stages["pod-delete"]["spec"]
    assert delete["delay"]["durationFrom"]["expressionFrom"] == ".metadata.deletionTimestamp"
    assert delete["next"]["delete"] is True


def test_plane_nodes_and_network_rule() -> None:
    plane = load_plane_module()
    nodes = {n["name"]: n for n in plane.NODES}
    assert ipaddress.ip_network(nodes["kwok-loop"]["podCIDR"]).subnet_of(
        ipaddress.ip_network("127.0.0.0/8"))
    assert nodes["kwok-loop"]["taints"] and not nodes["kwok-a"]["taints"]
    assert ipaddress.ip_network(nodes["kwok-a"]["podCIDR"]) == kwok.NODE_CIDR
    with pytest.raises(plane.PlaneError):
        plane.http_get("192.0.2.1", 80, "/", None)
    ports = plane.free_ports(6)
    assert len(set(ports)) == 6
    assert "garbage-collector-controller" in plane.CONTROLLERS


def test_free_ports_drawn_at_once_by_many_threads_are_distinct_and_bindable() -> None:
    # Chaos lanes start their replicas at the same moment; two of them once got the same port.
    drawn: list[int] = []
    barrier = threading.Barrier(8)

    def draw() -> None:
        barrier.wait()
        drawn.extend(ports.free_port() for _ in range(25))

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(drawn) == 200 and len(set(drawn)) == 200
    lo, _hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert max(drawn) < lo  # outside the range outgoing connections take their ports from
    for port in drawn[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_claimed_by_a_live_process_is_not_handed_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A chaos run and a test run side by side: each skips the ports the other holds a claim on.
    monkeypatch.setattr(ports, "_PORT_CLAIMS", tmp_path)
    (tmp_path / "20001").write_text(str(os.getppid()))  # a live claimant
    assert not ports._claim(20001)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "20002").write_text(gone.stdout.strip())  # its claimant exited
    assert ports._claim(20002)
    assert (tmp_path / "20002").read_text() == str(os.getpid())


def test_pod_manifest_and_loopback_guard() -> None:
    pod = kwok.pod_manifest("p", loopback=True, never_ready=True, terminate_after="3s",
                            finalizers=["x/y"], grace_seconds=2)
    assert pod["spec"]["nodeSelector"] == {kwok.LOOPBACK_LABEL: "true"}
    assert pod["spec"]["tolerations"][0]["key"] == kwok.LOOPBACK_TAINT_KEY
    assert pod["metadata"]["annotations"] == {kwok.NEVER_READY: "true", kwok.TERMINATE_AFTER: "3s"}
    assert pod["metadata"]["finalizers"] == ["x/y"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 2
    assert kwok.assert_loopback("127.0.100.7") == "127.0.100.7"
    with pytest.raises(AssertionError):
        kwok.assert_loopback("192.0.2.1")
