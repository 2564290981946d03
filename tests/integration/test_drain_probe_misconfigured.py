"""A drain probe on a path the tool does not have (issue 24, Deliver 4), on the real plane: the
tool is harness.badprobe.NoSuchEndpoint (404 to everything) bound on the kwok-loop pod's IP.

- Said at once: when the generation becomes Ready, Degraded=True DrainProbeMisconfigured and a
  Warning event (the old behaviour: nothing said until a drain waited drainSeconds on 404s).
- Not "busy": the next handoff's drain ends at once, far below drainSeconds, and the history
  says the retire was not drained.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness import badprobe
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]
NEVER_READY = "baton.dev/test-never-ready"


@pytest.mark.usefixtures("kwok_nodes")
def test_a_probe_the_tool_has_no_endpoint_for_is_said_at_once_and_never_waited_for(
        operators: Start, rts: Runtimes, pod_watch: PodWatch) -> None:
    port = free_port()
    drain_seconds = 30
    # Not Ready until the tool listens on the pod's IP (the check runs when it becomes Ready).
    rts.create(runtime_manifest("nopath", loopback=True, pod_annotations={NEVER_READY: "true"},
                                budgets={"drainSeconds": drain_seconds, "connectSeconds": 60},
                                drain_probe={"httpGet": {"path": "/idle", "port": port}, "periodSeconds": 1}))
    operators("op-a")

    def pod_ip() -> str | None:
        pod = rts.pod("nopath")
        return pod.status.pod_ip if pod is not None and pod.status is not None else None

    ip = wait_for(pod_ip, timeout=30, what="g1's pod IP")
    assert ip.startswith("127."), ip
    with badprobe.no_such_endpoint(ip, port) as tool:
        rts.core.patch_namespaced_pod("nopath", rts.ns, {"metadata": {"annotations": {NEVER_READY: None}}})
        rts.wait_ready("nopath", 1)
        degraded = rts.condition("nopath", "Degraded")
        assert degraded is not None and degraded["status"] == "True", degraded
        assert degraded["reason"] == "DrainProbeMisconfigured" and "answered 404" in degraded["message"], degraded
        [event] = rts.events_posted("nopath", "DrainProbeMisconfigured")
        assert "GET /idle" in event.message and "answered 404" in event.message, event.message
        asked = len(tool.connections())
        assert asked >= 1 and all(c.request_line == "GET /idle HTTP/1.1" for c in tool.connections())
        # A template change (the annotation goes: g2 is Ready at once).
        rts.patch("nopath", {"spec": {"template": {"metadata": {"annotations": {NEVER_READY: None}}}}})
        began = time.monotonic()
        st = rts.wait_ready("nopath", 2, timeout=40)
    g1 = pod_watch.added_gen("nopath", 1)[0].uid
    deleted = next(e.received for e in pod_watch.snapshot() if e.uid == g1 and e.deleting)
    print(f"g1 deleted {deleted - began:.2f} s after the template change (drainSeconds {drain_seconds})")
    assert deleted - began < 10.0, "the 404s were waited for as busy"
    entry: dict[str, Any] = st["history"][0]
    assert entry["message"].startswith("not drained: spec.drain.probe GET /idle"), entry
    assert pod_watch.assert_one_at_a_time("nopath") == [1, 2]
