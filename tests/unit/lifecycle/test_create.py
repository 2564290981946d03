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
from ..expect import WS, Ev, Rec, case, check_decide, step_time
from .shapes import C, K, M, NOW, S, T, at, connecting, name, started

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
