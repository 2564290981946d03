#!/usr/bin/env python3
"""Issue 13, part 3: mutation validation of the model check.

Applies, one at a time, a deliberate bug to the real code (operator/baton/**), runs the relevant
unit tests and the model check (tests/model) against it, restores the file (also on error or
Ctrl-C), and prints a table: mutation -> which check caught it. A mutation nothing catches is a
gap in the checks; the script exits non-zero then.

    .venv/bin/python hack/mutations.py                  # all mutations
    .venv/bin/python hack/mutations.py create-before-gone skip-fencing-check
    MODEL_EXAMPLES=150 .venv/bin/python hack/mutations.py   # a larger model budget per mutation
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = os.environ.get("PY", str(ROOT / ".venv" / "bin" / "python"))
# decide()'s own tables (the room-by-room files, the guarantees, the pin gate).
UNIT = [f"tests/unit/lifecycle/test_{room}.py" for room in (
    "idle", "retire", "create", "lease", "deletion", "dispatch", "conditions", "scenarios", "guarantees", "pins_gate",
    "gateway_seal")] + ["tests/unit/gateway/test_route.py"]
MODEL = ["tests/model"]


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    path: str
    edits: tuple[tuple[str, str], ...]  # (exact old text, new text): each old text occurs once
    # Edits of one bug that lands in further files: (path, exact old text, new text).
    elsewhere: tuple[tuple[str, str, str], ...] = ()
    # Unit test files run for this mutation besides UNIT (the tests of the code it mutates).
    unit: tuple[str, ...] = ()

    def files(self) -> dict[str, list[tuple[str, str]]]:
        """Each file this mutation edits, with its edits in order."""
        out: dict[str, list[tuple[str, str]]] = {self.path: list(self.edits)}
        for path, old, new in self.elsewhere:
            out.setdefault(path, []).append((old, new))
        return out


MUTATIONS = [
    Mutation(
        "create-before-gone", "a terminating pod counts as gone, and Creating does not look for other pods",
        "operator/baton/lifecycle/cleanup.py",
        (("    old = o.pod_by_uid(t.from_uid)\n    if old is None:\n        return retire.retire_done(o, t, now)\n    if t.forced:",
          "    old = o.pod_by_uid(t.from_uid)\n    if old is None or old.deleting:\n        return retire.retire_done(o, t, now)\n    if t.forced:"),),
        elsewhere=(("operator/baton/lifecycle/create.py", "    if others:\n        stray = others[0]",
                    "    if False:\n        stray = others[0]"),),
    ),
    Mutation(
        "skip-fencing-check", "the executor acts on pods without a fresh Lease",
        "operator/baton/execute/executor.py",
        (("        if (isinstance(action, plan.FENCED) and not self.leases.holds(ctx.key)",
          "        if (False and isinstance(action, plan.FENCED) and not self.leases.holds(ctx.key)"),),
    ),
    Mutation(
        "release-before-persist", "a step's plan hands the Lease back before its status write",
        "operator/baton/lifecycle/transitions.py",
        (("        (p.WriteStatus(status), step_timing(t, now), *extra),\n        0,\n        f\"{st.text(t.step)} -> {step.value}\",",
          "        (p.ReleaseLease(), p.WriteStatus(status), step_timing(t, now), *extra),\n        0,\n        f\"{st.text(t.step)} -> {step.value}\","),),
    ),
    Mutation(
        "clear-cleanupfailed-on-restart", "a new holder resuming a transition writes CleanupFailed=False",
        "operator/baton/lifecycle/lease.py",
        (("            # Resuming someone's transition: write our token before any step is acted on.\n            resumed = transitions.stamped(o, now)",
          "            # Resuming someone's transition: write our token before any step is acted on.\n            resumed = conditions.with_conditions(transitions.stamped(o, now), o, now, (st.ConditionType.CLEANUP_FAILED, False, st.Reason.CLEAN, \"\"))"),),
    ),
    Mutation(
        "accept-stale-reset", "a reset naming any generation hands off the current one",
        "operator/baton/lifecycle/verbs.py",
        (("            and reset.strip() == str(current.generation)\n        )",
          "        )"),),
        elsewhere=(("operator/baton/lifecycle/idle.py", "        if o.annotations.get(names.ANN_RESET, \"\").strip() == str(current.generation):",
                    "        if names.ANN_RESET in o.annotations:"),),
    ),
    Mutation(
        "drop-drain-deadline", "Draining waits for the probe with no deadline",
        "operator/baton/lifecycle/retire.py",
        (("    if t.deadline is not None and now >= t.deadline:\n        parts: list[str] = []",
          "    if False:\n        parts: list[str] = []"),),
    ),
    Mutation(
        "seal-without-confirmation", "StoppingAdmission completes before every live gateway replica confirmed the seal",
        "operator/baton/lifecycle/retire.py",
        (("        if not o.gateway_sealed:\n            # The seal invariant",
          "        if False:\n            # The seal invariant"),),
    ),
    Mutation(
        "held-call-excludes-successor", "a call held while N+1 connects counts N+1's pod (serving=false) as retiring",
        "operator/baton/gateway/route.py",
        (("            newer = gen is not None and (not isinstance(current, int) or gen > current)\n",
          "            newer = False\n"),),
    ),
    Mutation(
        "forget-uid-precondition", "a pod delete without preconditions.uid",
        "operator/baton/k8s/pods.py",
        (("    body = {\"gracePeriodSeconds\": grace_seconds, \"preconditions\": {\"uid\": uid}}",
          "    body = {\"gracePeriodSeconds\": grace_seconds}"),),
    ),
    Mutation(
        "trust-label-list", "gone = absent from the label-selected view (no GET by name of the retiring or current pod)",
        "operator/baton/cache/snapshot.py",
        (("    if t is not None and t.retiring and t.from_uid and t.from_uid not in found:\n        wanted.add(",
          "    if False:\n        wanted.add("),
         ("    if status.current is not None and status.current.uid not in found:\n        wanted.add(",
          "    if False:\n        wanted.add(")),
    ),
    Mutation(
        "drop-status-rv-precondition", "status writes without the resourceVersion they were decided on",
        "operator/baton/k8s/runtimes.py",
        (("    body: dict[str, Any] = {\"metadata\": {\"resourceVersion\": resource_version}, \"status\": status_patch}",
          "    body: dict[str, Any] = {\"status\": status_patch}"),),
    ),
    Mutation(
        "ignore-pins", "a retire stops admission whatever claims pin the generation",
        "operator/baton/lifecycle/pin_gate.py",
        (("    if not applies(t, old) or t.force_retired:\n        return None",
          "    if True:\n        return None"),),
        elsewhere=(("operator/baton/lifecycle/dispatch.py", "    pin_wait = pin_gate.external_wait(o, t, now)\n    if pin_wait is not None:",
                    "    pin_wait = None\n    if pin_wait is not None:"),),
    ),
    Mutation(
        "pins-fail-open", "claims not (yet) listed count as no claims",
        "operator/baton/lifecycle/pin_gate.py",
        (("    return pn.pins(claims=o.claims, runtime=o.name, generation=t.from_ or 0, known=o.claims_known)",
          "    return pn.pins(claims=o.claims, runtime=o.name, generation=t.from_ or 0, known=True)"),),
    ),
    Mutation(
        "stale-holder-not-fenced-out", "a holder ignores a newer token in status (decide's own fence)",
        "operator/baton/lifecycle/lease.py",
        (("        if status.fencing_token > lease.token:",
          "        if False and status.fencing_token > lease.token:"),),
    ),
    Mutation(
        "forget-latest-generation", "the next generation number ignores status.latestGeneration",
        "operator/baton/lifecycle/transitions.py",
        (("    seen = [o.status.latest_generation]\n",
          "    seen = [0]\n"),),
    ),
    Mutation(
        "lease-token-from-view", "a Lease created (again) takes the view's status token + 1, unchecked",
        "operator/baton/execute/leasekeeper.py",
        (("        if snap.lease is None:\n            await self._check_token_for_new_lease(snap, action, key)\n",
          "        if False:\n            await self._check_token_for_new_lease(snap, action, key)\n"),),
    ),
    Mutation(
        "end-creating-unread", "a Creating transition ends (suspended) without reading the pod name first",
        "operator/baton/lifecycle/create.py",
        (("        return p.Plan((p.ConfirmNoPod(name), p.WriteStatus(status), *steady.new_warnings(o.status, status)), 0,\n",
          "        return p.Plan((p.WriteStatus(status), *steady.new_warnings(o.status, status)), 0,\n"),),
    ),
    Mutation(
        "keep-gone-pod-in-view", "a stop-admission patch answered 'UID gone' leaves the pod in a view that is behind",
        "operator/baton/execute/actions.py",
        (("    if patched is None:\n", "    if False:\n"),),
    ),
    Mutation(
        "lost-pod-ignores-name", "a Connecting transition whose pod is lost ignores another pod holding the name",
        "operator/baton/lifecycle/create.py",
        (("        if pod is None and named is not None and named.owned:\n",
          "        if False and pod is None and named is not None and named.owned:\n"),),
    ),
    Mutation(
        "stray-recorded-as-reset", "a stray retired by a reset's handoff is recorded as Reset",
        "operator/baton/lifecycle/retire.py",
        (("    if t.trigger == st.Trigger.RESET and not retired_current:\n",
          "    if False and t.trigger == st.Trigger.RESET and not retired_current:\n"),),
    ),
    Mutation(
        "pins-not-rechecked-at-send", "a stop of admission is sent on the pins judged when it was decided",
        "operator/baton/execute/actions.py",
        (("    if not action.serving and action.pins_of is not None:\n",
          "    if False and not action.serving and action.pins_of is not None:\n"),),
    ),
    Mutation(
        "forward-abandoned-call", "a held call is forwarded although its client left (the gateway's hold loop)",
        "operator/baton/gateway/proxy.py",
        (("    return client_waiting or not held\n", "    return True\n"),),
        unit=("tests/unit/gateway/test_hostile.py",),
    ),
    Mutation(
        "seal-without-key", "the gateway's admin API accepts any bearer key (a seal from anyone)",
        "operator/baton/gateway/admin.py",
        (("    return scheme.lower() == \"bearer\" and hmac.compare_digest(given.strip().encode(), key)\n",
          "    return scheme.lower() == \"bearer\"\n"),),
        unit=("tests/unit/gateway/test_admin.py",),
    ),
    # Hooks (issue 45): the hook invariant, the gate, at least once under the new holder's token.
    Mutation(
        "failed-hook-lets-retire-go", "a Fail preRetire hook that failed goes on to the delete (N+1 starts)",
        "operator/baton/lifecycle/hooks.py",
        (("    if got.outcome == st.HookOutcome.FAILED:\n        return _hold_pre_retire(",
          "    if False:\n        return _hold_pre_retire("),),
        unit=("tests/unit/lifecycle/test_hooks.py",),
    ),
    Mutation(
        "gate-released-by-any-value", "the gate opens on any value of its annotation (a release carried over)",
        "operator/baton/lifecycle/hooks.py",
        (("    if value is not None and value.strip() == str(run.generation):\n",
          "    if value is not None:\n"),),
        unit=("tests/unit/lifecycle/test_hooks.py",),
    ),
    Mutation(
        "hook-resumed-under-old-token", "a run left by a crashed holder is not saved again under the new token",
        "operator/baton/lifecycle/hooks.py",
        (("        if run.fencing_token != o.status.fencing_token:\n            # Another holder began it",
          "        if False:\n            # Another holder began it"),),
        unit=("tests/unit/lifecycle/test_hooks.py",),
    ),
    # Idle and wake (issue 43).
    Mutation(
        "idle-ignores-claims", "a ToolRuntimeClaim pinning the serving generation does not keep it awake",
        "operator/baton/lifecycle/dormancy.py",
        (("    if pn.pins(claims=o.claims, runtime=o.name, generation=current.generation, known=o.claims_known).pinned:\n        return True\n",
          "    if False:\n        return True\n"),),
        unit=("tests/unit/lifecycle/test_dormancy.py",),
    ),
    Mutation(
        "wake-ignores-backoff", "a wake starts during the back-off of a failed one (a pile of pods)",
        "operator/baton/lifecycle/dormancy.py",
        (("    if retry is not None and retry.not_before is not None and now < retry.not_before:\n        return transitions.Wait(",
          "    if False:\n        return transitions.Wait("),),
        unit=("tests/unit/lifecycle/test_dormancy.py",),
    ),
]


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> tuple[int, str]:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def unit_verdict(out: str, rc: int) -> str:
    if rc == 0:
        return "-"
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    if failed:
        first = failed[0].split("::")[-1]
        return f"{len(failed)} failed (e.g. {first[:60]})"
    return f"error rc={rc}"


def model_verdict(out: str, rc: int) -> str:
    if rc == 0:
        return "-"
    # The first violation the server recorded, or the assertion that failed.
    m = re.search(r"(?:AssertionError|Violation): (?:t=[\d.]+ )?(.+)", out)
    if m is None:
        m = re.search(r"^E\s+(.+)$", out, re.M)
    text = m.group(1).strip() if m else f"rc={rc}"
    text = re.sub(r"baton-[abc]: ", "", text)
    return text[:110]


def apply(m: Mutation) -> dict[Path, str]:
    """Mutate every file of `m`; returns each file's original text. Nothing is written unless
    every old text occurs exactly once."""
    originals: dict[Path, str] = {}
    mutated: dict[Path, str] = {}
    for rel, edits in m.files().items():
        path = ROOT / rel
        originals[path] = text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{m.name}: the text to mutate occurs {text.count(old)} times in {rel}")
            text = text.replace(old, new)
        mutated[path] = text
    for path, text in mutated.items():
        path.write_text(text)
    return originals


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="MUTATION", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and what each does, then exit")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.what} ({', '.join(m.files())})")
        return 0
    known = {m.name for m in MUTATIONS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(unknown)} (see --list)")
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    # SIGTERM too restores the file (the `finally` below), like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    env = {"MODEL_EXAMPLES": os.environ.get("MODEL_EXAMPLES", "100"), "MODEL_STEPS": os.environ.get("MODEL_STEPS", "40"),
           "MODEL_NO_SHRINK": "1"}
    rows: list[tuple[str, str, str, str]] = []
    dirty = subprocess.run(["git", "diff", "--quiet", "--", "operator"], cwd=ROOT).returncode
    if dirty:
        raise SystemExit("operator/ has uncommitted changes: commit or stash them first (the script restores by content)")
    for m in chosen:
        originals = apply(m)
        t0 = time.monotonic()
        try:
            rc_u, out_u = run([PY, "-m", "pytest", *UNIT, *m.unit, "-q", "-x", "-p", "no:cacheprovider"])
            try:
                rc_m, out_m = run([PY, "-m", "pytest", *MODEL, "-q", "-x", "-p", "no:cacheprovider"], env, timeout=600)
            except subprocess.TimeoutExpired:
                rc_m, out_m = 1, "E   AssertionError: model run exceeded 600 s (a hang is a finding too)"
        finally:
            for path, original in originals.items():
                path.write_text(original)
        u, mv = unit_verdict(out_u, rc_u), model_verdict(out_m, rc_m)
        rows.append((m.name, u, mv, f"{time.monotonic() - t0:.0f}s"))
        print(f"{m.name}: unit {u} | model {mv}", file=sys.stderr, flush=True)
    if subprocess.run(["git", "diff", "--quiet", "--", "operator"], cwd=ROOT).returncode:
        raise SystemExit("operator/ differs from HEAD after restoring: inspect `git diff operator`")
    print(f"\nmodel budget per mutation: MODEL_EXAMPLES={env['MODEL_EXAMPLES']} MODEL_STEPS={env['MODEL_STEPS']} "
          f"(derandomized); unit: {' '.join(UNIT)} (and each mutation's own)\n")
    w = max(len(r[0]) for r in rows)
    print(f"| {'mutation':<{w}} | unit tests | model check | time |")
    print(f"|{'-' * (w + 2)}|---|---|---|")
    for name, u, mv, t in rows:
        print(f"| {name:<{w}} | {u} | {mv} | {t} |")
    missed = [r[0] for r in rows if r[2] == "-" and r[1] == "-"]
    caught_by_model = sum(1 for r in rows if r[2] != "-")
    print(f"\n{caught_by_model}/{len(rows)} caught by the model check; "
          f"{len(rows) - len(missed)}/{len(rows)} by some check" + (f"; NOT caught: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
