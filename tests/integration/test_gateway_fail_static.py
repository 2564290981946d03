"""Fail static (issue #41, deliverable 9; docs/gateway.md, "When the API server is away"), on the
local plane with the real operator and a real gateway process. The gateway reaches the API server
through a loopback proxy the test controls (harness.apiproxy); `blackhole()` takes the API server
away from the gateway alone (its requests never answered, its watches silent), the operator keeps
its own direct connection.

- Away for 40 s: calls to a runtime in steady state keep being forwarded throughout (before, every
  call was held from duration - margin on, then refused); calls to a runtime whose view shows a
  transition are held, then refused 503 Transitioning at their admissionSeconds. Back: the gateway
  registers, lists again, and serves the runtime on its next generation.
- The safety side: while the gateway is cut off, a template change of the steady runtime still
  completes, and no call reaches N after the seal: the operator keeps asking the lapsed replica
  (its Lease announces its static window) and seals it through its admin address. Before, the
  operator dropped the replica one duration after its last renewal and retired N under it.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client

from dev.ports import free_port
from dev.wait import wait_for
from harness.apiproxy import ApiProxy
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
from harness.kwok import NEVER_READY
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")
ADMISSION = 5
# Ten times the point where the registration lapses (6 s Lease - 2 s margin), several renewals
# timing out in full (10 s read bound each), three calls to `moving` held to ADMISSION at 12, 24
# and 36 s; the static window (STATIC_SECONDS) and the watches' 90 s read bound are further out.
AWAY_SECONDS = 40.0
STATIC_SECONDS = 120  # the harness's Lease is 6 s: the window covers the whole outage


@pytest.fixture
def api_proxy(cluster: Any, tmp_path: Any) -> Iterator[ApiProxy]:
    with ApiProxy(cluster.kubeconfig, tmp_path, name="gateway-api") as p:
        yield p


@pytest.fixture
def fleets(cluster: Any, namespace: str) -> Iterator[Callable[[str], ToolFleet]]:
    started: list[ToolFleet] = []

    def start(runtime: str) -> ToolFleet:
        f = ToolFleet(cluster.api_client, namespace, runtime, port=free_port())
        started.append(f)
        return f
    yield start
    for f in started:
        f.stop()


def _create(rts: Runtimes, name: str, fleet: ToolFleet, **budgets: int) -> None:
    m = runtime_manifest(name, service=True, loopback=True, budgets={"admissionSeconds": ADMISSION, **budgets})
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    rts.create(m)


def _gateway(gateways: Any, api_proxy: ApiProxy) -> GatewayProcess:
    gw: GatewayProcess = gateways("gw-a", env={"KUBECONFIG": api_proxy.kubeconfig,
                                               "BATON_GATEWAY_STATIC_SECONDS": str(STATIC_SECONDS)})
    return gw


def _lease_version(cluster: Any, namespace: str) -> str:
    lease = client.CoordinationV1Api(cluster.api_client).read_namespaced_lease("baton-gateway.gw-a", namespace)
    assert lease.metadata is not None
    return str(lease.metadata.resource_version)


def test_steady_runtimes_are_served_while_the_api_server_is_away_transitions_wait(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, cluster: Any,
        fleets: Callable[[str], ToolFleet], api_proxy: ApiProxy) -> None:
    gw = _gateway(gateways, api_proxy)
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    steady_fleet, moving_fleet = fleets("steady"), fleets("moving")
    _create(rts, "steady", steady_fleet)
    _create(rts, "moving", moving_fleet, connectSeconds=600)
    rts.wait_ready("steady", 1)
    rts.wait_ready("moving", 1)
    wait_for(lambda: steady_fleet.of(1) and moving_fleet.of(1), timeout=30, what="the tools of g1")
    steady_host, moving_host = f"steady.{namespace}", f"moving.{namespace}"
    wait_for(lambda: call(gw.port, steady_host, body=rpc(), timeout=10).status == 200, timeout=30,
             what="steady served through the gateway")
    # moving: a template change whose N+1 never becomes Ready (a Handoff retires N first): its
    # transition stays in Connecting.
    rt = rts.get("moving")
    tmpl = rt["spec"]["template"]
    tmpl["metadata"]["annotations"] = {**(tmpl["metadata"].get("annotations") or {}), NEVER_READY: "true"}
    rts.patch("moving", {"spec": {"template": tmpl}})
    wait_for(lambda: (rts.status("moving").get("transition") or {}).get("step") == "Connecting", timeout=30,
             what="moving's transition in Connecting")
    before = _lease_version(cluster, namespace)

    api_proxy.blackhole()
    away = time.monotonic()
    served = 0
    moving_replies: list[Reply] = []
    while time.monotonic() - away < AWAY_SECONDS:
        r = call(gw.port, steady_host, body=rpc(rid=served), timeout=30)
        assert r.status == 200 and r.generation == 1, \
            f"{time.monotonic() - away:.1f}s after the API server went away: {r.status} {r.body[:300]!r}\n{gw.log_tail(30)}"
        served += 1
        if len(moving_replies) < 3 and time.monotonic() - away > 12 * (len(moving_replies) + 1):
            moving_replies.append(call(gw.port, moving_host, body=rpc(rid="m"), timeout=30))
        time.sleep(0.5)
    assert _lease_version(cluster, namespace) == before, "the gateway renewed its Lease: the API server was not away"
    print(f"{served} calls to steady answered by g1 during {AWAY_SECONDS:.0f}s without the API server; "
          f"moving: {[(m.status, m.headers.get('baton-reason'), round(m.seconds, 1)) for m in moving_replies]}")
    assert len(moving_replies) == 3
    for m in moving_replies:
        # Held (no serving generation, a transition in its view), then refused with the reason
        # at admissionSeconds.
        assert m.status == 503 and m.headers.get("baton-reason") == "Transitioning", (m.status, m.body[:300])
        assert ADMISSION - 0.5 <= m.seconds <= ADMISSION + 3, m.seconds
        assert m.json()["id"] == "m", m.body
    assert not [e for s in moving_fleet.servers for e in s.requests if e["at"] > away], "moving called while away"

    api_proxy.restore()
    # N+1 becomes Ready (kwok reads the pod's annotation): the transition completes, and the
    # gateway, back in touch, serves the runtime on g2.
    pod = rts.gen_pod("moving", 2)
    assert pod is not None and pod.metadata is not None
    client.CoreV1Api(cluster.api_client).patch_namespaced_pod(pod.metadata.name, namespace,
                                                               {"metadata": {"annotations": {NEVER_READY: None}}})
    rts.wait_ready("moving", 2, timeout=60)
    wait_for(lambda: call(gw.port, moving_host, body=rpc(), timeout=30).generation == 2, timeout=120,
             what="moving served on g2 through the gateway, back in touch")
    assert call(gw.port, steady_host, body=rpc(), timeout=30).status == 200


def test_a_cut_off_replica_is_sealed_through_its_admin_address_and_no_call_reaches_n_after(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, cluster: Any,
        fleets: Callable[[str], ToolFleet], api_proxy: ApiProxy) -> None:
    gw = _gateway(gateways, api_proxy)
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    fleet = fleets("steady")
    _create(rts, "steady", fleet, drainSeconds=60)
    st = rts.wait_ready("steady", 1)
    uid1 = st["current"]["uid"]
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"steady.{namespace}"
    wait_for(lambda: call(gw.port, host, body=rpc(), timeout=10).status == 200, timeout=30, what="served")

    api_proxy.blackhole()
    away = time.monotonic()
    before = _lease_version(cluster, namespace)
    # Past the Lease's duration (6 s): the operator sees the Lease stopped, the replica is lapsed.
    while time.monotonic() - away < 8.0:
        r = call(gw.port, host, body=rpc(), timeout=30)
        assert r.status == 200 and r.generation == 1, (r.status, r.body[:300])
        time.sleep(0.3)
    assert _lease_version(cluster, namespace) == before

    replies: list[tuple[float, Reply]] = []
    stop = threading.Event()

    def caller() -> None:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            replies.append((started, call(gw.port, host, body=rpc(rid=len(replies)), timeout=30)))
            time.sleep(0.2)
    t = threading.Thread(target=caller, daemon=True)
    t.start()
    try:
        rts.set_image("steady", "example/tool:2")
        wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["sealed"], timeout=60,
                 what="g1 sealed on the cut-off gateway by the operator")
        sealed_seen = time.monotonic()
        rts.wait_ready("steady", 2, timeout=90)
        wait_for(lambda: len([s for s, _ in replies if s >= sealed_seen]) >= 2, timeout=30,
                 what="two calls made after the seal answered")
    finally:
        stop.set()
        t.join(40)
    n = fleet.of(1)
    assert n is not None
    late = [e for e in n.requests if e["at"] >= sealed_seen]
    assert not late, f"{len(late)} calls reached N after its seal"
    after = [r for s, r in replies if s >= sealed_seen]
    assert after, "no call was made after the seal"
    assert all(not (r.status == 200 and r.generation == 1) for r in after), [(r.status, r.generation) for r in after]
    refused = [r for r in after if r.status == 503]
    assert refused and all(r.headers.get("baton-reason") == "Transitioning" for r in refused), \
        [(r.status, r.headers.get("baton-reason")) for r in after]
    history = rts.status("steady").get("history") or []
    assert history and history[-1]["uid"] == uid1 and "message" not in history[-1], history
    print(f"sealed {sealed_seen - away:.1f}s after the gateway lost the API server; {len(after)} calls after it, "
          f"{len(refused)} refused Transitioning, none reached N")

    api_proxy.restore()
    wait_for(lambda: call(gw.port, host, body=rpc(), timeout=30).generation == 2, timeout=120,
             what="served by g2 once the gateway is back in touch")
