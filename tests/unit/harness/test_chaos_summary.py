"""hack/chaos_summary.py reads the JSON lines `make chaos` writes (tests/chaos/test_orderings.py)
and counts what the orderings did: the figures docs/architecture.md quotes come from it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "chaos_summary.py"


def _line(seed: int, done: list[str], violations: list[str] | None = None) -> str:
    # The shape test_orderings._run writes; `done` as Ordering._did formats it.
    return json.dumps({"seed": seed, "wall": 20.0 + seed, "phases": {"setup": 5.0, "actions": 10.0, "converge": 1.0,
                                                                       "check": 0.1},
                       "violations": violations or [], "notes": [], "done": done})


def _run(tmp_path: Path, *lines: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "results.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, str(SCRIPT), str(f)], capture_output=True, text=True, timeout=60)


def test_counts_what_took_effect_what_was_skipped_and_how_held_creates_were_answered(tmp_path: Path) -> None:
    got = _run(tmp_path, _line(1, [
        "  3.31s 3 runtimes at generation 1",
        "  3.65s  1. template gamma: image example/tool:2",
        "  4.00s  2. template beta: skipped: runtime deleted",
        "  4.63s  3. hold-create : holding op-b's pod creates in the proxy",
        "  5.00s  4. late-create : first released POST -> 201; alpha: others stopped 0.8s, op-b1 sent its create "
        "(held), was stopped 5s, taken over (fencing token above 2), delivered 0s after; delivered late: POST -> 409",
        " 13.53s release: released POST -> 201",
    ]), _line(2, [
        "  3.65s  1. late-create : skipped: no runtime at rest (each deleted, suspended, stuck or in a transition)",
        "  4.00s  2. sigkill a: killed op-a1, started op-a2",
        "  5.00s  3. late-create : first released nothing; skipped: no runtime at rest",
        "  9.00s  4. late-create : alpha: others stopped 0.8s, op-b1 sent its create (held), was stopped 5s, "
        "not taken over within 15 s; delivered late: POST -> 201",
    ]))
    assert got.returncode == 0, got.stderr
    out = got.stdout.splitlines()
    assert out[0] == "orderings: 2 (seeds 1-2), with violations: 0"
    assert out[1].startswith("wall per ordering: mean 21.5s, median 21.5s, max 22.0s")
    counts = {ln.split()[0]: " ".join(ln.split()[1:]) for ln in out if ln.startswith("  ")}
    assert counts == {"template": "1 / 1", "late-create": "2 / 2", "hold-create": "1 / 0", "sigkill": "1 / 0"}
    assert "held pod creates delivered late, by answer: 201: 3, 409: 1" in out
    assert ("late-create (a create held past a takeover): not taken over, then delivered: 201: 1; skipped: 2; "
            "taken over, then delivered: 409: 1") in out


def test_a_violation_is_named_by_its_seed_and_fails_the_command(tmp_path: Path) -> None:
    got = _run(tmp_path, _line(7, []), _line(8, [], violations=["deleted runtime gamma left ['pod']"]))
    assert got.returncode == 1
    assert got.stdout.splitlines()[0] == "orderings: 2 (seeds 7-8), with violations: 1 [8]"


def test_a_line_that_is_not_json_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    got = _run(tmp_path, _line(1, []), "{not json")
    assert got.returncode == 2
    assert "results.jsonl:2: not a JSON line" in got.stderr
