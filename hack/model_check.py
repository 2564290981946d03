#!/usr/bin/env python3
"""The long model check, in batches, JOBS side by side: `make model-check N=100000 JOBS=2`.

One pytest process per batch (BATCH examples, its own seed: SEED, SEED+1, ...), JOBS of them
at a time, until N examples ran, a batch failed, or MINUTES passed (then the batches running are
stopped and not counted; so on SIGTERM or SIGINT). Batches keep hypothesis's memory of explored choices small and give a
result that survives a stop. Each batch writes the SHA-256 of every example's rule sequence to
OUT/traces-SEED.txt; "distinct interleavings" is the union over all batches (two seeds can draw
the same sequence; it is counted once). A failing batch's output stays in OUT/batch-SEED.log.

One run can be done in parts (`--resume`: a run longer than a working session). OUT/run.json
holds what the run is: its arguments and the code it checks (git tree ids of operator/baton and
tests/model, the hypothesis version). A part continues it only on that same code and those same
arguments, and only if no batch of it failed; it runs the batches not yet passed
(OUT/ledger.txt: one line per finished batch) and prints the figures of this part and of the run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAT_KEYS = ("examples", "rules", "creates sent", "transitions", "cleanup failures", "force recoveries",
             "runtimes removed", "late status writes refused")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, required=True, help="examples in all (N)")
    ap.add_argument("--jobs", type=int, default=1, help="batches run side by side")
    ap.add_argument("--batch", type=int, default=1000, help="examples per batch (one pytest process)")
    ap.add_argument("--steps", type=int, default=40, help="rules per example")
    ap.add_argument("--seed", type=int, default=1, help="the first batch's seed; batch i uses seed+i")
    ap.add_argument("--minutes", type=float, default=0, help="stop after this long (0: no bound)")
    ap.add_argument("--out", type=Path, default=ROOT / ".model-check", help="traces, stats, failing logs")
    ap.add_argument("--nice", type=int, default=0, help="run the batches at this nice level")
    ap.add_argument("--resume", action="store_true",
                    help="continue the run in OUT (same code, same arguments): run its batches not yet passed")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    run = {"examples": args.examples, "batch": args.batch, "steps": args.steps, "seed": args.seed,
           "code": code_identity()}
    ledger_path, run_path = args.out / "ledger.txt", args.out / "run.json"
    if args.resume:
        if not run_path.exists():
            sys.exit(f"model-check: --resume: {run_path} not found (no run to continue)")
        before = json.loads(run_path.read_text())
        if before != run:
            sys.exit(f"model-check: --resume: the run in {args.out} is {before}, this one would be {run}: "
                     "a part must check the same code with the same arguments")
        if "dirty" in before["code"]:
            sys.exit("model-check: --resume: that run checked uncommitted code; it cannot be continued")
    else:
        for stale in (*args.out.glob("traces-*.txt"), *args.out.glob("stats-*.txt"), ledger_path,
                      args.out / "parts.txt"):
            stale.unlink(missing_ok=True)
        run_path.write_text(json.dumps(run, indent=1) + "\n")
    ledger = read_ledger(ledger_path)
    if any(result != "passed" for result, _wall in ledger.values()):
        sys.exit(f"model-check: the run in {args.out} has a failed batch; it cannot be continued")

    started = time.monotonic()
    deadline = started + args.minutes * 60 if args.minutes else None
    batches = -(-args.examples // args.batch)
    queue = [(args.seed + i, min(args.batch, args.examples - i * args.batch)) for i in range(batches)
             if args.seed + i not in ledger]
    began: dict[int, float] = {}
    running: dict[int, subprocess.Popen[bytes]] = {}
    done: list[int] = []
    failed: list[int] = []
    print(f"model-check: {args.examples} examples of {args.steps} rules in {batches} batches of {args.batch}, "
          f"{args.jobs} at a time, seeds {args.seed}..{args.seed + batches - 1}, out {args.out}; "
          f"{len(ledger)} batches passed in earlier parts, {len(queue)} to run", flush=True)

    def start(seed: int, n: int) -> None:
        for name in (f"traces-{seed}.txt", f"stats-{seed}.txt"):
            (args.out / name).unlink(missing_ok=True)
        env = dict(os.environ, MODEL_EXAMPLES=str(n), MODEL_STEPS=str(args.steps), MODEL_SEED=str(seed),
                   MODEL_TRACES_FILE=str(args.out / f"traces-{seed}.txt"),
                   MODEL_STATS_FILE=str(args.out / f"stats-{seed}.txt"))
        began[seed] = time.monotonic()
        log = open(args.out / f"batch-{seed}.log", "wb")
        cmd = [sys.executable, "-m", "pytest", "tests/model/test_model.py", "-k", "TestBatonModel",
               "-q", "-s", "-p", "no:cacheprovider", "--timeout=0"]
        running[seed] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=(lambda: os.nice(args.nice)) if args.nice else None)

    stop = []  # SIGTERM/SIGINT: stop starting batches, count the finished ones, print the summary
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    try:
        while (queue or running) and not failed and not stop:
            while queue and len(running) < args.jobs and (deadline is None or time.monotonic() < deadline):
                start(*queue.pop(0))
            if not running:
                break
            time.sleep(1)
            for seed, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[seed]
                (done if proc.returncode == 0 else failed).append(seed)
                with ledger_path.open("a") as f:
                    f.write(f"{seed} {'passed' if proc.returncode == 0 else 'failed'} "
                            f"{time.monotonic() - began[seed]:.1f}\n")
                print(f"  batch seed {seed}: {'passed' if proc.returncode == 0 else 'FAILED'} "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        for proc in running.values():  # past the time bound (or interrupted): not counted
            proc.terminate()
        for proc in running.values():
            proc.wait(timeout=30)

    wall = time.monotonic() - started
    with (args.out / "parts.txt").open("a") as f:
        f.write(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ} {wall:.0f} s wall, "
                f"{len(done)} batches passed, {len(failed)} failed, {len(running)} stopped unfinished\n")
    part_traces, part_totals = figures(args.out, done)
    print(f"model-check, this part: {len(done)} batches passed, {len(failed)} failed, {len(running)} stopped unfinished; "
          + described(part_traces, part_totals)
          + f"; {wall:.0f} s wall ({part_totals['examples'] / wall:.1f} examples/s)")
    if ledger:
        every = sorted({*ledger, *done})
        traces, totals = figures(args.out, every)
        walls = [float(line.split()[1]) for line in (args.out / "parts.txt").read_text().splitlines()]
        print(f"model-check, the whole run ({len(walls)} parts): {len(every)} batches passed, {len(failed)} failed; "
              + described(traces, totals) + f"; {sum(walls):.0f} s wall in all")
    for seed in failed:
        print(f"FAILED: seed {seed}, output in {args.out / f'batch-{seed}.log'}")
    return 1 if failed else 0


def code_identity() -> str:
    """What the run checks: the committed trees of the checked code and the model, and the
    hypothesis that draws the examples; "+dirty" when either tree has uncommitted changes."""
    paths = ("operator/baton", "tests/model")
    trees = subprocess.run(["git", "rev-parse", *(f"HEAD:{p}" for p in paths)], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.strip()
    ident = " ".join(f"{p}={t[:12]}" for p, t in zip(paths, trees)) + f" hypothesis={metadata.version('hypothesis')}"
    return ident + (" +dirty" if dirty else "")


def read_ledger(path: Path) -> dict[int, tuple[str, float]]:
    """seed -> (passed|failed, wall seconds), one line per finished batch."""
    if not path.exists():
        return {}
    rows = (line.split() for line in path.read_text().splitlines() if line.strip())
    return {int(seed): (result, float(wall)) for seed, result, wall in rows}


def described(traces: set[str], totals: dict[str, int]) -> str:
    return (", ".join(f"{v} {k}" for k, v in totals.items())
            + f"; {len(traces)} distinct interleavings (union of the batches' rule-sequence hashes)")


def figures(out: Path, seeds: list[int]) -> tuple[set[str], dict[str, int]]:
    """The union of the batches' trace hashes and the sums of their statistics."""
    traces: set[str] = set()
    totals = dict.fromkeys(STAT_KEYS, 0)
    for seed in seeds:
        traces.update((out / f"traces-{seed}.txt").read_text().split())
        line = (out / f"stats-{seed}.txt").read_text()
        for key in STAT_KEYS:
            m = re.search(rf"(\d+) {key}", line)
            totals[key] += int(m.group(1)) if m else 0
    return traces, totals


if __name__ == "__main__":
    sys.exit(main())
