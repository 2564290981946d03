"""A tool can only delay its own runtime (issue 23): twenty runtimes whose drain probes hang
(the tool accepts and never answers, up to timeoutSeconds=60) sit in Draining while a healthy
runtime hands off, on the local plane with the operator as a real process and its default
workers. Before the probes moved out of the passes, each hanging probe held one of the 8 workers
for 60 s and the healthy handoff waited minutes for a worker.

The tools (harness.badprobe) listen on kwok-loop pod IPs (127.0.100.0/24): all traffic is loopback.
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

Start = Callable[..., OperatorProcess]
HANGING = 20
# The healthy runtime's own budgets: its handoff must finish within their sum.
HEALTHY_BUDGETS = {"lockSeconds": 10, "connectSeconds": 20, "drainSeconds": 10, "terminationGraceSeconds": 1,
                   "cleanupSeconds": 10}


def _step(rts: Runtimes, name: str) -> str | None:
    return (rts.status(name).get("transition") or {}).get("step")


def _probed(name: str, port: int, *, drain: int, timeout: int, budgets: dict[str, int] | None = None) -> dict[str, Any]:
    return runtime_manifest(
        name, loopback=True, budgets={"drainSeconds": drain, "cleanupSeconds": 10, **(budgets or {})},
        drain_probe={"httpGet": {"path": "/idle", "port": port}, "periodSeconds": 1, "timeoutSeconds": timeout})


@pytest.mark.usefixtures("kwok_nodes")
def test_twenty_hanging_drain_probes_do_not_delay_a_healthy_handoff(
        operators: Start, rts: Runtimes) -> None:
    port = free_port()
    operators("op-a")  # default workers (8)
    hanging = [f"hang-{i:02d}" for i in range(HANGING)]
    for name in hanging:
        # drainSeconds far beyond the test: they stay Draining unless their tool says idle.
        rts.create(_probed(name, port, drain=600, timeout=60))
    rts.create(_probed("healthy", port, drain=HEALTHY_BUDGETS["drainSeconds"], timeout=5, budgets=HEALTHY_BUDGETS))
    ips: dict[str, str] = {}
    for name in [*hanging, "healthy"]:
        rts.wait_ready(name, 1, timeout=120)
        ips[name] = rts.gen_pod(name, 1).status.pod_ip
    hangs = [badprobe.hang(ips[n], port) for n in hanging]
    idles: list[badprobe.IdleAfter] = []
    try:
        with badprobe.idle_after(ips["healthy"], port, 0.0) as healthy_tool:
            for name in hanging:
                rts.set_image(name, "example/tool:2")
            wait_for(lambda: all(_step(rts, n) == "Draining" for n in hanging), timeout=240,
                     what=f"all {HANGING} hanging runtimes Draining")
            # Every hanging tool has a probe connection it does not answer.
            wait_for(lambda: all(h.connections() for h in hangs), timeout=30, what="a probe at every hanging tool")
            t0 = time.monotonic()
            rts.set_image("healthy", "example/tool:2")
            budget = sum(HEALTHY_BUDGETS[k] for k in ("lockSeconds", "connectSeconds", "drainSeconds", "cleanupSeconds"))
            rts.wait_ready("healthy", 2, timeout=budget)
            took = time.monotonic() - t0
            steps = {n: _step(rts, n) for n in hanging}
            open_probes = sum(1 for h in hangs for c in h.connections() if c.peer_closed is None and c.closed is None)
            answered = [c for h in hangs for c in h.connections() if c.answered is not None]
            print(f"healthy handoff took {took:.1f}s (its budgets sum to {budget}s); hanging runtimes' steps: "
                  f"{sorted(set(steps.values()), key=str)} ({sum(s == 'Draining' for s in steps.values())}/{HANGING} "
                  f"Draining), probe connections open at the hanging tools: {open_probes}, "
                  f"probes the healthy tool answered: {len(healthy_tool.connections())}")
        # Its drain ended on its probe's idle answer, not at its drain deadline.
        retired = rts.status("healthy")["history"][0]
        assert retired["generation"] == 1 and retired.get("message") != "drain incomplete", retired
        assert not rts.events("healthy", "DrainIncomplete")
        # The hanging ones are still where their own tools hold them, and were never answered.
        assert all(s == "Draining" for s in steps.values()), steps
        assert not answered
    finally:
        for h in hangs:
            h.stop()
    # Tidy up: the tools turn idle, so the hanging handoffs finish; then everything is deleted.
    try:
        idles = [badprobe.idle_after(ips[n], port, 0.0) for n in hanging]
        for name in hanging:
            rts.wait_ready(name, 2, timeout=180)
    finally:
        for s in idles:
            s.stop()
    for name in [*hanging, "healthy"]:
        rts.patch(name, {"spec": {"budgets": {"drainSeconds": 1}}})  # the gen-2 pods' IPs have no tool
        rts.delete(name)
    wait_for(lambda: not any(rts.exists(n) for n in [*hanging, "healthy"]), timeout=120, what="runtimes deleted")
