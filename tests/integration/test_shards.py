"""Replicas that split the work (issue 26 item 1; BATON_SHARD_RANGES, baton.sharding): ranges of
the runtimes' hash space held through Leases, rebalanced as replicas come and go, and each
replica acting only on the runtimes of its ranges. Every step still takes the runtime's own
Lease (tests/integration/test_replicas.py proves that fence); here: who acts, and takeover."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from kubernetes import client

from dev.wait import wait_for
from harness import shards
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest

Start = Callable[..., OperatorProcess]
LEASE_SECONDS = 5  # BATON_LEASE_SECONDS in harness.operator.OperatorProcess
RANGES = 8
NAMES = [f"s{i:02d}" for i in range(12)]


def _start(operators: Start, namespace: str, identity: str) -> OperatorProcess:
    return operators(identity, env={"BATON_SHARD_RANGES": str(RANGES), "BATON_SYSTEM_NAMESPACE": namespace})








def test_a_joining_replica_takes_its_share_and_each_acts_only_on_its_own_runtimes(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    a = _start(operators, namespace, "op-a")
    wait_for(lambda: shards.split(cluster, namespace, "op-a", ranges=RANGES), timeout=30, what="op-a alone holds every range")
    assert a.metric("baton_shard_ranges_held") == RANGES
    b = _start(operators, namespace, "op-b")
    holders = wait_for(lambda: shards.split(cluster, namespace, "op-a", "op-b", ranges=RANGES), timeout=45,
                       what="op-a handed half the ranges to op-b")
    print("ranges after op-b joined:", dict(sorted(holders.items())))
    wait_for(lambda: a.metric("baton_shard_ranges_held") == b.metric("baton_shard_ranges_held") == RANGES // 2,
             timeout=15, what="each replica's gauge says half")
    assert (a.metric("baton_shard_range_moves_total", move="handed_back") or 0) >= RANGES // 2
    for n in NAMES:
        rts.create(runtime_manifest(n))
    for n in NAMES:
        rts.wait_ready(n, 1, timeout=120)
    for n in NAMES:
        rts.set_image(n, "example/tool:2")
    for n in NAMES:
        rts.wait_ready(n, 2, timeout=120)
    # The ranges did not move meanwhile (nobody came or went): the holder written into each
    # runtime's status with its fencing token is the replica whose range the runtime falls in.
    assert shards.holders(cluster, namespace, ranges=RANGES) == holders
    acted = {n: rts.status(n)["holder"] for n in NAMES}
    owners = {n: shards.owner(rts, holders, n, ranges=RANGES) for n in NAMES}
    print("acted:", acted)
    assert acted == owners
    assert set(acted.values()) == {"op-a", "op-b"}, "12 runtimes over 8 ranges: both replicas own some"
    # Each replica began exactly the transitions of its own runtimes (12 creates + 12 handoffs).
    per = {p.identity: p.metric("baton_transitions_total") or 0 for p in (a, b)}
    mine = {i: 2 * list(owners.values()).count(i) for i in ("op-a", "op-b")}
    assert per == mine, (per, mine)
    # Each replica watches and caches only its own runtimes' pods (test_shard_watches.py has
    # the rest of the narrowed watches); the counter of what arrived is bench-scale's figure.
    for p in (a, b):
        assert p.metric("baton_cache_objects", kind="Pod") == list(owners.values()).count(p.identity)
        assert (p.metric("baton_watch_events_total", kind="Pod") or 0) > 0
    # The per-runtime series: each replica reports its own ranges' runtimes, so over both
    # scrapes every runtime is there exactly once (the metrics Lease's holder alone would report
    # only its own: it runs no pass for the others).
    want = {i: {n for n, o in owners.items() if o == i} for i in ("op-a", "op-b")}
    reported = wait_for(lambda: (lambda r: r if r == want else None)({p.identity: _ready_series(p, namespace) for p in (a, b)}),
                        timeout=20, what=f"per-runtime series from each runtime's owner only: {want}")
    print("per-runtime Ready series by replica:", {i: sorted(r) for i, r in reported.items()})


def _ready_series(op: OperatorProcess, namespace: str) -> set[str]:
    """Runtimes whose baton_runtime_condition{condition="Ready",status="true"} this replica exports."""
    out = set()
    for line in op.metrics().splitlines():
        if line.startswith("baton_runtime_condition{") and f'namespace="{namespace}"' in line \
                and 'condition="Ready"' in line and 'status="true"' in line:
            out.add(line.split('runtime="', 1)[1].split('"', 1)[0])
    return out


def test_a_killed_replicas_ranges_are_taken_over_and_its_runtimes_hand_off(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    a = _start(operators, namespace, "op-a")
    b = _start(operators, namespace, "op-b")
    holders = wait_for(lambda: shards.split(cluster, namespace, "op-a", "op-b", ranges=RANGES), timeout=45, what="the ranges split")
    for n in NAMES:
        rts.create(runtime_manifest(n))
    for n in NAMES:
        rts.wait_ready(n, 1, timeout=120)
    orphans = [n for n in NAMES if shards.owner(rts, holders, n, ranges=RANGES) == "op-b"]
    assert orphans, "op-b owns none of the 12 runtimes"
    b.signal(signal.SIGKILL)
    b.wait_exit(10)
    t0 = time.monotonic()
    for n in orphans:
        rts.set_image(n, "example/tool:2")
    wait_for(lambda: shards.split(cluster, namespace, "op-a", ranges=RANGES), timeout=4 * LEASE_SECONDS + 15,
             interval=0.1, what="op-a holds every range")
    took = time.monotonic() - t0
    for n in orphans:
        rts.wait_ready(n, 2, timeout=120)
    handed = time.monotonic() - t0
    print(f"after SIGKILL: every range held by op-a in {took:.2f}s, the dead replica's {len(orphans)} "
          f"runtimes handed off in {handed:.2f}s (Lease duration {LEASE_SECONDS}s)")
    assert {rts.status(n)["holder"] for n in orphans} == {"op-a"}
    assert a.metric("baton_shard_ranges_held") == RANGES


def test_sigterm_hands_the_ranges_back_and_the_other_takes_them(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    _start(operators, namespace, "op-a")
    b = _start(operators, namespace, "op-b")
    wait_for(lambda: shards.split(cluster, namespace, "op-a", "op-b", ranges=RANGES), timeout=45, what="the ranges split")
    coord = client.CoordinationV1Api(cluster.api_client)
    b.signal(signal.SIGTERM)
    b.wait_exit(30)
    # Released on the way out (holder cleared), and op-b's membership Lease deleted.
    released = shards.holders(cluster, namespace, ranges=RANGES)
    assert "op-b" not in released.values(), released
    members = [lz.spec.holder_identity for lz in coord.list_namespaced_lease(
        namespace, label_selector="baton.dev/component=shard-member").items]
    assert members == ["op-a"], members
    # op-a's share is now all of them: released ranges are free at once (no expiry to wait for).
    t0 = time.monotonic()
    wait_for(lambda: shards.split(cluster, namespace, "op-a", ranges=RANGES), timeout=LEASE_SECONDS + 10, what="op-a holds every range")
    print(f"after op-b's SIGTERM: every range held by op-a in {time.monotonic() - t0:.2f}s")
    rts.create(runtime_manifest("after"))
    rts.wait_ready("after", 1, timeout=60)
    assert rts.status("after")["holder"] == "op-a"


def _plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "kubectl-baton"
    return subprocess.run([str(script), *args, "--kubeconfig", cluster.kubeconfig], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=cluster.env)


def test_kubectl_baton_list_owner_names_the_replica_whose_range_each_runtime_falls_in(
        operators: Start, rts: Runtimes, cluster: Any, namespace: str) -> None:
    """Issue 26 item 3: `kubectl baton list --owner` (the plugin as a real process, the range
    Leases written by two real replicas): OWNER is the replica whose range the UID falls in, the
    one that acted on the runtime (status.holder)."""
    _start(operators, namespace, "op-a")
    _start(operators, namespace, "op-b")
    holders = wait_for(lambda: shards.split(cluster, namespace, "op-a", "op-b", ranges=RANGES), timeout=45, what="the ranges split")
    names = NAMES
    for n in names:
        rts.create(runtime_manifest(n))
    for n in names:
        rts.wait_ready(n, 1, timeout=120)
    assert shards.holders(cluster, namespace, ranges=RANGES) == holders, "the ranges moved meanwhile: nobody came or went"
    res = _plugin(cluster, "list", "-n", namespace, "--owner", "--operator-namespace", namespace)
    print(res.stdout)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[0] == "NAME" and lines[0].split()[-1] == "OWNER", lines[0]
    shown = {line.split()[0]: line.split()[-1] for line in lines[1:]}
    owners = {n: shards.owner(rts, holders, n, ranges=RANGES) for n in names}
    acted = {n: rts.status(n)["holder"] for n in names}
    assert shown == owners == acted, (shown, owners, acted)
    assert set(shown.values()) == {"op-a", "op-b"}, "12 runtimes over 8 ranges held by two: both own some"
    # What the column costs (one LIST of the range Leases after the Table): printed, not asserted
    # (wall time on a shared machine is not this test's to control).
    walls: dict[str, list[float]] = {"list": [], "list --owner": []}
    for _ in range(5):
        for what, extra in (("list", ()), ("list --owner", ("--owner", "--operator-namespace", namespace))):
            t0 = time.monotonic()
            assert _plugin(cluster, "list", "-n", namespace, *extra).returncode == 0
            walls[what].append(time.monotonic() - t0)
    print("plugin wall, median of 5: " + ", ".join(f"{k} {sorted(v)[2]:.3f}s" for k, v in walls.items()))
    # Without --operator-namespace the plugin finds the range Leases in any namespace: the same
    # column, unless another test's replicas hold ranges elsewhere (then it asks for the flag).
    res = _plugin(cluster, "list", "-n", namespace, "--owner")
    if res.returncode == 0:
        assert {ln.split()[0]: ln.split()[-1] for ln in res.stdout.splitlines()[1:]} == shown, res.stdout
    else:
        assert "pass --operator-namespace" in res.stderr, res.stderr
    # A namespace without range Leases: sharding is off there, said once, and no owner is made up.
    res = _plugin(cluster, "list", "-n", namespace, "--owner", "--operator-namespace", "kube-public")
    assert res.returncode == 0, res.stderr
    assert "sharding is off" in res.stderr, res.stderr
    assert {ln.split()[-1] for ln in res.stdout.splitlines()[1:]} == {"-"}, res.stdout
    res = _plugin(cluster, "list", "-n", namespace, "--owner", "-o", "json")
    assert res.returncode == 1 and "cannot be combined with -o json" in res.stderr, res.stderr
