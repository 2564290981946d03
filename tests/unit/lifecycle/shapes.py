"""Shared shapes of the lifecycle decide() tables: builders' defaults are runtime agents/search-mcp
serving generation 7 (pod search-mcp-g7, uid-7), fencing token 5, Lease held by this process
(baton-a) with token 5."""

from __future__ import annotations

from typing import Any

from baton.lifecycle import plan as p
from baton.model import names, status as st

from .. import builders as b
from ..expect import Ev, Rec, Unannotate

S, K, T, C = st.Step, st.TransitionKind, st.Trigger, st.ConditionType
M = p.Metric
NOW, at, name, uid = b.NOW, b.at, b.name, b.uid
RESET, FORCE = names.ANN_RESET, names.ANN_FORCE_RECOVERY


def started(kind: str) -> list[Any]:
    return [Ev("Normal", "TransitionStarted"), Rec(M.TRANSITIONS, (("kind", kind),))]


def stopped_and_started(kind: str) -> list[Any]:
    """A retire of the serving g7 that nothing pins: its label flip goes in the plan that
    persists StoppingAdmission, after the status write and what records it (events, metrics)."""
    return [*started(kind), p.SetServing(name(7), "uid-7", False, pins_of=7)]


def stale(verb: str) -> list[Any]:
    reason, key = ("StaleReset", RESET) if verb == "reset" else ("StaleForceRecovery", FORCE)
    return [Unannotate(key), Ev("Warning", reason), Rec(M.STALE_VERBS, (("verb", verb),))]


def handoff(**kw: Any) -> dict[str, Any]:
    """Fields of a freshly begun Handoff 7 -> 8 (TemplateChanged unless given)."""
    fields = {
        "transition.kind": "Handoff", "transition.trigger": "TemplateChanged",
        "transition.from_": 7, "transition.from_uid": "uid-7", "transition.from_pod": name(7),
        "transition.to": 8, "transition.step": "StoppingAdmission",
        "transition.started_at": NOW, "transition.deadline": at(30),  # drainSeconds
        "latest_generation": 8, "current.generation": 7,
        "Ready": ("False", "StoppingAdmission"), "Progressing": ("True", "StoppingAdmission"),
    }
    fields.update(kw)
    return fields


# Shared shapes ----------------------------------------------------------------------------------

OLD_QUIET = b.pod(7, serving=False)  # admission already stopped
OLD_DELETING = b.pod(7, serving=False, ready=False, deleting=True)
OLD_STUCK = b.pod(7, serving=False, ready=False, deleting=True, finalizers=("example.com/hold",))


def retiring(step: st.Step, **kw: Any) -> st.ToolRuntimeStatus:
    """Handoff 7 -> 8 at a retire step; current is still g7 until its pod is confirmed gone."""
    extra = {k: kw.pop(k) for k in list(kw) if k in {"last_cleanup_failure", "retry", "history", "conditions", "token"}}
    return b.in_flight(b.transition(step, **kw), **extra)


def creating(**kw: Any) -> st.ToolRuntimeStatus:
    """Handoff 7 -> 8 whose old pod is gone: at Creating, current cleared, g7 in history."""
    return b.in_flight(b.transition(S.CREATING, deadline=None, **kw), gen=None, latest=8, history=b.history(7))


def connecting(deadline: float = 40.0, **kw: Any) -> st.ToolRuntimeStatus:
    extra = {k: kw.pop(k) for k in list(kw) if k in {"retry", "history", "token"}}
    extra.setdefault("history", b.history(7))
    return b.in_flight(b.transition(S.CONNECTING, to_uid="uid-8", deadline=deadline, template_hash=b.HASH2, **kw),
                       gen=None, latest=8, **extra)


FAILURE = st.CleanupFailure(generation=7, pod=name(7), uid="uid-7", reason=st.Reason.POD_STUCK_TERMINATING,
                            message="stuck", at=at(-100))
FAILED_CONDS = b.steady_conditions(
    7,
    Ready=b.cond(C.READY, False, "CleanupFailed", "stuck"),
    Progressing=b.cond(C.PROGRESSING, False, "CleanupFailed", "stuck"),
    CleanupFailed=b.cond(C.CLEANUP_FAILED, True, "PodStuckTerminating", "stuck"),
)


def held(**kw: Any) -> st.ToolRuntimeStatus:
    """Handoff 7 -> 8 stopped at CleanupFailed for generation 7 (its pod is stuck terminating)."""
    return retiring(S.CLEANUP_FAILED, deadline=None, last_cleanup_failure=FAILURE, conditions=FAILED_CONDS, **kw)


# A forced recovery's step, as CleanupFailed writes it.
FORCED_AWAIT = {"transition.step": "AwaitingPodGone", "transition.forced": True, "transition.deadline": at(60),
                "transition.to": 8, "CleanupFailed": ("False", "ForceRecovered"),
                "Progressing": ("True", "AwaitingPodGone"),  # work moves again
                "last_cleanup_failure.generation": 7}

DEL_FIN = b.transition(S.FINALIZING, kind=K.DELETE, trigger=T.DELETED, from_=7, to=None, deadline=None)
