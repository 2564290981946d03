"""decide()'s status writes and condition bookkeeping."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import conditions as conds
from baton.lifecycle import manifests as mf
from baton.lifecycle import plan as p
from baton.model import observed as obs

from .. import builders as b
from ..expect import WS, case, check_decide, step_time
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
