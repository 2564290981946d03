"""decide() for idle and wake (spec.idle; issue 43): when a serving generation goes idle, what keeps
it awake, how an idle runtime wakes, and what a missed wake leaves (one pod at most, a back-off)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import decide
from baton.lifecycle import plan as p
from baton.model import claims as cm
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as sp
from baton.model import status as st

from .. import builders as b
from ..expect import WS, resolve
from .shapes import C, K, NOW, S, T, at

pytestmark = pytest.mark.unit

IDLE = sp.Idle(after_seconds=900, wake_on_request=True, wake_seconds=45)
QUIET = obs.Activity(idle_seconds=900.0, inflight=0, held=0)  # exactly afterSeconds without a call
SINCE = at(-600)  # idle for ten minutes
ANY = "any"  # a wait not asserted (the row asserts only that nothing idles)
GATEWAY_DEMAND = "gateway replica baton-gateway.gw-1"


def idle_spec(idle: sp.Idle | None = IDLE, **kw: Any) -> sp.ToolRuntimeSpec:
    return b.spec(gateway=True, **kw).model_copy(update={"idle": idle})


def serving(**kw: Any) -> obs.Observed:
    """g7 serves, Ready for an hour (b.current: readySince = NOW - 1 h); the gateway said QUIET."""
    kw.setdefault("spec_", idle_spec())
    kw.setdefault("activity", QUIET)
    return b.observed(**kw)


def idle_status(*, since: datetime.datetime = SINCE, retry: st.Retry | None = None,
                last_wake: st.LastWake | None = None, ready: tuple[str, str] = ("Idle", "generation 7 retired (Idled)"),
                degraded: tuple[bool, str, str] = (False, "Healthy", "")) -> st.ToolRuntimeStatus:
    """Idle: nothing serves, g7 in history as Idled, status.idle.since set."""
    conds = b.steady_conditions(None, Ready=b.cond(C.READY, False, *ready),
                                Degraded=b.cond(C.DEGRADED, degraded[0], degraded[1], degraded[2]))
    return b.status(gen=None, latest=7, conditions=conds, history=b.history(7, outcome=st.Outcome.IDLED),
                    retry=retry, idle=st.IdleStatus(since=since, last_wake=last_wake))


def idle_runtime(**kw: Any) -> obs.Observed:
    kw.setdefault("spec_", idle_spec())
    kw.setdefault("status_", idle_status())
    kw.setdefault("pods", ())
    return b.observed(**kw)


def transition_of(plan: p.Plan) -> st.Transition | None:
    writes = plan.find(p.WriteStatus)
    assert writes, f"no status write: {plan.note} {plan.kinds()}"
    return writes[0].status.transition  # type: ignore[no-any-return]


def written(plan: p.Plan) -> st.ToolRuntimeStatus:
    writes = plan.find(p.WriteStatus)
    assert len(writes) == 1, plan.actions
    return writes[0].status  # type: ignore[no-any-return]


def events(plan: p.Plan) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in plan.find(p.Event)]


def starts_nothing(plan: p.Plan) -> None:
    """No pod created, no transition begun."""
    assert not plan.find(p.CreatePod), plan.actions
    for w in plan.find(p.WriteStatus):
        assert w.status.transition is None, w.status.transition


# 1. Going idle ------------------------------------------------------------------------------------


def test_idle_after_after_seconds_retires_through_the_fenced_path() -> None:
    plan = decide(serving(), NOW)
    t = transition_of(plan)
    assert t is not None
    assert (t.kind, t.trigger, t.from_, t.to, t.step) == (K.RETIRE, T.IDLE, 7, None, S.STOPPING_ADMISSION)
    # The normal retire: stop admission first (the label flip, gated by pins), never a create.
    assert plan.find(p.SetServing) == [p.SetServing(b.name(7), "uid-7", False, pins_of=7)]
    assert not plan.find(p.CreatePod)


@pytest.mark.parametrize(("idle_seconds", "ready_for", "wait"), [
    (899.0, 3600.0, 1.0),  # a second short: the wait is what is left (at least MIN_RECHECK_SECONDS)
    (600.0, 3600.0, 300.0),  # 300 s left by the gateway's count
    (5000.0, 100.0, 800.0),  # Ready 100 s ago: counted from then, whatever the gateway says
    (899.7, 3600.0, 1.0),  # 0.3 s left: never a busy loop
], ids=["a-second-short", "gateway-count", "ready-since-counts", "floor"])
def test_not_idle_before_after_seconds_the_wait_returned(idle_seconds: float, ready_for: float, wait: float) -> None:
    status = b.status().model_copy(update={"current": b.current().model_copy(update={"ready_since": at(-ready_for)})})
    plan = decide(serving(status_=status, activity=obs.Activity(idle_seconds=idle_seconds, inflight=0, held=0)), NOW)
    starts_nothing(plan)
    assert plan.wait_seconds == pytest.approx(wait)


def _claim(state: cm.ClaimState) -> cm.Claim:
    return cm.Claim(name="c1", uid="uid-c1", runtime=b.RT, generation=7, fork="plan-1", branch="b", state=state,
                    phase="Bound", bound="True")


KEPT_AWAKE = [
    pytest.param(dict(activity=obs.Activity(idle_seconds=5000.0, inflight=1, held=0)), 30.0, id="call-in-flight"),
    pytest.param(dict(activity=obs.Activity(idle_seconds=5000.0, inflight=0, held=2)), 30.0, id="calls-held"),
    # Unknown (a replica unread): not idled, but asked again (nothing else brings it back before the resync).
    pytest.param(dict(activity=None), 30.0, id="activity-unknown"),
    pytest.param(dict(claims=(_claim(cm.ClaimState.COMMITTED),)), None, id="claim-pins-the-generation"),
    pytest.param(dict(claims_known=False), None, id="claims-unreadable-fail-closed"),
    pytest.param(dict(annotations={names.ANN_KEEP_AWAKE: "true"}), None, id="keep-awake-annotation"),
    pytest.param(dict(spec_=idle_spec(None)), None, id="no-spec-idle"),
    pytest.param(dict(spec_=idle_spec().model_copy(update={"service": b.SERVICE})), None, id="gateway-off"),
    pytest.param(dict(pods=(b.pod(7, ready=False),)), 0, id="pod-not-ready"),  # Ready=False PodNotReady written first
    pytest.param(dict(spec_=idle_spec().model_copy(update={"handoff": sp.Handoff(policy=sp.HandoffPolicy.MANUAL)}),
                      desired_hash=b.HASH2,
                      status_=b.status(pending=st.PendingChange(template_hash=b.HASH2, since=at(-5)),
                                       conditions=b.steady_conditions(UpdatePending=b.cond(C.UPDATE_PENDING, True, "WaitingForReset")))),
                 ANY, id="pending-change"),
]


@pytest.mark.parametrize(("overrides", "wait"), KEPT_AWAKE)
def test_kept_awake(overrides: dict[str, Any], wait: float | None | str) -> None:
    plan = decide(serving(**overrides), NOW)
    for w in plan.find(p.WriteStatus):
        t = w.status.transition
        assert t is None or t.trigger != T.IDLE, t
    assert not plan.find(p.CreatePod)
    if wait != ANY:
        assert plan.wait_seconds == wait


def test_released_claim_does_not_keep_awake() -> None:
    # The same row as claim-pins-the-generation with the claim released: it idles (the test can fail).
    t = transition_of(decide(serving(claims=(_claim(cm.ClaimState.RELEASED),)), NOW))
    assert t is not None and t.trigger == T.IDLE


def test_suspend_retires_as_suspended_not_idle() -> None:
    t = transition_of(decide(serving(spec_=idle_spec(suspend=True)), NOW))
    assert t is not None and t.trigger == T.SUSPENDED


def test_transition_in_flight_is_never_interrupted_by_idle() -> None:
    status = b.in_flight(b.transition(S.DRAINING))
    plan = decide(serving(status_=status, pods=(b.pod(7, serving=False),), gateway_inflight=0, desired_hash=b.HASH2), NOW)
    t = transition_of(plan)
    assert t is not None and t.trigger == T.TEMPLATE_CHANGED and t.step == S.TERMINATING


# 2. The idle retire's end -------------------------------------------------------------------------


def idle_retire(step: st.Step = S.AWAITING_POD_GONE) -> st.ToolRuntimeStatus:
    return b.in_flight(b.transition(step, kind=K.RETIRE, trigger=T.IDLE, to=None))


def test_idle_retire_ends_idle_and_creates_nothing() -> None:
    plan = decide(serving(status_=idle_retire(), pods=()), NOW)
    status = written(plan)
    assert status.transition is None and status.current is None
    assert status.idle is not None and status.idle.since == NOW
    assert status.history[-1].generation == 7 and status.history[-1].outcome == st.Outcome.IDLED
    assert resolve(status, "Ready") == ("False", "Idle")
    assert resolve(status, "Progressing") == ("False", "Idle")
    assert ("Normal", "Idle") in events(plan)
    assert p.Record(p.Metric.HANDOFFS, (("outcome", "Idled"),)) in plan.actions
    assert not plan.find(p.CreatePod)


def test_idle_runtime_without_demand_stays_idle() -> None:
    plan = decide(idle_runtime(), NOW)
    starts_nothing(plan)
    assert plan.wait_seconds is None


def test_idle_retire_after_spec_idle_removed_is_not_idle() -> None:
    # spec.idle removed while the idle retire ran: the runtime is not idle, and starts again next pass.
    plan = decide(serving(status_=idle_retire(), pods=(), spec_=idle_spec(None)), NOW)
    status = written(plan)
    assert status.idle is None and ("Normal", "Idle") not in events(plan)
    assert resolve(status, "Ready") == ("False", "NoGeneration")


# 3. Waking ----------------------------------------------------------------------------------------


def test_wake_on_gateway_demand() -> None:
    plan = decide(idle_runtime(wake_demand=GATEWAY_DEMAND), NOW)
    WS({"transition.kind": "Create", "transition.trigger": "Wake", "transition.to": 8,
        "transition.step": "Creating", "transition.started_at": NOW, "latest_generation": 8,
        "idle.since": SINCE, "idle.last_wake.requested_at": NOW, "idle.last_wake.outcome": None,
        "Ready": ("False", "Waking")}).check(plan.actions[0])
    assert ("Normal", "Waking") in events(plan)
    assert GATEWAY_DEMAND in (written(plan).transition.message or "")  # type: ignore[union-attr]


@pytest.mark.parametrize(("asked", "wakes"), [(at(-10), True), (at(-700), False), ("not a time", False)],
                         ids=["newer-than-since", "older-than-since", "unreadable"])
def test_wake_on_kubectl_annotation(asked: datetime.datetime | str, wakes: bool) -> None:
    value = asked if isinstance(asked, str) else asked.isoformat().replace("+00:00", "Z")
    plan = decide(idle_runtime(annotations={names.ANN_WAKE: value}), NOW)
    if wakes:
        t = transition_of(plan)
        assert t is not None and t.trigger == T.WAKE and names.ANN_WAKE in (t.message or "")
    else:
        starts_nothing(plan)


def test_wake_on_request_false_ignores_gateway_demand_but_not_the_annotation() -> None:
    no_requests = idle_spec(IDLE.model_copy(update={"wake_on_request": False}))
    starts_nothing(decide(idle_runtime(spec_=no_requests, wake_demand=GATEWAY_DEMAND), NOW))
    plan = decide(idle_runtime(spec_=no_requests, wake_demand=GATEWAY_DEMAND,
                               annotations={names.ANN_WAKE: at(-1).isoformat()}), NOW)
    t = transition_of(plan)
    assert t is not None and t.trigger == T.WAKE


def waking(step: st.Step, *, started: float, to_uid: str | None = None, deadline: float | None = None,
           retry: st.Retry | None = None) -> st.ToolRuntimeStatus:
    t = b.transition(step, kind=K.CREATE, trigger=T.WAKE, from_=None, to=8, to_uid=to_uid, started=started,
                     step_started=started, deadline=deadline, message=f"wake asked by {GATEWAY_DEMAND}")
    return idle_status(retry=retry, last_wake=st.LastWake(requested_at=at(started), message=t.message),
                       ready=("Waking", "")).model_copy(update={"transition": t, "latest_generation": 8})


def test_the_wakes_deadline_is_wake_seconds_from_its_start() -> None:
    plan = decide(idle_runtime(status_=waking(S.CREATING, started=-3.0), pods=(b.pending(8),)), NOW)
    WS({"transition.step": "Connecting", "transition.deadline": at(-3 + 45), "Ready": ("False", "Waking")}).check(
        plan.actions[0])


def test_a_missed_wake_retires_the_pod_says_wake_failed_and_counts() -> None:
    status = waking(S.CONNECTING, started=-46.0, to_uid="uid-8", deadline=-1.0)
    plan = decide(idle_runtime(status_=status, pods=(b.pending(8),)), NOW)
    s = written(plan)
    assert s.transition is not None
    assert (s.transition.kind, s.transition.trigger, s.transition.from_uid) == (K.RETIRE, T.CONNECT_TIMEOUT, "uid-8")
    assert resolve(s, "Degraded") == ("True", "WakeFailed")
    assert "spec.idle.wakeSeconds=45" in resolve(s, "Degraded.message")
    assert s.retry == st.Retry(attempt=1)
    assert s.idle is not None and s.idle.since == SINCE  # still idle
    assert s.idle.last_wake is not None and s.idle.last_wake.outcome == st.WakeOutcome.FAILED
    assert s.idle.last_wake.seconds == 46.0
    assert ("Warning", "WakeFailed") in events(plan)
    assert p.Record(p.Metric.WAKES, (("outcome", "Failed"),)) in plan.actions
    assert not plan.find(p.CreatePod)


def test_a_missed_wakes_retire_ends_backing_off_still_idle() -> None:
    t = b.transition(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.CONNECT_TIMEOUT, from_=8, to=None)
    status = idle_status(retry=st.Retry(attempt=1), degraded=(True, "WakeFailed", "not Ready within wakeSeconds"),
                         ready=("AwaitingPodGone", "")).model_copy(update={"transition": t, "latest_generation": 8})
    plan = decide(idle_runtime(status_=status), NOW)
    s = written(plan)
    assert s.transition is None and s.current is None
    assert s.retry == st.Retry(attempt=1, not_before=at(5))  # backoff_base_seconds 5, attempt 1
    assert s.idle is not None and s.idle.since == SINCE
    assert resolve(s, "Ready") == ("False", "WakeFailed")
    assert resolve(s, "Degraded") == ("True", "WakeFailed")
    assert not plan.find(p.CreatePod)


def settled(o: obs.Observed, now: datetime.datetime) -> p.Plan:
    """decide() after the steady status writes it asks first (at most three) are carried out."""
    for _ in range(3):
        plan = decide(o, now)
        writes = plan.find(p.WriteStatus)
        if not writes or writes[0].status.transition is not None:
            return plan
        o = o.model_copy(update={"status": plan.find(p.WriteStatus)[0].status})
    raise AssertionError("status keeps changing")


def test_no_second_wake_during_the_back_off() -> None:
    backing_off = idle_status(retry=st.Retry(attempt=2, not_before=at(4)))
    plan = settled(idle_runtime(status_=backing_off, wake_demand=GATEWAY_DEMAND,
                                annotations={names.ANN_WAKE: at(-1).isoformat()}), NOW)
    starts_nothing(plan)
    assert plan.wait_seconds == pytest.approx(4.0)
    # Past the back-off, the demand wakes it again (attempt kept for the next back-off).
    t = transition_of(decide(idle_runtime(status_=backing_off, wake_demand=GATEWAY_DEMAND), at(4)))
    assert t is not None and t.trigger == T.WAKE
    # Past the back-off and no demand: still idle.
    starts_nothing(decide(idle_runtime(status_=backing_off), at(4)))


def test_woken_clears_since_and_records_the_last_wake() -> None:
    status = waking(S.CONNECTING, started=-10.0, to_uid="uid-8", deadline=35.0, retry=st.Retry(attempt=1))
    plan = decide(idle_runtime(status_=status, pods=(b.pod(8),)), NOW)
    s = written(plan)
    assert s.current is not None and s.current.generation == 8 and s.transition is None and s.retry is None
    assert s.idle is not None and s.idle.since is None
    last = s.idle.last_wake
    assert last is not None and (last.requested_at, last.ready_at, last.seconds, last.outcome) == (
        at(-10), NOW, 10.0, st.WakeOutcome.WOKEN)
    assert resolve(s, "Ready") == ("True", "GenerationReady")
    assert ("Normal", "Woken") in events(plan)
    assert p.Record(p.Metric.WAKES, (("outcome", "Woken"),)) in plan.actions
    assert p.Record(p.Metric.WAKE_SECONDS, (), 10.0) in plan.actions


def test_spec_idle_removed_while_idle_starts_normally() -> None:
    plan = decide(idle_runtime(spec_=idle_spec(None)), NOW)
    WS({"transition.kind": "Create", "transition.trigger": "Resumed", "transition.to": 8, "idle.since": None,
        "Ready": ("False", "Creating")}).check(plan.actions[0])


def test_suspended_while_idle_is_no_longer_idle() -> None:
    plan = decide(idle_runtime(spec_=idle_spec(suspend=True), wake_demand=GATEWAY_DEMAND), NOW)
    starts_nothing(plan)
    s = written(plan)
    assert s.idle is not None and s.idle.since is None
    assert resolve(s, "Suspended") == ("True", "Suspended")


# 4. Across passes: idle, wake, woken, with the fake executor ------------------------------------


def test_idle_then_wake_then_woken_one_pod_at_a_time() -> None:
    # The gateway replicas confirm the seal and count no call in flight on the retiring pod.
    world = b.World(serving(spec_=idle_spec(), pods=(b.pod(7),), gateway_sealed=True, gateway_inflight=0))
    now = NOW
    for _ in range(30):  # the idle retire, to its end (World asserts one pod at a time on every create)
        plan = decide(world.o, now)
        world.apply(plan, now)
        if world.o.status.transition is None and world.o.status.idle is not None:
            break
        for q in world.o.pods:
            if q.deleting:
                world.pod_event(q.uid, gone=True)
        now += datetime.timedelta(seconds=1)
    assert world.o.status.idle is not None and world.o.status.idle.since is not None and not world.o.pods
    world.o = world.o.model_copy(update={"wake_demand": GATEWAY_DEMAND, "activity": None})
    for _ in range(30):
        plan = decide(world.o, now)
        world.apply(plan, now)
        if world.o.status.current is not None:
            break
        for q in world.o.pods:
            if not q.ready:
                world.pod_event(q.uid, ready=True, phase="Running")
        now += datetime.timedelta(seconds=1)
    assert world.o.status.current is not None and world.o.status.current.generation == 8
    assert world.o.status.idle is not None and world.o.status.idle.since is None
    assert world.o.status.idle.last_wake is not None and world.o.status.idle.last_wake.outcome == st.WakeOutcome.WOKEN
    assert len(world.o.pods) == 1
