"""decide() creating and connecting: connect timeout and retry back-off."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.lifecycle import decide, transitions
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, NewPod, Rec, case, check_decide, step_time
from .shapes import C, K, M, NOW, S, T, at, connecting, creating, name, started

pytestmark = pytest.mark.unit


# 5. Connect timeout and retry back-off ---------------------------------------------------------


def timed_out_retire(attempt: int) -> obs.Observed:
    t = b.transition(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.CONNECT_TIMEOUT, from_=8, to=None, deadline=30.0)
    return b.observed(status_=b.in_flight(t, gen=None, latest=8, retry=st.Retry(attempt=attempt),
                                          history=b.history(7)),
                      pods=(), desired_hash=b.HASH2)


TIMED_OUT = "generation 8 (search-mcp) not Ready within connectSeconds=60 (attempt 2)"


def backing_off(not_before: datetime.datetime, *, older: bool = False, **kw: Any) -> obs.Observed:
    """Backing off after a connect timeout, with the status this version writes for it: Ready and
    Progressing carry the timeout. `older`: as a version before that wrote it (Ready BackingOff)."""
    if older:
        ready = b.cond(C.READY, False, "BackingOff", f"retrying after a failed start at {not_before.isoformat()}")
        progressing = b.cond(C.PROGRESSING, False, "Idle")
    else:
        ready = b.cond(C.READY, False, "ConnectTimeout", f"{TIMED_OUT}; next try at {not_before.isoformat()}")
        progressing = b.cond(C.PROGRESSING, False, "ConnectTimeout", TIMED_OUT)
    s = b.status(gen=None, latest=8, retry=st.Retry(attempt=2, not_before=not_before), history=b.history(7, 8),
                 conditions=b.steady_conditions(None, Ready=ready, Progressing=progressing,
                                                Degraded=b.cond(C.DEGRADED, True, "ConnectTimeout", TIMED_OUT)))
    return b.observed(status_=s, pods=(), desired_hash=b.HASH2, **kw)


BACKOFF = [
    case("connect-timeout-degraded-and-retires-that-generation",
         b.observed(status_=connecting(deadline=0.0), pods=(b.pending(8),), desired_hash=b.HASH2),
         [WS({"transition.kind": "Retire", "transition.trigger": "ConnectTimeout", "transition.from_": 8,
              "transition.from_uid": "uid-8", "transition.from_pod": name(8), "transition.to": None,
              "transition.step": "StoppingAdmission", "transition.deadline": at(30),
              "retry.attempt": 1, "retry.not_before": None,
              "Degraded": ("True", "ConnectTimeout"),
              # Ready says why nothing serves; Progressing that work moves (the failed pod retires).
              "Ready": ("False", "ConnectTimeout"), "Ready.message": TIMED_OUT.replace("attempt 2", "attempt 1"),
              "Progressing": ("True", "StoppingAdmission")}),
          step_time("Connecting"), Ev("Warning", "ConnectTimeout", "attempt 1"), Rec(M.CONNECT_TIMEOUTS)], 0),
    case("connect-serve-label-failing-past-deadline-is-a-connect-timeout",
         b.observed(status_=connecting(deadline=0.0), pods=(b.pod(8, serving=False),), desired_hash=b.HASH2,
                    last_error="500 InternalError"),
         [WS({"transition.kind": "Retire", "transition.trigger": "ConnectTimeout", "transition.from_": 8,
              "transition.from_uid": "uid-8", "Degraded": ("True", "ConnectTimeout")}),
          step_time("Connecting"), Ev("Warning", "ConnectTimeout", "attempt 1"), Rec(M.CONNECT_TIMEOUTS)], 0),
    case("connect-serve-label-failing-before-deadline-retries-after-a-second",
         b.observed(status_=connecting(deadline=10.0), pods=(b.pod(8, serving=False),), desired_hash=b.HASH2,
                    last_error="500 InternalError"),
         [p.SetServing(name(8), "uid-8", True)], 1.0),
    case("connect-timeout-counts-attempts",
         b.observed(status_=connecting(deadline=-5.0, retry=st.Retry(attempt=2, not_before=at(-70))),
                    pods=(b.pending(8),), desired_hash=b.HASH2),
         [WS({"transition.trigger": "ConnectTimeout", "retry.attempt": 3, "Degraded": ("True", "ConnectTimeout")}),
          step_time("Connecting"), Ev("Warning", "ConnectTimeout", "attempt 3"), Rec(M.CONNECT_TIMEOUTS)], 0),
    *[
        case(f"backoff-attempt-{n}-waits-{w}s", timed_out_retire(n),
             [WS({"transition": None, "current": None, "retry.attempt": n, "retry.not_before": at(w),
                  "Ready": ("False", "BackingOff"), "Progressing": ("False", "Idle"),
                  "history[-1].generation": 8, "history[-1].outcome": "ConnectTimeout"}),
              step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "ConnectTimeout"),))], 0)
        for n, w in [(1, 5), (2, 10), (3, 20), (4, 40), (6, 160), (7, 300), (30, 300)]
    ],
    case("connect-timeout-retired-backs-off-with-ready-and-progressing-saying-why",
         timed_out_retire(2).model_copy(update={"status": b.in_flight(
             b.transition(S.AWAITING_POD_GONE, kind=K.RETIRE, trigger=T.CONNECT_TIMEOUT, from_=8, to=None, deadline=30.0),
             gen=None, latest=8, retry=st.Retry(attempt=2), history=b.history(7),
             conditions=b.steady_conditions(None, Degraded=b.cond(C.DEGRADED, True, "ConnectTimeout", TIMED_OUT)))}),
         [WS({"transition": None, "retry.not_before": at(10),
              "Ready": ("False", "ConnectTimeout"), "Ready.message": f"{TIMED_OUT}; next try at {at(10).isoformat()}",
              "Progressing": ("False", "ConnectTimeout"), "Progressing.message": TIMED_OUT}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "ConnectTimeout"),))], 0),
    case("backoff-status-of-an-older-version-is-rewritten-once", backing_off(at(12), older=True),
         [WS({"Ready": ("False", "ConnectTimeout"), "Progressing": ("False", "ConnectTimeout")})], 0),
    case("backoff-not-before-respected-no-lease", backing_off(at(12), lease=b.lease_free()),
         [], 12.0),
    case("backoff-not-before-respected-releases-lease", backing_off(at(12)),
         [p.ReleaseLease()], 12.0),
    case("backoff-elapsed-retries-with-new-number", backing_off(at(0)),
         [WS({"transition.kind": "Create", "transition.trigger": "Retry", "transition.to": 9,
              "latest_generation": 9, "retry.attempt": 2,
              # Work moves again (Progressing), while Ready keeps the last cause until one serves.
              "Progressing": ("True", "Creating"), "Ready": ("False", "ConnectTimeout"), "Ready.message": TIMED_OUT}),
          *started("Create")], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", BACKOFF)
def test_connect_timeout_and_backoff(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


def test_backoff_formula_doubles_and_caps() -> None:
    got = [transitions.backoff_seconds(n, 5.0) for n in range(1, 10)]
    assert got == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]


def test_connecting_whose_pod_is_lost_retires_another_pod_holding_the_name() -> None:
    """Model seed 800036: the write of Connecting with the first create's UID was held in the
    network, a second create of the same number landed (another UID), then the held write
    arrived. The transition's pod is gone, and this pass read the name: another pod of the
    runtime holds it. It is retired (by its UID) before any create; the lost UID is recorded."""
    other = b.pod(8, uid_="uid-8b", ready=False, serving=False)
    plan = decide(b.observed(status_=connecting(), pods=(other,), desired_hash=b.HASH2), NOW)
    writes = plan.find(p.WriteStatus)
    assert len(writes) == 1 and not plan.find(p.CreatePod), plan
    ws = writes[0]
    t = ws.status.transition
    assert t is not None and t.step != st.Step.CREATING and t.from_uid == "uid-8b" and t.to == 9, t
    assert any(h.uid == "uid-8" and h.outcome == st.Outcome.LOST for h in ws.status.history), ws.status.history


# A create with no definite answer (invariant 2) ---------------------------------------------------

def _in_doubt(**kw: Any) -> obs.Observed:
    """Creating g8 under this Lease (token 5); our create of g8 timed out."""
    return b.observed(status_=creating(), desired_hash=b.HASH2, create_in_doubt=8,
                      last_error="TimeoutError: no answer", **kw)


def test_a_create_with_no_answer_gives_its_number_up_after_reading_the_name() -> None:
    """Sent again, the first create could land once that pod had come and gone: a second pod of
    g8. The name is read fresh first (landed: the plan stops, the next pass sees that pod), then
    Creating moves to g9 with latestGeneration, said in a Warning naming the error."""
    o = _in_doubt(pods=())
    plan = decide(o, NOW)
    check_decide(o, NOW, [
        p.ConfirmNoPod(name(8)),
        WS({"transition.step": S.CREATING, "transition.to": 9, "transition.to_uid": None, "latest_generation": 9,
            "fencing_token": 5, "Progressing": ("True", "Creating")}),
        Ev("Warning", "CreateInDoubt", "the create of generation 8 got no answer (TimeoutError: no answer); it may "
           "still land, so generation 8 is given up and generation 9 is created instead"),
    ], 0)
    (write,) = plan.find(p.WriteStatus)
    nxt = o.model_copy(update={"status": write.status})
    check_decide(nxt, NOW, [NewPod(gen=9, token=5, template_hash=b.HASH2)], 1.0)  # the next number, same token


def test_a_create_with_no_answer_that_landed_keeps_its_number() -> None:
    o = _in_doubt(pods=(b.pending(8),))
    check_decide(o, NOW, [WS({"transition.step": S.CONNECTING, "transition.to": 8}), step_time("Creating")], 0)


def test_a_create_in_doubt_of_a_number_given_up_before_changes_nothing() -> None:
    """The memory keeps the number in doubt; once given up, Creating's number is another one."""
    o = b.observed(status_=creating_at(9), pods=(), desired_hash=b.HASH2, create_in_doubt=8)
    check_decide(o, NOW, [NewPod(gen=9, token=5, template_hash=b.HASH2)], 0)


def creating_at(to: int) -> st.ToolRuntimeStatus:
    s = creating()
    assert s.transition is not None
    return s.model_copy(update={"transition": s.transition.model_copy(update={"to": to}), "latest_generation": to})
