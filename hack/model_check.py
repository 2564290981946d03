#!/usr/bin/env python3
"""The long model check, in batches, JOBS side by side: `make model-check N=100000 JOBS=2`.

One pytest process per batch (BATCH examples, its own seed: SEED, SEED+1, ...), JOBS of them
at a time, until N examples ran, a batch failed, or MINUTES passed (then the batches running are
stopped and not counted; so on SIGTERM or SIGINT). Batches keep hypothesis's memory of explored choices small and give a
result that survives a stop. Each batch writes the SHA-256 of every example's rule sequence to
OUT/traces-SEED.txt; "distinct interleavings" is the union over all batches (two seeds can draw
the same sequence; it is counted once). A failing batch's output stays in OUT/batch-SEED.log.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
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
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    deadline = started + args.minutes * 60 if args.minutes else None
    batches = -(-args.examples // args.batch)
    queue = [(args.seed + i, min(args.batch, args.examples - i * args.batch)) for i in range(batches)]
    running: dict[int, subprocess.Popen[bytes]] = {}
    done: list[int] = []
    failed: list[int] = []
    print(f"model-check: {args.examples} examples of {args.steps} rules in {batches} batches of {args.batch}, "
          f"{args.jobs} at a time, seeds {args.seed}..{args.seed + batches - 1}, out {args.out}", flush=True)

    def start(seed: int, n: int) -> None:
        for name in (f"traces-{seed}.txt", f"stats-{seed}.txt"):
            (args.out / name).unlink(missing_ok=True)
        env = dict(os.environ, MODEL_EXAMPLES=str(n), MODEL_STEPS=str(args.steps), MODEL_SEED=str(seed),
                   MODEL_TRACES_FILE=str(args.out / f"traces-{seed}.txt"),
                   MODEL_STATS_FILE=str(args.out / f"stats-{seed}.txt"))
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
                print(f"  batch seed {seed}: {'passed' if proc.returncode == 0 else 'FAILED'} "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        for proc in running.values():  # past the time bound (or interrupted): not counted
            proc.terminate()
        for proc in running.values():
            proc.wait(timeout=30)

    traces: set[str] = set()
    totals = dict.fromkeys(STAT_KEYS, 0)
    for seed in done:
        traces.update((args.out / f"traces-{seed}.txt").read_text().split())
        line = (args.out / f"stats-{seed}.txt").read_text()
        for key in STAT_KEYS:
            m = re.search(rf"(\d+) {key}", line)
            totals[key] += int(m.group(1)) if m else 0
    wall = time.monotonic() - started
    print(f"model-check: {len(done)} batches passed, {len(failed)} failed, {len(running)} stopped unfinished; "
          + ", ".join(f"{v} {k}" for k, v in totals.items())
          + f"; {len(traces)} distinct interleavings (union of the batches' rule-sequence hashes); "
          f"{wall:.0f} s wall ({totals['examples'] / wall:.1f} examples/s)")
    for seed in failed:
        print(f"FAILED: seed {seed}, output in {args.out / f'batch-{seed}.log'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
