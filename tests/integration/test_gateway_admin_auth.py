"""The gateway's admin API is the operator's alone (issue 41, review item 5 and design concern 4),
gateway and operator as real processes on the local plane:

- a seal without the admin key, or with another key, gets 401 and seals nothing: the runtime keeps
  serving through the gateway from its generation (before, any pod could seal a serving pod);
- a seal with the key but addressed to another Lease uid gets 409 and seals nothing;
- the operator's own seals (the key from BATON_GATEWAY_ADMIN_KEY_FILE, the Lease it listed) still
  work: a handoff through the gateway completes, the call held meanwhile answered by N+1;
- a gateway given no admin key does not start (exit 2, the variable named).
"""
from __future__ import annotations

import signal
import threading
from typing import Any, Iterator

import pytest

from dev.ports import free_port
from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, ToolFleet, call, rpc
from harness.runtimes import Runtimes, runtime_manifest

pytestmark = pytest.mark.usefixtures("kwok_nodes")


@pytest.fixture
def fleet(cluster: Any, namespace: str) -> Iterator[ToolFleet]:
    f = ToolFleet(cluster.api_client, namespace, "tool", port=free_port())
    yield f
    f.stop()


def test_an_unauthenticated_seal_is_refused_and_the_runtime_keeps_serving(
        operators: Any, gateways: Any, rts: Runtimes, namespace: str, fleet: ToolFleet) -> None:
    gw: GatewayProcess = gateways("gw-a")
    operators("op-a", env={"BATON_SYSTEM_NAMESPACE": namespace})
    m = runtime_manifest("tool", service=True, loopback=True, budgets={"drainSeconds": 30})
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": fleet.port}]
    m["spec"]["service"] = {"ports": [{"port": 80, "targetPort": "http"}], "gateway": True}
    m["spec"]["budgets"]["admissionSeconds"] = 60
    rts.create(m)
    uid1 = rts.wait_ready("tool", 1)["current"]["uid"]
    wait_for(lambda: fleet.of(1), timeout=30, what="the tool of g1")
    host = f"tool.{namespace}"
    assert call(gw.port, host, body=rpc()).generation == 1

    seal = {"namespace": namespace, "runtime": "tool", "uid": uid1}  # the harness adds the right Lease
    for key in (None, "not-the-key-" + "x" * 40):
        status, doc = gw.admin("POST", "/v1/seal", seal, key=key)
        print(f"seal with key {key and key[:12]!r}: {status} {doc}")
        assert status == 401, doc
        assert gw.admin("GET", f"/v1/inflight?uid={uid1}", key=key)[0] == 401
    status, doc = gw.admin("POST", "/v1/seal", {**seal, "lease": {"name": "baton-gateway.gw-a", "uid": "another-uid"}})
    print(f"seal addressed to another Lease uid: {status} {doc}")
    assert status == 409, doc
    assert gw.admin("GET", f"/v1/inflight?uid={uid1}") == (200, {"uid": uid1, "inflight": 0, "sealed": False,
                                                                 "sessions": [], "sessionsTruncated": False})
    # Still served by g1, at once (a sealed pod's calls would be held for admissionSeconds).
    r = call(gw.port, host, body=rpc(rid="after"))
    print(f"call after the refused seals: {r.status} g{r.generation} in {r.seconds:.3f}s")
    assert r.status == 200 and r.generation == 1 and r.json()["id"] == "after" and r.seconds < 5
    st = rts.status("tool")
    assert st["current"]["uid"] == uid1 and not st.get("transition"), st

    # The operator's seal is authenticated and addressed: a handoff through the gateway completes.
    rts.set_image("tool", "example/tool:2")
    wait_for(lambda: gw.admin("GET", f"/v1/inflight?uid={uid1}")[1]["sealed"], timeout=30,
             what="the operator sealed g1 on the gateway")
    out: list[Reply] = []
    held = threading.Thread(target=lambda: out.append(call(gw.port, host, body=rpc(rid="held"), timeout=90)))
    held.start()
    rts.wait_ready("tool", 2, timeout=60)
    held.join(90)
    assert out and out[0].status == 200 and out[0].generation == 2 and out[0].json()["id"] == "held", out
    history = rts.status("tool").get("history") or []
    assert history and history[-1]["generation"] == 1 and history[-1]["outcome"] == "Retired", history
    assert "admin API: POST /v1/seal" in gw.log_text(), "the refusal is logged"


def test_a_gateway_without_an_admin_key_does_not_start(cluster: Any, crd: None, namespace: str, tmp_path: Any) -> None:
    gw = GatewayProcess(cluster, tmp_path, identity="nokey", namespaces=[namespace], system_namespace=namespace,
                        env={"BATON_GATEWAY_ADMIN_KEY_FILE": ""})
    try:
        with pytest.raises(AssertionError, match="exited with 2"):
            gw.start(timeout=60)
        assert "BATON_GATEWAY_ADMIN_KEY_FILE is not set" in gw.log_text(), gw.log_tail()
    finally:
        if gw.proc is not None and gw.proc.poll() is None:
            gw.signal(signal.SIGKILL)
        gw.kill()
