"""The requests the plugin writes (reset, force-recover, release) and when it refuses them; the
confirmation.

Pure: the rules read the ToolRuntime as fetched and return the annotation to write, or raise
Refused with one line for the user. `confirm` reads the user's answer from the streams it is given.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence, TextIO

from baton.cli import render
from baton.model import names


class Refused(Exception):
    """The verb does not apply, or the cluster cannot be reached: one line for the user."""


@dataclasses.dataclass(frozen=True)
class Request:
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
