"""The gateway's wake demand on the real API server (issue 43; docs/gateway.md, "Idle runtimes and
wake"): the gateway as a real process, a runtime whose status says idle (status.idle.since,
written through the status subresource: no operator runs, so nothing wakes it).

- ping gets 503 Idle at once and is no demand: the Lease has no baton.dev/wake-demand;
- a tools/call is held: within moments (far below the Lease's renewal period) the replica's
  registration Lease carries the runtime in baton.dev/wake-demand, as the operator will read it;
- at spec.idle.wakeSeconds the call is answered 503 WakeTimeout with Retry-After and
  Baton-Held-Ms, and the annotation goes; the replica keeps forwarding (its Lease still its own).
"""
from __future__ import annotations

import datetime
import json
import threading
import time
from typing import Any

from kubernetes import client

from dev.wait import wait_for
from harness.gateway import GatewayProcess, Reply, call, rpc
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest

WAKE_SECONDS = 6
# Renewals every 10 s: a demand seen in the Lease sooner was written for the demand, not renewed.
LEASE_SECONDS = 30


def _demand(cluster: Any, gw: GatewayProcess) -> list[str] | None:
    lease = client.CoordinationV1Api(cluster.api_client).read_namespaced_lease(
        f"baton-gateway.{gw.identity}", gw.system_namespace)
    text = (lease.metadata.annotations or {}).get("baton.dev/wake-demand")
    return json.loads(text) if text is not None else None


def test_a_call_held_for_an_idle_runtime_is_demand_on_the_gateways_lease_until_it_is_answered(
        cluster: Any, gateways: Any, rts: Runtimes, namespace: str) -> None:
    m = runtime_manifest("sleepy", service=True, budgets={"admissionSeconds": 60})
    m["spec"]["service"]["gateway"] = True
    m["spec"]["idle"] = {"afterSeconds": 60, "wakeSeconds": WAKE_SECONDS}
    rts.create(m)
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rts.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "sleepy", {"status": {
        "idle": {"since": since},
        "conditions": [{"type": "Ready", "status": "False", "reason": "Idle", "message": f"idle since {since}",
                        "lastTransitionTime": since}]}})
    assert rts.status("sleepy")["idle"]["since"], "the CRD keeps status.idle.since"
    gw: GatewayProcess = gateways("gw-a", env={"BATON_GATEWAY_LEASE_SECONDS": str(LEASE_SECONDS)})
    host = f"sleepy.{namespace}"

    ping = call(gw.port, host, body=rpc("ping", rid="p"))
    print(f"ping: {ping.status} {ping.headers.get('baton-reason')} in {ping.seconds:.3f}s")
    assert ping.status == 503 and ping.headers["baton-reason"] == "Idle" and ping.seconds < 2
    assert ping.headers["retry-after"] == str(WAKE_SECONDS) and "baton-held-ms" not in ping.headers
    assert _demand(cluster, gw) is None

    out: list[Reply] = []
    started = time.monotonic()
    held = threading.Thread(target=lambda: out.append(call(gw.port, host, body=rpc("tools/call", rid="w"), timeout=60)))
    held.start()
    try:
        wait_for(lambda: _demand(cluster, gw) == [f"{namespace}/sleepy"], timeout=5,
                 what="the held call's runtime in the gateway Lease's wake-demand annotation")
        seen = time.monotonic() - started
        print(f"demand in the Lease {seen:.2f}s after the call")
        assert seen < LEASE_SECONDS / 3, "written for the demand, not at the next renewal"
        assert not out, "still held"
    finally:
        held.join(WAKE_SECONDS + 30)
    assert out, "the held call was answered"
    r = out[0]
    print(f"held call: {r.status} {r.headers.get('baton-reason')} after {r.seconds:.2f}s, "
          f"Baton-Held-Ms {r.headers.get('baton-held-ms')}")
    assert r.status == 503 and r.headers["baton-reason"] == "WakeTimeout" and r.json()["id"] == "w"
    assert WAKE_SECONDS - 0.5 <= r.seconds < WAKE_SECONDS + 5 and r.headers["retry-after"] == str(WAKE_SECONDS)
    assert (WAKE_SECONDS - 0.5) * 1000 <= int(r.headers["baton-held-ms"]) <= r.seconds * 1000
    wait_for(lambda: _demand(cluster, gw) is None, timeout=5, what="the demand removed once the call was answered")
    # The demand writes are the replica's own: it still forwards (a write of someone else's would
    # have stopped it), and its hold histogram counted the refused wake hold.
    assert gw.ready()
    assert gw.metric("baton_gateway_wake_hold_seconds_count", outcome="refused") == 1
