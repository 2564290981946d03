"""The new pod's one drain-probe check (probing.Purpose.READY_CHECK): the pass that would make a
generation current waits for its answer (bounded by timeoutSeconds; the answer wakes the
runtime), then says a probe on a path the tool lacks at once (Degraded DrainProbeMisconfigured)."""

from __future__ import annotations

from baton.lifecycle import decide
from baton.lifecycle import plan as p
from baton.model import observed as obs
from baton.model import spec as sp
from baton.model import status as st

from .. import builders as b

NOW = b.NOW

S = st.Step
PROBE = sp.DrainProbe(http_get=sp.HttpGet(path="/idle", port=8080), timeout_seconds=3)


def connecting(**kw: object) -> obs.Observed:
    t = b.transition(S.CONNECTING, to_uid=b.uid(8), template_hash=b.HASH2, deadline=30.0)
    spec = b.spec(probe=True).model_copy(update={"drain": sp.Drain(probe=PROBE)})
    return b.observed(status_=b.in_flight(t), spec_=spec, pods=(b.pod(8, serving=True, template_hash=b.HASH2),),
                      desired_hash=b.HASH2, **kw)


def test_while_the_check_is_in_flight_the_generation_is_not_made_current_and_the_wait_is_bounded() -> None:
    plan = decide(connecting(drain_probe_checking=True), NOW)
    assert not plan.find(p.WriteStatus) and plan.wait_seconds == 3.0


def test_a_misconfigured_answer_is_said_as_the_generation_becomes_current() -> None:
    plan = decide(connecting(drain_probe_misconfigured=True), NOW)
    [write] = plan.find(p.WriteStatus)
    degraded = write.status.condition(st.ConditionType.DEGRADED)
    assert write.status.current is not None and write.status.current.generation == 8
    assert degraded is not None and (degraded.status, degraded.reason) == ("True", "DrainProbeMisconfigured")
    assert [e for e in plan.find(p.Event) if e.reason == "DrainProbeMisconfigured"]


def test_a_sound_answer_makes_it_current_with_no_degraded_condition() -> None:
    [write] = decide(connecting(), NOW).find(p.WriteStatus)
    degraded = write.status.condition(st.ConditionType.DEGRADED)
    assert write.status.current is not None and (degraded is None or degraded.status != "True")
