"""decide()'s status writes and condition bookkeeping."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import conditions as conds
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, case, check_decide, step_time
from .shapes import C, NOW, OLD_QUIET, S, at, retiring, started

pytestmark = pytest.mark.unit


# 10. Status writes and conditions ----------------------------------------------------------------

WRITES = [
    case("steady-status-not-rewritten", b.observed(lease=b.lease_free()), [], None),
    case("steady-status-with-correct-service-no-actions",
         b.observed(spec_=b.spec(service=True), lease=b.lease_free(), service=obs.ServiceInfo(
             exists=True, selector=mf.service_selector(b.RT), ports=b.SERVICE.ports, session_affinity="ClientIP")),
         [], None),
    case("spec-generation-bump-rewrites-observed-generation",
         b.observed(meta_generation=4),
         [WS({"observed_generation": 4, "Progressing.observed_generation": 4, "Ready.observed_generation": 4,
              "Progressing.last_transition_time": b.EARLIER, "fencing_token": 5})], 0),
    case("steady-write-under-fresh-lease-carries-new-token",
         b.observed(meta_generation=4, lease=b.lease_mine(6), status_=b.status(holder=b.OTHER)),
         [WS({"observed_generation": 4, "fencing_token": 6, "holder": b.ME, "transition": None})], 0),
    case("serving-pod-turns-unready-is-reported-not-handed-off",
         b.observed(pods=(b.pod(7, ready=False),)),
         [WS({"Ready": ("False", "PodNotReady"), "transition": None})], 0),
    case("serving-pod-ready-again-is-reported",
         b.observed(status_=b.status(conditions=b.steady_conditions(7, Ready=b.cond(C.READY, False, "PodNotReady")))),
         [WS({"Ready": ("True", "GenerationReady")})], 0),
    case("unreadable-secret-is-degraded-but-blocks-nothing",
         b.observed(unreadable_config_refs=("Secret/api-key",)),
         [WS({"Degraded": ("True", "ConfigRefUnreadable"), "Ready": ("True", "GenerationReady")})], 0),
    case("unreadable-secret-does-not-block-the-first-generation",
         b.fresh().model_copy(update={"unreadable_config_refs": ("Secret/api-key",),
                                      "lease": b.lease_mine(1), "lease_held_here": True}),
         [WS({"transition.kind": "Create", "transition.to": 1}), *started("Create")], 0),
    case("spec-generation-bump-needs-lease", b.observed(meta_generation=4, lease=b.lease_free(5)),
         [p.AcquireLease(token=6)], 0),
    case("step-change-keeps-progressing-since",
         b.observed(status_=retiring(S.STOPPING_ADMISSION, conditions=b.steady_conditions(
             7, Ready=b.cond(C.READY, False, "StoppingAdmission", since=at(-30)),
             Progressing=b.cond(C.PROGRESSING, True, "StoppingAdmission", since=at(-30)))),
             pods=(OLD_QUIET,), spec_=b.spec(probe=True), desired_hash=b.HASH2),
         [WS({"transition.step": "Draining", "Progressing": ("True", "Draining"),
              "Progressing.last_transition_time": at(-30), "Ready.last_transition_time": at(-30)}),
          step_time("StoppingAdmission")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", WRITES)
def test_status_writes(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


@pytest.mark.parametrize("old,true,reason,want_since", [
    pytest.param(None, True, "GenerationReady", NOW, id="ltt-new-condition-is-now"),
    pytest.param(("False", "Connecting"), True, "GenerationReady", NOW, id="ltt-flip-false-to-true-is-now"),
    pytest.param(("True", "Draining"), True, "Terminating", b.EARLIER, id="ltt-same-status-new-reason-kept"),
    pytest.param(("False", "Idle"), False, "Idle", b.EARLIER, id="ltt-unchanged-kept"),
])
def test_last_transition_time_moves_only_on_flip(
    old: tuple[str, str] | None, true: bool, reason: str, want_since: datetime.datetime
) -> None:
    before = () if old is None else (b.cond(C.PROGRESSING, old[0] == "True", old[1]),)
    after = conds.set_condition(before, kind=C.PROGRESSING, true=true, reason=reason, message="m",
                                observed_generation=4, now=NOW)
    (c,) = after
    assert (c.status, c.reason, c.observed_generation, c.last_transition_time) == (
        "True" if true else "False", reason, 4, want_since)


def test_an_unseen_object_readable_now_is_adopted_without_a_handoff() -> None:
    """A Secret unreadable when generation 7 started (part "unseen") is readable now: the steady
    status records its part and the hash with it as generation 7's; no transition starts."""
    from baton.lifecycle import decide
    from baton.lifecycle import plan as plan_mod
    parts = {"template": "t" * 16, "Secret/api-key": "unseen"}
    adopted = {"template": "t" * 16, "Secret/api-key": "a" * 20}
    st_ = b.status()
    st_ = st_.model_copy(update={"current": st_.current.model_copy(update={"parts": parts})})  # type: ignore[union-attr]
    o = b.observed(status_=st_, adopt_hash=b.HASH2, adopt_parts=tuple(adopted.items()))
    planned = decide(o, b.NOW)
    [write] = planned.find(plan_mod.WriteStatus)
    assert write.status.transition is None
    assert write.status.current is not None
    assert (write.status.current.generation, write.status.current.template_hash, write.status.current.parts) == (
        7, b.HASH2, adopted)
    # Written, the next pass (desired hash now the adopted one) does nothing more.
    again = decide(o.model_copy(update={"status": write.status, "desired_hash": b.HASH2, "adopt_hash": None,
                                        "adopt_parts": ()}), b.NOW)
    assert not again.find(plan_mod.WriteStatus) and again.find(plan_mod.ReleaseLease)
    # Not while the template itself changed: that is a handoff, as ever.
    changed = decide(o.model_copy(update={"desired_hash": "c" * 16}), b.NOW)
    [w] = changed.find(plan_mod.WriteStatus)
    assert w.status.transition is not None and w.status.transition.trigger == "TemplateChanged"


