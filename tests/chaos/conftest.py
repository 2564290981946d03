"""Seeded fault orderings (harness.chaos). The operator fixtures are those of tests/integration
(harness.fixtures, a plugin of tests/conftest.py); the summary of every ordering run is printed at
the end of the session."""
from __future__ import annotations

import os
import statistics
from typing import Any

import pytest

from harness.chaos import actions
from harness.chaos.ordering import RESULTS

CI_SEEDS = (1, 2, 3)  # what `make test` runs; `make chaos ORDERINGS=N SEED=S` runs S .. S+N-1


def seeds() -> list[int]:
    n = os.environ.get("BATON_CHAOS_ORDERINGS")
    if not n:
        return list(CI_SEEDS)
    every = actions.run_seeds(first=int(os.environ.get("BATON_CHAOS_SEED") or "1"), orderings=int(n))
    # With BATON_CHAOS_PARALLEL=P each test runs P seeds of the run side by side.
    step = max(1, int(os.environ.get("BATON_CHAOS_PARALLEL") or "1"))
    return every[::step]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds(), ids=lambda s: f"seed{s}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    walls = sorted(r.wall for r in RESULTS)
    bad = [r for r in RESULTS if r.violations]
    tr = terminalreporter
    tr.section("seeded fault orderings")
    tr.write_line(f"orderings run: {len(RESULTS)}, with violations: {len(bad)}"
                  + (f" (seeds {[r.seed for r in bad]})" if bad else ""))
    tr.write_line(f"wall time per ordering: mean {statistics.mean(walls):.1f}s, "
                  f"median {statistics.median(walls):.1f}s, max {walls[-1]:.1f}s, "
                  f"total {sum(walls):.0f}s")
    phases = {k: statistics.mean(r.phases.get(k, 0.0) for r in RESULTS)
              for k in ("setup", "actions", "converge", "check")}
    tr.write_line("mean per phase: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()))
    noted = [r for r in RESULTS if r.notes]
    if noted:
        tr.write_line(f"orderings with notes: {len(noted)}")
        for r in noted:
            tr.write_line(f"  seed {r.seed}: " + "; ".join(r.notes))
    for r in bad:
        tr.write_line(r.report())
