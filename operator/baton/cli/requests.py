"""The requests the plugin writes (reset, force-recover, force-retire, retry, suspend, resume, release, wake) and
when it refuses them; the confirmation; kubectl's duration flag.

Pure: the rules read the ToolRuntime as fetched and return the annotation to write, or raise
Refused with one line for the user. `confirm` reads the user's answer from the streams it is given.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Mapping, NamedTuple, Sequence, TextIO

from baton.cli import render
from baton.model import meta, names


class Refused(Exception):
    """The verb does not apply, or the cluster cannot be reached: one line for the user."""


# NamedTuples, not dataclasses: importing dataclasses (and inspect) is a tenth of a call's time.
class Request(NamedTuple):
    """An annotation the plugin is about to write, and what it means."""

    annotation: str
    generation: int
    message: str
    abandons: dict[str, Any] | None = None

    def as_data(self, rt: Mapping[str, Any], *, verb: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "ToolRuntime", "namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
            "verb": verb, "annotations": {self.annotation: str(self.generation)}, "generation": self.generation,
        }
        if self.abandons is not None:
            data["abandons"] = self.abandons
        data["message"] = self.message
        return data


def reset_request(rt: Mapping[str, Any]) -> Request:
    status = rt.get("status") or {}
    name = rt["metadata"]["name"]
    if (rt.get("spec") or {}).get("suspend"):
        raise Refused(f"toolruntime {name!r} is suspended: nothing to reset (set spec.suspend=false to start one)")
    current = (status.get("current") or {}).get("generation")
    if not current:
        raise Refused(f"toolruntime {name!r} has no current generation to reset")
    t = status.get("transition")
    if t:
        raise Refused(f"toolruntime {name!r} is in a transition ({t.get('kind')} step {t.get('step')}); "
                      "reset it once that is done")
    return Request(names.ANN_RESET, int(current), f"toolruntime/{name}: reset of generation {current} requested")


def force_recovery_request(rt: Mapping[str, Any]) -> Request:
    name = rt["metadata"]["name"]
    cond = render.condition(rt, "CleanupFailed")
    failure = (rt.get("status") or {}).get("lastCleanupFailure") or {}
    if cond.get("status") != "True" or not failure:
        raise Refused(f"toolruntime {name!r} has no cleanup failure to recover from "
                      f"(CleanupFailed={cond.get('status', 'Unknown')}, reason {cond.get('reason', '-')})")
    gen = int(failure["generation"])
    pod, uid = failure.get("pod"), failure.get("uid")
    return Request(names.ANN_FORCE_RECOVERY, gen,
                   f"toolruntime/{name}: force recovery of generation {gen} requested (abandons pod {pod} uid {uid})",
                   abandons={"pod": pod, "uid": uid})


def force_retire_request(rt: Mapping[str, Any], *, generation: int) -> Request:
    """The operator honours baton.dev/force-retire only while generation N's retire waits for pins
    (step StoppingAdmission with pinWaitSince set, N its `from`) and refuses any other value as
    stale (baton.lifecycle.pin_gate, dispatch): check that here first, so a stale value is never written."""
    name = rt["metadata"]["name"]
    t = (rt.get("status") or {}).get("transition") or {}
    if not t:
        raise Refused(f"toolruntime {name!r} has no transition: no retire waits for pins, nothing to force-retire")
    waiting = t.get("step") == "StoppingAdmission" and bool(t.get("pinWaitSince"))
    retiring = t.get("from")
    where = f"{t.get('kind')} g{retiring or '-'} -> g{t.get('to') or '-'} at {t.get('step')}"
    if not waiting:
        raise Refused(f"toolruntime {name!r}: no retire waits for pins ({where}), nothing to force-retire")
    if retiring != generation:
        raise Refused(f"toolruntime {name!r}: generation {generation} is not the one waiting for pins; generation "
                      f"{retiring} is ({where}): use --generation {retiring}")
    blocked = render.condition(rt, "RetirementBlocked").get("status") == "True"
    return Request(names.ANN_FORCE_RETIRE, generation,
                   f"toolruntime/{name}: force-retire of generation {generation} requested "
                   f"({'RetirementBlocked' if blocked else 'AwaitingPinRelease'}): it retires past its pins, "
                   "recorded in its history")


def failed_hook(rt: Mapping[str, Any]) -> dict[str, Any] | None:
    """The failed hook that holds the runtime (docs/hooks.md), as status says it: {hook,
    generation, message, attempts, condition}; None when none does. A Fail hook's failure is
    CleanupFailed=True (preRetire) or Degraded=True (postReady) with reason HookFailed, and
    status.transition.hook names the run (its outcome Failed)."""
    status = rt.get("status") or {}
    t = status.get("transition") or {}
    run: dict[str, Any] = t["hook"] if isinstance(t.get("hook"), dict) else {}
    for kind, hook in (("CleanupFailed", "preRetire"), ("Degraded", "postReady")):
        cond = render.condition(rt, kind)
        if cond.get("status") != "True" or cond.get("reason") != "HookFailed":
            continue
        if run.get("hook") == hook and run.get("outcome") == "Failed" and _integer(run.get("generation")):
            return {"hook": hook, "generation": int(run["generation"]), "message": run.get("message") or "",
                    "attempts": run.get("attempts"), "condition": kind}
    return None


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def retry_hook_request(rt: Mapping[str, Any]) -> Request:
    """The operator runs a failed hook again for baton.dev/retry-hook naming its generation and
    refuses (removes, with an event) any other value: check here first, so none is ever written
    when no hook failed."""
    name = rt["metadata"]["name"]
    failed = failed_hook(rt)
    if failed is None:
        t = (rt.get("status") or {}).get("transition") or {}
        run: dict[str, Any] = t["hook"] if isinstance(t.get("hook"), dict) else {}
        if run and not run.get("outcome"):
            why = (f"its {run.get('hook')} hook of generation {run.get('generation')} is running "
                   f"(attempt {run.get('attempts') or 1}), not failed")
        else:
            conds = ", ".join(f"{k}={render.condition(rt, k).get('status', 'Unknown')} "
                              f"({render.condition(rt, k).get('reason', '-')})" for k in ("CleanupFailed", "Degraded"))
            why = f"no hook failed ({conds})"
        raise Refused(f"toolruntime {name!r} has no failed hook to retry: {why}")
    gen, hook = failed["generation"], failed["hook"]
    said = f": it answered {failed['message']}" if failed["message"] else ""
    return Request(names.ANN_RETRY_HOOK, gen,
                   f"toolruntime/{name}: retry of the {hook} hook of generation {gen} requested "
                   f"(it failed{said})")


class Suspend(NamedTuple):
    """spec.suspend to set (a merge patch), whether it changes anything, and what happens then."""

    suspend: bool
    changed: bool
    message: str

    def as_data(self, rt: Mapping[str, Any], *, verb: str) -> dict[str, Any]:
        return {"kind": "ToolRuntime", "namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
                "verb": verb, "spec": {"suspend": self.suspend}, "changed": self.changed, "message": self.message}


def suspend_request(rt: Mapping[str, Any], *, suspend: bool) -> Suspend:
    """suspend: the current generation retires within its budgets and none starts; resume: a new
    generation starts. Already so: nothing to write (exit 0, as `kubectl patch` says "no change")."""
    name = rt["metadata"]["name"]
    spec = rt.get("spec") or {}
    status = rt.get("status") or {}
    if bool(spec.get("suspend")) == suspend:
        return Suspend(suspend, False, f"toolruntime/{name} is already {'suspended' if suspend else 'running (not suspended)'}: "
                                       "nothing changed")
    if not suspend:
        return Suspend(False, True, f"toolruntime/{name} resumed: a new generation starts")
    current = (status.get("current") or {}).get("generation")
    t = status.get("transition") or {}
    budgets = spec.get("budgets") or {}
    drain = budgets.get("drainSeconds", 30)
    if current:
        what = (f"generation {current} retires within its budgets (drainSeconds={drain}; a generation pinned by "
                f"ToolRuntimeClaims waits for them first, at most pinSeconds={budgets.get('pinSeconds', 600)})")
    elif t.get("from"):
        what = f"generation {t['from']} retires as its {t.get('kind')} goes on (step {t.get('step')})"
    else:
        what = "no generation runs"
    return Suspend(True, True, f"toolruntime/{name} suspended: {what}, and none starts until "
                               f"`kubectl baton resume {name}`")


class Wake(NamedTuple):
    """The annotation a wake writes (ANN_WAKE: the RFC 3339 time of the ask), or none (`value`
    empty: not idle, nothing to wake), and what happens then."""

    value: str
    message: str

    def as_data(self, rt: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": "ToolRuntime", "namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
                "verb": "wake", "annotations": {names.ANN_WAKE: self.value} if self.value else {},
                "changed": bool(self.value), "message": self.message}


def rfc3339(at: datetime.datetime) -> str:
    """A time as the API server writes one, to the millisecond ("2026-11-27T11:00:00.250Z")."""
    utc = at.astimezone(datetime.timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def wake_request(rt: Mapping[str, Any], *, now: datetime.datetime) -> Wake:
    """Start an idle runtime's next generation now (the operator does, fenced as every start).
    Refused without spec.idle (never idled) or while suspended; not idle: nothing to write."""
    name = rt["metadata"]["name"]
    spec = rt.get("spec") or {}
    idle = spec.get("idle")
    if not isinstance(idle, dict):
        raise Refused(f"toolruntime {name!r} has no spec.idle: it is never idled, so there is nothing to wake "
                      "(spec.idle.afterSeconds turns idling on)")
    if spec.get("suspend"):
        raise Refused(f"toolruntime {name!r} is suspended, not idle: `kubectl baton resume {name}` starts it")
    since = meta.parse_time(((rt.get("status") or {}).get("idle") or {}).get("since"))
    if since is None:
        return Wake("", f"toolruntime/{name} is not idle: nothing to wake")
    # The operator wakes it for an ask newer than status.idle.since. This machine's clock may be
    # behind the operator's: the ask is after the idle began (it was seen idle), so never before it.
    asked = max(now, since + datetime.timedelta(milliseconds=1))
    seconds = idle.get("wakeSeconds", 45)
    return Wake(rfc3339(asked), f"toolruntime/{name}: wake requested; its next generation starts now and serves "
                                f"within {seconds}s (spec.idle.wakeSeconds), or the wake fails (WakeFailed)")


# kubectl's --request-timeout: Go durations ("30s", "1m30s", "500ms", "1h") or plain seconds ("30");
# "0" (any zero) means no timeout.
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """Seconds, or None for no timeout; ValueError naming the accepted forms otherwise."""
    value = text.strip()
    bad = ValueError(f"invalid duration {text!r}: use a number of seconds or a unit (30s, 1m, 1h30m, 500ms); "
                     "0 means no timeout")
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        seconds = float(value)
    else:
        parts = _DURATION.findall(value)
        if not value or "".join(n + u for n, u in parts) != value:
            raise bad
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    return None if seconds == 0 else seconds


def without_finalizer(rt: Mapping[str, Any]) -> list[str] | None:
    """The runtime's finalizers once Baton's is released; None when Baton holds none there."""
    finalizers = list((rt.get("metadata") or {}).get("finalizers") or [])
    if names.FINALIZER not in finalizers:
        return None
    return [f for f in finalizers if f != names.FINALIZER]


def release_question(items: Sequence[Mapping[str, Any]]) -> str:
    held = [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items]
    shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
    return (f"Release {len(held)} toolruntime(s) ({shown}) from Baton? Their pods keep running; deleting a "
            "released toolruntime removes its pod at once (the garbage collector), without a drain")


def confirm(question: str, *, yes: bool, stdin: TextIO, stderr: TextIO) -> None:
    """Ask on a terminal; without one, only --yes goes ahead (a script must say so)."""
    if yes:
        return
    if not stdin.isatty():
        raise Refused("not a terminal, so not asking for confirmation: pass --yes to go ahead")
    stderr.write(f"{question} [y/N] ")
    stderr.flush()
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise Refused("not confirmed: nothing changed")