# 10b. Ready and Progressing say why (the blocking cause, a failure that holds) --------------------

# Every Degraded reason decide() writes, and whether it stops a generation from starting or
# becoming Ready (then Ready=False carries it while nothing serves).
DEGRADED_BLOCKS = [
    ("ConfigRefMissing", True),  # no pod is created without the objects it references
    ("InvalidSpec", True),  # the spec cannot be read: nothing is created
    ("PodRejected", True),  # the API server refuses the pod
    ("ConnectTimeout", True),  # the pod never became Ready within connectSeconds
    ("ConfigRefUnreadable", False),  # Baton cannot read it; the kubelet can: the pod starts
    ("ServiceError", False),  # only the Service was refused; the pod serves
    ("DrainProbeMisconfigured", False),  # said as a generation becomes Ready, which it is
    ("NameConflict", False),  # Ready says NameConflict itself when a pod holds the name
    ("LockTimeout", False),  # another holder works on the runtime
    ("LeaseOutsideView", False),
    ("UnknownStep", False),  # the transition resumed at a known step
]


@pytest.mark.parametrize("reason,blocks", DEGRADED_BLOCKS, ids=[r for r, _ in DEGRADED_BLOCKS])
def test_ready_carries_a_degraded_cause_that_blocks_serving(reason: str, blocks: bool) -> None:
    o = b.observed()
    degraded = b.cond(C.DEGRADED, True, reason, f"why: {reason}")
    nothing = b.status(gen=None, conditions=b.steady_conditions(None, Degraded=degraded))
    ready = conds.summarised(nothing, o, NOW).condition(C.READY)
    assert ready is not None and ready.status == "False"
    assert (ready.reason, ready.message) == ((reason, f"why: {reason}") if blocks else ("NoGeneration", "no generation serves yet"))
    # A generation that serves stays Ready, whatever Degraded says.
    serving = b.status(conditions=b.steady_conditions(7, Degraded=degraded))
    assert conds.summarised(serving, o, NOW).condition(C.READY) == serving.condition(C.READY)


def test_ready_gives_a_cause_up_once_it_is_gone() -> None:
    o = b.observed()
    said = b.steady_conditions(None, Ready=b.cond(C.READY, False, "ConfigRefMissing", "missing: ConfigMap/x"),
                               Progressing=b.cond(C.PROGRESSING, False, "ConfigRefMissing", "missing: ConfigMap/x"))
    healed = conds.with_conditions(b.status(gen=None, conditions=said), o, NOW,
                                   (C.DEGRADED, False, "Healthy", ""), (C.PROGRESSING, False, "Idle", ""))
    assert (healed.condition(C.READY).reason, healed.condition(C.READY).message) == (  # type: ignore[union-attr]
        "NoGeneration", "no generation serves yet")
    assert healed.condition(C.PROGRESSING).reason == "Idle"  # type: ignore[union-attr]


MISSING = ("ConfigMap/search-config",)

