"""Seeded fault orderings on the real plane (issue 13 part 2): harness.chaos runs one ordering
per seed, and the invariants are checked on the API server's own watch logs and the final
status. A failure prints the seed, the action list and what each action did; replay it with
`make chaos SEED=<seed> ORDERINGS=1`.

With BATON_CHAOS_PARALLEL=P (`make chaos PARALLEL=P`) each test runs P consecutive seeds side by
side on the one plane, each in its own namespace with its own three replicas: orderings spend
most of their time waiting (gaps, Leases running out), so P of them share the cores."""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from harness.chaos import actions
from harness.chaos.lanes import Lane, side_lane
from harness.chaos.ordering import RESULTS, Ordering, Result
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes
from harness.watchlog import PodWatch

PARALLEL = max(1, int(os.environ.get("BATON_CHAOS_PARALLEL") or "1"))
RUN_SEEDS = actions.run_seeds(first=int(os.environ.get("BATON_CHAOS_SEED") or "1"),
                              orderings=int(os.environ.get("BATON_CHAOS_ORDERINGS") or "0"))
_results_lock = threading.Lock()


def _run(seed: int, cluster: Any, lane: Lane) -> Result:
    ordering = Ordering(seed, cluster=cluster, namespace=lane.namespace, workdir=lane.workdir,
                              operators=lane.operators, rts=lane.rts, pod_watch=lane.pod_watch)
    try:
        return ordering.run()
    finally:
        RESULTS.append(ordering.result)
        out = os.environ.get("BATON_CHAOS_RESULTS")  # one JSON line per ordering, as it ends
        if out:
            r = ordering.result
            with _results_lock, open(out, "a") as f:
                f.write(json.dumps({"seed": r.seed, "wall": round(r.wall, 2), "phases": r.phases,
                                    "violations": r.violations, "notes": r.notes, "done": r.done}) + "\n")


def test_ordering(seed: int, cluster: Any, namespace: str, tmp_path: Path,
                  operators: Callable[..., OperatorProcess], rts: Runtimes,
                  pod_watch: PodWatch) -> None:
    own = Lane(namespace, tmp_path, operators, rts, pod_watch)
    # This test's seed and the next PARALLEL-1 of the run (consecutive, or odd ones only).
    seeds = RUN_SEEDS[RUN_SEEDS.index(seed):][:PARALLEL] if seed in RUN_SEEDS else [seed]
    if len(seeds) == 1:
        results = [_run(seed, cluster, own)]
    else:
        with contextlib.ExitStack() as stack:
            lanes = [own] + [stack.enter_context(side_lane(cluster, tmp_path / f"seed{s}", s))
                             for s in seeds[1:]]
            with concurrent.futures.ThreadPoolExecutor(len(seeds)) as pool:
                results = list(pool.map(lambda sl: _run(sl[0], cluster, sl[1]), zip(seeds, lanes)))
    for result in results:
        print(result.report())
    bad = [r for r in results if r.violations]
    assert not bad, "\n\n".join(r.report() for r in bad)
