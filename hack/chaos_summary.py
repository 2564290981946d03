#!/usr/bin/env python3
"""What a run of seeded fault orderings did, from its JSON lines (`make chaos` writes one per
ordering to .chaos-results.jsonl): orderings, violations, wall time, and for each action how
often it took effect or was skipped, and what became of the pod creates held in the network.
The figures docs/architecture.md quotes for a run come from here.

    .venv/bin/python hack/chaos_summary.py [.chaos-results.jsonl ...]
    make chaos-summary [CHAOS_RESULTS=...]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

# "  4.63s  2. stick alpha: finalizer on <uid> (g1)"; "  3.65s  1. hold-create : holding ..."
ACTION = re.compile(r"^\s*[\d.]+s\s+\d+\.\s+(?P<verb>[\w-]+)\s*(?P<target>[\w-]*)\s*:\s*(?P<result>.*)$")
DELIVERED = re.compile(r"POST -> (\d{3})")


def summarize(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return ["no orderings in the results"]
    walls = sorted(float(r["wall"]) for r in results)
    bad = sorted(r["seed"] for r in results if r.get("violations"))
    noted = sorted(r["seed"] for r in results if r.get("notes"))
    effect: collections.Counter[str] = collections.Counter()
    skipped: collections.Counter[str] = collections.Counter()
    late_create: collections.Counter[str] = collections.Counter()
    delivered: collections.Counter[str] = collections.Counter()
    for r in results:
        for line in r.get("done", []):
            m = ACTION.match(line)
            if m is not None:
                verb = m["verb"]
                # An action may first undo what stands in its way ("first released nothing; ..."):
                # what it did itself is the rest.
                own = "; ".join(x.strip() for x in m["result"].split(";") if not x.strip().startswith("first "))
                is_skipped = own.startswith("skipped")
                (skipped if is_skipped else effect)[verb] += 1
                if verb == "late-create":
                    if is_skipped:
                        late_create["skipped"] += 1
                    else:
                        took = "not taken over" if "not taken over" in own else "taken over"
                        late_create[f"{took}, then delivered: " + ",".join(DELIVERED.findall(own))] += 1
            for code in DELIVERED.findall(line):
                delivered[code] += 1
    phases = {k: statistics.mean(float((r.get("phases") or {}).get(k, 0.0)) for r in results)
              for k in ("setup", "actions", "converge", "check")}
    out = [
        f"orderings: {len(results)} (seeds {min(r['seed'] for r in results)}-{max(r['seed'] for r in results)}), "
        f"with violations: {len(bad)}" + (f" {bad}" if bad else ""),
        f"wall per ordering: mean {statistics.mean(walls):.1f}s, median {statistics.median(walls):.1f}s, "
        f"max {walls[-1]:.1f}s; mean per phase: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()),
        f"orderings with notes: {len(noted)}" + (f" {noted}" if noted else ""),
        "actions (took effect / skipped):",
    ]
    for verb in sorted(set(effect) | set(skipped), key=lambda v: (-effect[v], v)):
        out.append(f"  {verb:<15} {effect[verb]:>6} / {skipped[verb]}")
    out.append("held pod creates delivered late, by answer: "
               + (", ".join(f"{code}: {n}" for code, n in sorted(delivered.items())) or "none"))
    if late_create:
        out.append("late-create (a create held past a takeover): "
                   + "; ".join(f"{k}: {n}" for k, n in sorted(late_create.items())))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", default=[".chaos-results.jsonl"], help="JSON-lines result files")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    results: list[dict[str, Any]] = []
    for name in args.files:
        path = Path(name)
        if not path.exists():
            parser.error(f"{name}: no such file (make chaos writes .chaos-results.jsonl)")
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    results.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    parser.error(f"{name}:{n}: not a JSON line ({exc})")
    print("\n".join(summarize(results)))
    return 1 if any(r.get("violations") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
