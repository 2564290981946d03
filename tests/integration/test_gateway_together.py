"""Operator and gateway together, as real processes (issue 24): with spec.service.gateway true
and no drain probe, a slow call in flight on N finishes on N, and the handoff deletes N soon after
that call ends, far below drainSeconds (the operator seals every live gateway replica and reads
its in-flight count); calls arriving meanwhile are held and answered by N+1."""
from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

pytestmark = pytest.mark.usefixtures("kwok_nodes")
DRAIN_SECONDS = 60
SLOW_SECONDS = 6


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


def test_a_slow_call_finishes_on_n_and_the_handoff_ends_right_after_it(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet, pod_watch: PodWatch) -> None:
    gw: GatewayProcess = gateways("gw-a")
    op: OperatorProcess = operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    m = runtime_manifest("tool", service=True, loopback=True, budgets={"drainSeconds": DRAIN_SECONDS})
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    m["spec"]["budgets"]["admissionSeconds"] = 60
    rts.create(m)
    st = rts.wait_ready("tool", 1)
    uid1 = st["current"]["uid"]
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    out: dict[str, Reply] = {}
    finished: dict[str, float] = {}

    def run(name: str, body: bytes) -> None:
        out[name] = call(gw.port, host, body=body, timeout=120)
        finished[name] = time.monotonic()

    slow = threading.Thread(target=run, args=("slow", rpc("slow", seconds=SLOW_SECONDS)))
    slow.start()
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["inflight"] == 1, timeout=10, what="the slow call in flight")
    t_change = time.monotonic()
    rts.set_image("tool", "example/tool:2")
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["sealed"], timeout=30, what="g1 sealed on the gateway")
    # A call arriving now is held (N is sealed) and answered by N+1.
    quick = threading.Thread(target=run, args=("quick", rpc(rid="q")))
    quick.start()
    slow.join(60)
    quick.join(90)
    rts.wait_ready("tool", 2, timeout=60)
    deleted = next((e.received for e in pod_watch.snapshot() if e.uid == uid1 and e.deleting), None)
    assert deleted is not None
    print(f"slow call: {out['slow'].status} g{out['slow'].generation} ended {finished['slow'] - t_change:.2f}s after the "
          f"change; g1 deleted {deleted - finished['slow']:+.2f}s after it ended (drainSeconds={DRAIN_SECONDS}); "
          f"quick call held {out['quick'].seconds:.2f}s, answered by g{out['quick'].generation}")
    assert out["slow"].status == 200 and out["slow"].generation == 1 and out["slow"].json()["result"]["gen"] == 1
    assert deleted >= finished["slow"] - 0.5, "N was deleted while its call was in flight"
    assert deleted - finished["slow"] < 10, "the handoff did not end soon after the last call"
    assert deleted - t_change < DRAIN_SECONDS / 2
    assert out["quick"].status == 200 and out["quick"].generation == 2 and out["quick"].json()["id"] == "q"
    history = rts.status("tool").get("history") or []
    assert history and history[-1]["generation"] == 1 and history[-1]["outcome"] == "Retired", history
    assert op.proc is not None and op.proc.poll() is None
