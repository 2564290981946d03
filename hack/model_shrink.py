#!/usr/bin/env python3
"""Cut a failing long-model-check example down to the rules that still fail the same way.

Hypothesis stops shrinking a stateful example after five minutes; a batch log of
`hack/model_check.py` then holds a long rule list. This replays it (each rule called on a fresh
`BatonModel`, then its teardown) and removes rules while the replay still fails with NEEDLE in
its message (delta debugging), one replay per subprocess, each bounded in time:

    .venv/bin/python -m hack.model_shrink OUT/batch-SEED.log "retired as Reset"
    .venv/bin/python -m hack.model_shrink --replay RULES.txt     # one replay, prints the failure

(from the repository root: it imports tests/model as `tests.model`).

The rules left are printed, ready to become a test in tests/model/test_model.py.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run by path: dev (and tests) are importable from the root only
    raise SystemExit("run it from the repository root as a module: python -m hack.model_shrink ...")

ROOT = Path(__file__).resolve().parents[1]
REPLAY_SECONDS = 120


def rules_from_log(log: Path) -> list[str]:
    """The failing example's rule calls, as hypothesis printed them (invariant checks left out)."""
    rules = [m.group(1) for m in re.finditer(r"^E\s+(state\.\w+\(.*\))$", log.read_text(), re.M)]
    return [r for r in rules if not r.startswith(("state.nothing_violated", "state.teardown"))]


def replay(rules: list[str]) -> str:
    """Run the rules and the teardown; the failure's text, or "" when it passes."""
    from tests.model.test_model import BatonModel

    state = BatonModel()
    try:
        for rule in rules:
            eval(rule, {"state": state})  # noqa: S307 - rule calls printed by hypothesis for this model
        state.nothing_violated()
        state.teardown()
        return ""
    except AssertionError as exc:
        return str(exc)
    finally:
        state.undo()


def fails(rules: list[str], needle: str) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(rules) + "\n")
    try:
        proc = subprocess.run([sys.executable, "-m", "hack.model_shrink", "--replay", f.name], cwd=ROOT, capture_output=True,
                              text=True, timeout=REPLAY_SECONDS)
    except subprocess.TimeoutExpired:
        return False
    finally:
        Path(f.name).unlink()
    return needle in proc.stdout


def shrink(rules: list[str], needle: str, *, head: list[str]) -> list[str]:
    """ddmin: drop chunks of `rules` while `head` + the rest still fails with `needle`."""
    n = 2
    while len(rules) >= 2:
        size = max(1, len(rules) // n)
        for i in range(0, len(rules), size):
            candidate = rules[:i] + rules[i + size:]
            if candidate and fails(head + candidate, needle):
                rules, n = candidate, max(n - 1, 2)
                print(f"  {len(rules)} rules still fail", flush=True)
                break
        else:
            if size == 1:
                break
            n = min(len(rules), n * 2)
    return head + rules


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", nargs="?", type=Path, help="a failing batch's log (OUT/batch-SEED.log)")
    ap.add_argument("needle", nargs="?", help="text the failure must keep (part of the violation)")
    ap.add_argument("--replay", type=Path, help="replay the rules in this file once, print the failure")
    args = ap.parse_args()
    if args.replay:
        print(replay(args.replay.read_text().split("\n")[:-1]) or "passed")
        return 0
    if args.log is None or not args.needle:
        ap.error("give a batch log and the text of its failure")
    rules = rules_from_log(args.log)
    if not rules:
        sys.exit(f"model_shrink: no failing example's rules in {args.log}")
    if not fails(rules, args.needle):
        sys.exit(f"model_shrink: the {len(rules)} rules of {args.log} do not fail with {args.needle!r} here")
    print(f"{len(rules)} rules fail; cutting down", flush=True)
    # The @initialize rule stays first: every example begins with it.
    head = [r for r in rules[:1] if r == "state.start()"]
    print("\n".join(shrink(rules[len(head):], args.needle, head=head)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