SAY_WHY = [
    case("config-ref-missing-nothing-serves-ready-and-progressing-say-why-one-warning",
         b.observed(status_=b.status(gen=None), pods=(), missing_config_refs=MISSING),
         [WS({"transition": None, "Degraded": ("True", "ConfigRefMissing"),
              "Ready": ("False", "ConfigRefMissing"), "Ready.message": "missing: ConfigMap/search-config",
              "Progressing": ("False", "ConfigRefMissing"), "Progressing.message": "missing: ConfigMap/search-config"}),
          Ev("Warning", "ConfigRefMissing", "ConfigMap/search-config")], 0),
    case("config-ref-missing-on-a-fresh-runtime-first-write-says-why",
         b.fresh().model_copy(update={"missing_config_refs": MISSING, "lease": b.lease_mine(1), "lease_held_here": True}),
         [WS({"transition": None, "Ready": ("False", "ConfigRefMissing"), "Progressing": ("False", "ConfigRefMissing"),
              "Degraded": ("True", "ConfigRefMissing"), "Suspended": ("False", "Active")}),
          Ev("Warning", "ConfigRefMissing", "ConfigMap/search-config")], 0),
    case("config-ref-missing-while-serving-stays-ready-change-held",
         b.observed(desired_hash=b.HASH2, missing_config_refs=MISSING),
         [WS({"Ready": ("True", "GenerationReady"), "Progressing": ("False", "ConfigRefMissing"),
              "Degraded": ("True", "ConfigRefMissing")}),
          Ev("Warning", "ConfigRefMissing", "ConfigMap/search-config")], 0),
    case("invalid-spec-nothing-serves-ready-says-why",
         b.observed(status_=b.status(gen=None), pods=(), spec_error="spec.template: not an object"),
         [WS({"Ready": ("False", "InvalidSpec"), "Progressing": ("False", "InvalidSpec")}),
          Ev("Warning", "InvalidSpec", "not an object")], 0),
    case("unreadable-config-nothing-serves-blocks-nothing",
         b.observed(status_=b.status(gen=None, retry=st.Retry(attempt=1, not_before=at(30))), pods=(),
                    unreadable_config_refs=("Secret/api-key",)),
         [WS({"Ready": ("False", "BackingOff"), "Progressing": ("False", "Idle"),
              "Degraded": ("True", "ConfigRefUnreadable")})], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", SAY_WHY)
def test_ready_and_progressing_say_why(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


def test_config_ref_missing_is_said_once_then_cleared_as_the_first_generation_begins() -> None:
    """Several passes on the same facts write nothing more and post no second event; once the
    ConfigMap exists the Create begins with Degraded cleared and Ready saying the step."""
    from baton.lifecycle import decide
    o = b.observed(status_=b.status(gen=None), pods=(), missing_config_refs=MISSING)
    [write] = decide(o, NOW).find(p.WriteStatus)
    written = o.model_copy(update={"status": write.status})
    for later in (NOW, at(60), at(3600)):
        again = decide(written, later)
        assert not again.find(p.WriteStatus) and not again.find(p.Event), again
    begun = decide(written.model_copy(update={"missing_config_refs": ()}), at(60))
    [w] = begun.find(p.WriteStatus)
    assert w.status.transition is not None and w.status.transition.kind == "Create"
    assert [(c.type, c.status, c.reason) for c in w.status.conditions if c.type in ("Ready", "Progressing", "Degraded")] == [
        ("Ready", "False", "Creating"), ("Progressing", "True", "Creating"), ("Degraded", "False", "Healthy")]


def test_a_refused_pod_holds_progressing_false_until_the_next_create_moves() -> None:
    from baton.lifecycle import decide
    rejected = "422 Invalid: Pod \"search-mcp\" is invalid: spec.containers[0].image: Required value"
    o = b.observed(status_=b.in_flight(b.transition(S.CREATING, deadline=None), gen=None, latest=8, history=b.history(7)),
                   pods=(), pod_rejected=rejected)
    [write] = decide(o, NOW).find(p.WriteStatus)
    prog, ready = write.status.condition(C.PROGRESSING), write.status.condition(C.READY)
    assert prog is not None and (prog.status, prog.reason) == ("False", "PodRejected") and rejected in prog.message
    assert ready is not None and (ready.status, ready.reason) == ("False", "PodRejected") and rejected in ready.message
    # The next create lands: Connecting, and Progressing is True again.
    t = write.status.transition
    assert t is not None
    landed = o.model_copy(update={"status": write.status, "pod_rejected": None, "pods": (b.pending(8),)})
    [moved] = decide(landed, t.not_before or NOW).find(p.WriteStatus)
    prog = moved.status.condition(C.PROGRESSING)
    assert prog is not None and (prog.status, prog.reason) == ("True", "Connecting")
