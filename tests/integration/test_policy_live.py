"""spec.handoff.policy against the real API server, the operator as a real process: Manual waits
for a reset naming the current generation; WhenIdle waits for the drain probe (dialled only by
the Lease holder, at most every 5 s) to say idle, or at most budgets.pendingSeconds.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import pytest

from dev.ports import free_port
from dev.wait import stays, wait_for
from harness import badprobe
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]


def _cond(rts: Runtimes, name: str, kind: str) -> dict[str, Any]:
    return rts.condition(name, kind) or {}


def _with_policy(manifest: dict[str, Any], policy: str) -> dict[str, Any]:
    manifest["spec"]["handoff"] = {"policy": policy}
    return manifest


def test_manual_policy_waits_for_a_reset_naming_the_current_generation(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    operators("op-a")
    rts.create(_with_policy(runtime_manifest("man"), "Manual"))
    rts.wait_ready("man", 1)
    rts.set_image("man", "example/tool:2")
    wait_for(lambda: _cond(rts, "man", "UpdatePending").get("status") == "True", timeout=15, what="UpdatePending")
    pending = _cond(rts, "man", "UpdatePending")
    assert pending["reason"] == "WaitingForReset" and 'baton.dev/reset: "1"' in pending["message"]
    assert pending["message"].startswith("template changed since generation 1 started")
    assert rts.status("man")["pending"]["changed"] == ["template"]
    stays(lambda: not pod_watch.added_gen("man", 2) and not pod_watch.deleted_gen("man", 1), duration=5,
          what="no handoff without a reset")
    rts.annotate("man", "baton.dev/reset", "1")
    rts.wait_ready("man", 2, timeout=60)
    assert rts.pod("man").spec.containers[0].image == "example/tool:2"
    assert _cond(rts, "man", "UpdatePending")["status"] == "False" and "pending" not in rts.status("man")
    assert pod_watch.assert_one_at_a_time("man") == [1, 2]


@pytest.mark.usefixtures("kwok_nodes")
@pytest.mark.parametrize("becomes_idle", [True, False], ids=["idle", "pending-seconds-pass"])
def test_when_idle_policy_waits_for_the_drain_probe_at_most_pending_seconds(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, becomes_idle: bool) -> None:
    port = free_port()
    pending_seconds = 60 if becomes_idle else 12
    manifest = runtime_manifest("whenidle", loopback=True, budgets={"pendingSeconds": pending_seconds},
                                      drain_probe={"httpGet": {"path": "/idle", "port": port}, "periodSeconds": 1})
    rts.create(_with_policy(manifest, "WhenIdle"))
    operators("op-a")
    rts.wait_ready("whenidle", 1)
    ip = rts.gen_pod("whenidle", 1).status.pod_ip
    assert ip.startswith("127."), ip
    server = badprobe.idle_after(ip, port, seconds=math.inf)
    try:
        rts.set_image("whenidle", "example/tool:2")
        changed = time.monotonic()
        wait_for(lambda: _cond(rts, "whenidle", "UpdatePending").get("reason") == "WaitingForIdle", timeout=15,
                 what="UpdatePending WaitingForIdle")
        # Two checks *answered* busy: a check accepted but not yet answered when make_idle()
        # runs would be answered idle (CI saw it: one busy check before the first idle answer).
        wait_for(lambda: sum(c.answered == 503 for c in server.connections()) >= 2, timeout=15,
                 what="two idle checks answered busy")
        assert not pod_watch.added_gen("whenidle", 2) and not pod_watch.deleted_gen("whenidle", 1)
        if becomes_idle:
            server.make_idle()
        rts.wait_ready("whenidle", 2, timeout=pending_seconds + 40)
    finally:
        server.stop()
    [g1_deleted] = pod_watch.deleted_gen("whenidle", 1)
    # The checks while the change waited: before the probe said idle, or before pendingSeconds
    # could have run out (after that the handoff's own Draining step probes every periodSeconds).
    first_idle = server.first_idle_answer()
    end = first_idle if becomes_idle else changed + pending_seconds - 1.0
    checks = [c.accepted for c in server.connections() if end is not None and c.accepted < end]
    assert len(checks) >= 2
    # While waiting, the probe ran at most once per check interval (5 s), not every periodSeconds.
    gaps = [b - a for a, b in zip(checks, checks[1:])]
    assert all(g >= 4.0 for g in gaps), f"idle checks closer than the interval: {gaps}"
    entry = rts.status("whenidle")["history"][0]
    assert entry["generation"] == 1
    if becomes_idle:
        assert first_idle is not None and g1_deleted.received > first_idle
    else:
        assert g1_deleted.received - changed >= pending_seconds - 1.0
    assert _cond(rts, "whenidle", "UpdatePending")["status"] == "False"
    assert pod_watch.assert_one_at_a_time("whenidle") == [1, 2]
