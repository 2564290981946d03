"""Sealed admission and the counted drain on the real plane (issue 24; docs/architecture.md,
"Sealed admission"): the operator as a real process, gateway replicas played by stand-ins
(harness.standin_gateway: a real Lease each in the system namespace, a real admin listener on
127.0.0.1 answering seal and in-flight from what the test sets).

- StoppingAdmission completes only once every live replica confirmed the seal; Draining is then
  entered without any drain probe and ends once no call is in flight, far below drainSeconds.
- A live replica that cannot be reached holds the step to its budget, then DrainIncomplete names
  it; calls still in flight at the budget are counted in the event and the history.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import pytest

from dev.wait import stays, wait_for
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.standin_gateway import StandinGateway
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]


@pytest.fixture
def gateways(cluster: Any, namespace: str) -> Iterator[Callable[..., StandinGateway]]:
    started: list[StandinGateway] = []

    def start(instance: str, **kw: Any) -> StandinGateway:
        g = StandinGateway(cluster.api_client, namespace, instance, **kw)
        started.append(g)
        return g
    yield start
    for g in started:
        g.close()


def _manifest(name: str, drain_seconds: int) -> dict[str, Any]:
    m = runtime_manifest(name, service=True, budgets={"drainSeconds": drain_seconds})
    m["spec"]["service"]["gateway"] = True
    return m


def _step(rts: Runtimes, name: str) -> str | None:
    return (rts.status(name).get("transition") or {}).get("step")


def _deleted_at(pod_watch: PodWatch, uid: str) -> float | None:
    return next((e.received for e in pod_watch.snapshot() if e.uid == uid and e.deleting), None)


@pytest.mark.usefixtures("kwok_nodes")
def test_seal_waits_for_every_replica_then_the_drain_for_the_last_call(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, namespace: str,
        gateways: Callable[..., StandinGateway]) -> None:
    a = gateways("gw-a")
    b = gateways("gw-b")
    b.confirm = False  # b answers 503 to every seal until told otherwise
    a.inflight = b.inflight = 1
    rts.create(_manifest("sealed", drain_seconds=60))
    op = operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.wait_ready("sealed", 1)
    uid1 = rts.gen_pod("sealed", 1).metadata.uid
    rts.set_image("sealed", "example/tool:2")
    wait_for(lambda: b.count("POST", "/v1/seal") >= 3, timeout=20, what="the operator asking b to seal, again")
    assert uid1 in a.sealed and uid1 not in b.sealed
    # Not confirmed by b: the step holds, the pod stands.
    stays(lambda: _step(rts, "sealed") == "StoppingAdmission", duration=2.0, what="StoppingAdmission without b's seal")
    assert _deleted_at(pod_watch, uid1) is None
    b.confirm = True
    wait_for(lambda: _step(rts, "sealed") == "Draining", timeout=15, what="Draining once b confirmed")
    assert uid1 in b.sealed
    # Two calls in flight (one on each replica): Draining holds, asking both.
    since = time.monotonic()
    wait_for(lambda: min(a.count("GET", "/v1/inflight", since=since), b.count("GET", "/v1/inflight", since=since)) >= 3,
             timeout=15, what="the in-flight count read from both replicas")
    assert _step(rts, "sealed") == "Draining" and _deleted_at(pod_watch, uid1) is None
    a.inflight = 0
    stays(lambda: _step(rts, "sealed") == "Draining", duration=2.0, what="Draining while b still has a call")
    b.inflight = 0
    done = time.monotonic()
    st = rts.wait_ready("sealed", 2, timeout=40)
    deleted = _deleted_at(pod_watch, uid1)
    assert deleted is not None and deleted >= done
    print(f"g1 deleted {deleted - done:.2f} s after the last call finished (drainSeconds 60)")
    assert deleted - done < 10.0, "the drain ends on the count, not on drainSeconds"
    entry = st["history"][0]
    assert entry["uid"] == uid1 and "message" not in entry, entry
    assert op.metric("baton_drain_incomplete_total") == 0
    assert pod_watch.assert_one_at_a_time("sealed") == [1, 2]


@pytest.mark.usefixtures("kwok_nodes")
@pytest.mark.parametrize("fault", ["unreachable-replica", "calls-in-flight"])
def test_the_budget_bounds_the_seal_and_the_drain_and_says_what_was_left(
        operators: Start, rts: Runtimes, pod_watch: PodWatch, namespace: str,
        gateways: Callable[..., StandinGateway], fault: str) -> None:
    drain_seconds = 6
    a = gateways("gw-a")
    dead = gateways("gw-dead", listen=False) if fault == "unreachable-replica" else None
    if fault == "calls-in-flight":
        a.inflight = 2  # never finish
    rts.create(_manifest("bounded", drain_seconds=drain_seconds))
    op = operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    rts.wait_ready("bounded", 1)
    uid1 = rts.gen_pod("bounded", 1).metadata.uid
    rts.set_image("bounded", "example/tool:2")
    wait_for(lambda: _step(rts, "bounded") in ("StoppingAdmission", "Draining"), timeout=15, what="the retire")
    entered = time.monotonic()
    st = rts.wait_ready("bounded", 2, timeout=60)
    deleted = _deleted_at(pod_watch, uid1)
    assert deleted is not None
    print(f"{fault}: g1 deleted {deleted - entered:.2f} s after the retire began (drainSeconds {drain_seconds})")
    assert deleted - entered >= drain_seconds - 1.5, "the step waited for its budget"
    message = st["history"][0].get("message") or ""
    events = " | ".join(e.message for e in rts.events_posted("bounded", "DrainIncomplete"))
    if dead is not None:
        assert "did not confirm the seal" in message and dead.lease_name in message, message
        assert dead.lease_name in events and "gw-a" not in message
        assert uid1 in a.sealed
    else:
        assert message == "drain incomplete: 2 calls still in flight at the gateway", message
        assert "2 calls still in flight" in events
    assert op.metric("baton_drain_incomplete_total") == 1
    assert pod_watch.assert_one_at_a_time("bounded") == [1, 2]
