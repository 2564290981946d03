"""Seeded fault orderings on the real plane (issue 13 part 2): harness.chaos runs one ordering
per seed, and the invariants are checked on the API server's own watch logs and the final
status. A failure prints the seed, the action list and what each action did; replay it with
`make chaos SEED=<seed> ORDERINGS=1`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from harness import baton, chaos


def test_ordering(seed: int, cluster: Any, namespace: str, tmp_path: Path,
                  operators: Callable[..., baton.OperatorProcess], rts: baton.Runtimes,
                  pod_watch: baton.PodWatch) -> None:
    ordering = chaos.Ordering(seed, cluster=cluster, namespace=namespace, workdir=tmp_path,
                              operators=operators, rts=rts, pod_watch=pod_watch)
    try:
        result = ordering.run()
    finally:
        chaos.RESULTS.append(ordering.result)
        out = os.environ.get("BATON_CHAOS_RESULTS")  # one JSON line per ordering, as it ends
        if out:
            r = ordering.result
            with open(out, "a") as f:
                f.write(json.dumps({"seed": r.seed, "wall": round(r.wall, 2), "phases": r.phases,
                                    "violations": r.violations, "notes": r.notes, "done": r.done}) + "\n")
    print(result.report())
    assert not result.violations, result.report()
