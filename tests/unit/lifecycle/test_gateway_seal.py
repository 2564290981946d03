"""decide() retiring a generation routed through the gateway (spec.service.gateway): the seal
(StoppingAdmission completes only when every live gateway replica confirmed it), the counted
drain (Draining until no call is in flight, probe or not), their budgets, and what history says
when a drain waited for nothing or cut calls. Frozen clock (NOW); times relative to it."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from baton.lifecycle import plan as p
from baton.lifecycle import retire
from baton.model import observed as obs
from baton.model import status as st

from .. import builders as b
from ..expect import WS, Ev, NewPod, Rec, case, check_decide, step_time
from .shapes import M, NOW, OLD_QUIET, S, at, connecting, name, retiring

pytestmark = pytest.mark.unit

GW = b.spec(gateway=True)
GW_PROBE = b.spec(gateway=True, probe=True)


def gw(step: st.Step, *, spec: Any = GW, deadline: float = 20.0, **observed: Any) -> obs.Observed:
    return b.observed(status_=retiring(step, deadline=deadline), pods=(OLD_QUIET,), spec_=spec,
                      desired_hash=b.HASH2, **observed)


TERMINATE = [step_time("StoppingAdmission", 10.0), p.DeletePod(name(7), "uid-7", 30)]

SEAL = [
    # The label flip comes first, as without the gateway; the seal is asked only once it landed.
    case("serving-pod-is-flipped-first",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), spec_=GW, desired_hash=b.HASH2),
         [p.SetServing(name(7), "uid-7", False, pins_of=7)], 0),
    case("seal-not-asked-yet-waits",
         gw(S.STOPPING_ADMISSION), [], retire.GATEWAY_POLL_SECONDS),
    case("seal-unconfirmed-waits-within-the-budget",
         gw(S.STOPPING_ADMISSION, gateway_sealed=False, gateway_unconfirmed=("baton-gateway.b",)),
         [], retire.GATEWAY_POLL_SECONDS),
    case("seal-wait-never-beyond-the-deadline",
         gw(S.STOPPING_ADMISSION, deadline=0.2, gateway_sealed=False), [], 0.2),
    # Sealed: Draining is entered even without a drain probe (the gateway counts the calls).
    case("sealed-enters-draining-without-a-probe",
         gw(S.STOPPING_ADMISSION, gateway_sealed=True, gateway_inflight=3),
         [WS({"transition.step": "Draining", "transition.deadline": at(20), "Ready": ("False", "Draining")}),
          step_time("StoppingAdmission", 10.0)], 0),
    case("sealed-enters-draining-with-a-probe",
         gw(S.STOPPING_ADMISSION, spec=GW_PROBE, gateway_sealed=True, gateway_inflight=0),
         [WS({"transition.step": "Draining", "transition.deadline": at(20)}), step_time("StoppingAdmission", 10.0)], 0),
    # The EndpointSlices are waited for first, as without the gateway.
    case("endpointslices-still-listing-wait-before-the-seal",
         gw(S.STOPPING_ADMISSION, endpoints_list_retiring_pod=True, gateway_sealed=True), [], 20.0),
    case("seal-unconfirmed-at-the-deadline-terminates-naming-the-replicas",
         gw(S.STOPPING_ADMISSION, deadline=0.0, gateway_sealed=False,
            gateway_unconfirmed=("baton-gateway.b", "baton-gateway.c")),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": True, "transition.deadline": at(60),
              "transition.drain_note": "gateway replicas did not confirm the seal (baton-gateway.b, baton-gateway.c)"}),
          step_time("StoppingAdmission", 10.0),
          Ev("Warning", "DrainIncomplete", "did not confirm the seal (baton-gateway.b, baton-gateway.c)"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("seal-unlisted-at-the-deadline-says-why",
         gw(S.STOPPING_ADMISSION, deadline=0.0, gateway_sealed=False,
            gateway_error="the gateway Leases could not be listed: timeout"),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": True}),
          step_time("StoppingAdmission", 10.0), Ev("Warning", "DrainIncomplete", "could not be listed: timeout"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("many-unconfirmed-replicas-are-named-a-few",
         gw(S.STOPPING_ADMISSION, deadline=0.0, gateway_sealed=False,
            gateway_unconfirmed=tuple(f"g{i}" for i in range(8))),
         [WS({"transition.drain_note": "gateway replicas did not confirm the seal (g0, g1, g2, g3, g4 and 3 more)"}),
          step_time("StoppingAdmission", 10.0), Ev("Warning", "DrainIncomplete", "and 3 more"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
]

DRAIN = [
    case("calls-in-flight-wait",
         gw(S.DRAINING, gateway_inflight=2), [], retire.GATEWAY_POLL_SECONDS),
    case("count-unknown-is-busy",
         gw(S.DRAINING, gateway_inflight=None, gateway_unconfirmed=("baton-gateway.b",)), [], retire.GATEWAY_POLL_SECONDS),
    case("wait-never-beyond-the-deadline",
         gw(S.DRAINING, deadline=0.1, gateway_inflight=1), [], 0.1),
    case("no-call-in-flight-terminates",
         gw(S.DRAINING, gateway_inflight=0),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": False, "transition.drain_note": None,
              "transition.deadline": at(60)}),
          step_time("Draining", 10.0), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("no-call-in-flight-but-the-probe-says-busy-waits",
         gw(S.DRAINING, spec=GW_PROBE, gateway_inflight=0, drain_idle=False), [], retire.GATEWAY_POLL_SECONDS),
    case("probe-idle-but-calls-in-flight-waits",
         gw(S.DRAINING, spec=GW_PROBE, gateway_inflight=1, drain_idle=True), [], retire.GATEWAY_POLL_SECONDS),
    case("probe-idle-and-no-call-terminates",
         gw(S.DRAINING, spec=GW_PROBE, gateway_inflight=0, drain_idle=True),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": False}),
          step_time("Draining", 10.0), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("deadline-with-calls-in-flight-names-how-many",
         gw(S.DRAINING, deadline=0.0, gateway_inflight=3),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": True,
              "transition.drain_note": "3 calls still in flight at the gateway",
              "transition.message": "3 calls still in flight at the gateway"}),
          step_time("Draining", 10.0), Ev("Warning", "DrainIncomplete", "3 calls still in flight"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("deadline-with-one-call-in-flight",
         gw(S.DRAINING, deadline=0.0, gateway_inflight=1),
         [WS({"transition.drain_note": "1 call still in flight at the gateway"}), step_time("Draining", 10.0),
          Ev("Warning", "DrainIncomplete", "1 call still"), Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("deadline-with-the-count-unreadable-names-the-replica",
         gw(S.DRAINING, deadline=0.0, gateway_inflight=None, gateway_unconfirmed=("baton-gateway.b",)),
         [WS({"transition.drain_incomplete": True,
              "transition.drain_note": "the gateway's in-flight count could not be read (baton-gateway.b)"}),
          step_time("Draining", 10.0), Ev("Warning", "DrainIncomplete", "baton-gateway.b"),
          Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("deadline-with-the-probe-busy-only-keeps-the-old-note",
         gw(S.DRAINING, spec=GW_PROBE, deadline=0.0, gateway_inflight=0, drain_idle=False),
         [WS({"transition.drain_incomplete": True, "transition.drain_note": None}), step_time("Draining", 10.0),
          Ev("Warning", "DrainIncomplete", "drain probe"), Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)], 0),
]

# What the replicas said reaches status.transition.gatewayCalls for `kubectl baton status`:
# written only when it changed (a drain polls every half second), cleared when the retire moves on.
GC = st.GatewayCalls


def gw_seen(step: st.Step, calls: st.GatewayCalls | None, *, recorded: st.GatewayCalls | None = None,
            **observed: Any) -> obs.Observed:
    return b.observed(status_=retiring(step, gateway_calls=recorded), pods=(OLD_QUIET,), spec_=GW,
                      desired_hash=b.HASH2, gateway_calls=calls, **observed)


CALLS = [
    case("draining-records-changed-counts-and-keeps-waiting",
         gw_seen(S.DRAINING, GC(inflight=1, held=2, replicas=2), gateway_inflight=1),
         [WS({"transition.gateway_calls": GC(inflight=1, held=2, replicas=2), "transition.step": "Draining",
              "transition.step_started_at": at(-10)})], retire.GATEWAY_POLL_SECONDS),
    case("draining-with-the-same-counts-writes-nothing",
         gw_seen(S.DRAINING, GC(inflight=1, held=2, replicas=2), recorded=GC(inflight=1, held=2, replicas=2),
                 gateway_inflight=1), [], retire.GATEWAY_POLL_SECONDS),
    case("draining-not-asked-this-pass-writes-nothing",
         gw_seen(S.DRAINING, None, recorded=GC(inflight=1, held=0, replicas=1), gateway_inflight=None),
         [], retire.GATEWAY_POLL_SECONDS),
    case("seal-unconfirmed-records-who-answered",
         gw_seen(S.STOPPING_ADMISSION, GC(inflight=1, held=None, replicas=2, unconfirmed=1), gateway_sealed=False,
                 gateway_unconfirmed=("baton-gateway.b",)),
         [WS({"transition.gateway_calls": GC(inflight=1, held=None, replicas=2, unconfirmed=1),
              "transition.step": "StoppingAdmission"})], retire.GATEWAY_POLL_SECONDS),
    case("sealed-carries-the-counts-into-draining",
         gw_seen(S.STOPPING_ADMISSION, GC(inflight=1, held=0, replicas=1), gateway_sealed=True, gateway_inflight=1),
         [WS({"transition.step": "Draining", "transition.gateway_calls": GC(inflight=1, held=0, replicas=1)}),
          step_time("StoppingAdmission", 10.0)], 0),
    case("the-drain-ending-clears-the-counts",
         gw_seen(S.DRAINING, GC(inflight=0, held=3, replicas=1), recorded=GC(inflight=1, held=3, replicas=1),
                 gateway_inflight=0),
         [WS({"transition.step": "Terminating", "transition.gateway_calls": None}),
          step_time("Draining", 10.0), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("the-old-pod-gone-clears-the-counts",
         gw_seen(S.DRAINING, None, recorded=GC(inflight=1, held=3, replicas=1)).model_copy(update={"pods": ()}),
         [WS({"transition.step": "Creating", "transition.gateway_calls": None}), step_time("Draining", 10.0),
          Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
]

# Without the gateway nothing changes, but a retire that could not wait for calls says so.
WITHOUT = [
    case("no-probe-no-gateway-terminates-and-notes-it",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), pods=(OLD_QUIET,), desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_note": retire.NOT_DRAINED}), *TERMINATE], 0),
    case("no-probe-lost-pod-notes-nothing",
         b.observed(status_=b.in_flight(b.transition(S.STOPPING_ADMISSION, trigger=st.Trigger.POD_LOST)),
                    pods=(OLD_QUIET,), desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating", "transition.drain_note": None}), *TERMINATE], 0),
    case("gateway-answers-are-ignored-without-the-gateway",
         b.observed(status_=retiring(S.STOPPING_ADMISSION), pods=(OLD_QUIET,), spec_=b.spec(service=True),
                    gateway_sealed=False, desired_hash=b.HASH2),
         [WS({"transition.step": "Terminating"}), *TERMINATE], 0),
]

# A drain probe the tool has no endpoint for (404, 405, 501): said, and never waited for as "busy".
PROBE = b.spec(probe=True)
MISCONFIGURED = [
    case("misconfigured-probe-ends-the-drain-at-once-and-says-so",
         gw(S.DRAINING, spec=PROBE, drain_idle=False, drain_probe_misconfigured=True,
            drain_probe_error="answered 404: the tool has no such endpoint"),
         [WS({"transition.step": "Terminating", "transition.drain_incomplete": False,
              "transition.drain_note": "not drained: spec.drain.probe GET /idle on port 8080 answered 404: the tool "
              "has no such endpoint: a drain cannot ask it, so it will not wait for calls in flight; fix the path "
              "or remove the probe"}),
          step_time("Draining", 10.0), Ev("Warning", "DrainProbeMisconfigured", "answered 404"),
          p.DeletePod(name(7), "uid-7", 30)], 0),
    case("misconfigured-probe-with-the-gateway-still-waits-for-the-calls",
         gw(S.DRAINING, spec=GW_PROBE, drain_idle=False, drain_probe_misconfigured=True, gateway_inflight=1),
         [], retire.GATEWAY_POLL_SECONDS),
    case("misconfigured-probe-with-the-gateway-ends-when-the-calls-do",
         gw(S.DRAINING, spec=GW_PROBE, drain_idle=False, drain_probe_misconfigured=True, gateway_inflight=0),
         [WS({"transition.step": "Terminating", "transition.drain_note": None}), step_time("Draining", 10.0),
          Ev("Warning", "DrainProbeMisconfigured", "GET /idle"), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("a-new-generation-with-a-misconfigured-probe-is-ready-and-degraded",
         b.observed(status_=connecting(), pods=(b.pod(8),), spec_=PROBE, desired_hash=b.HASH2,
                    drain_probe_misconfigured=True, drain_probe_error="answered 405: the tool has no such endpoint"),
         [WS({"current.generation": 8, "transition": None, "Ready": ("True", "GenerationReady"),
              "Degraded": ("True", "DrainProbeMisconfigured")}),
          step_time("Connecting"), Ev("Normal", "GenerationReady", "generation 8"),
          Ev("Warning", "DrainProbeMisconfigured", "answered 405")], 0),
    case("a-new-generation-with-a-good-probe-is-healthy",
         b.observed(status_=connecting(), pods=(b.pod(8),), spec_=PROBE, desired_hash=b.HASH2),
         [WS({"current.generation": 8, "Ready": ("True", "GenerationReady")}), step_time("Connecting"),
          Ev("Normal", "GenerationReady", "generation 8")], 0),
]

# History: what the generation's entry says once its pod is gone.
HISTORY = [
    case("history-says-calls-were-cut",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, drain_incomplete=True,
                                     drain_note="3 calls still in flight at the gateway"), pods=(), desired_hash=b.HASH2),
         [WS({"history[-1].message": "drain incomplete: 3 calls still in flight at the gateway"}),
          step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),)),
          NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("history-says-nothing-was-drained",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, drain_note=retire.NOT_DRAINED), pods=(), desired_hash=b.HASH2),
         [WS({"history[-1].message": retire.NOT_DRAINED}), step_time("AwaitingPodGone"),
          Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("history-of-a-clean-gateway-drain-is-quiet",
         b.observed(status_=retiring(S.AWAITING_POD_GONE), pods=(), spec_=GW, desired_hash=b.HASH2),
         [WS({"history[-1].message": None}), step_time("AwaitingPodGone"), Rec(M.HANDOFFS, (("outcome", "Retired"),)),
          NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
]


# Issue 42 item 4: the sessions the replicas last forwarded to the retiring generation, counted at
# the drain's end (gatewayCalls is cleared then: kept in the transition), reach its history entry.
SESSIONS = [
    case("the-drain-ending-keeps-the-session-count",
         gw_seen(S.DRAINING, GC(inflight=0, held=0, replicas=2, sessions=3),
                 recorded=GC(inflight=1, held=0, replicas=2, sessions=3), gateway_inflight=0),
         [WS({"transition.step": "Terminating", "transition.gateway_calls": None, "transition.sessions_to_rebind": 3}),
          step_time("Draining", 10.0), p.DeletePod(name(7), "uid-7", 30)], 0),
    case("the-drain-ending-at-its-budget-keeps-the-last-count-recorded",
         gw_seen(S.DRAINING, None, recorded=GC(inflight=1, held=0, replicas=1, sessions=2), gateway_inflight=None,
                 gateway_unconfirmed=("baton-gateway.b",)).model_copy(
             update={"status": retiring(S.DRAINING, deadline=0.0, gateway_calls=GC(inflight=1, held=0, replicas=1,
                                                                                 sessions=2))}),
         [WS({"transition.step": "Terminating", "transition.sessions_to_rebind": 2}), step_time("Draining", 10.0),
          Ev("Warning", "DrainIncomplete", "baton-gateway.b"), Rec(M.DRAIN_INCOMPLETE), p.DeletePod(name(7), "uid-7", 30)],
         0),
    case("an-unknown-count-stays-unknown",
         gw_seen(S.DRAINING, GC(inflight=0, held=0, replicas=1), gateway_inflight=0),
         [WS({"transition.step": "Terminating", "transition.sessions_to_rebind": None}), step_time("Draining", 10.0),
          p.DeletePod(name(7), "uid-7", 30)], 0),
    case("history-counts-the-sessions-to-rebind",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, sessions_to_rebind=3), pods=(), spec_=GW, desired_hash=b.HASH2),
         [WS({"history[-1].sessions_to_rebind": 3, "history[-1].message": None}), step_time("AwaitingPodGone"),
          Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("history-counts-the-sessions-of-a-pod-gone-mid-drain",
         gw_seen(S.DRAINING, None, recorded=GC(inflight=1, held=0, replicas=1, sessions=4)).model_copy(update={"pods": ()}),
         [WS({"transition.step": "Creating", "history[-1].sessions_to_rebind": 4}), step_time("Draining", 10.0),
          Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
    case("history-without-the-gateway-counts-no-sessions",
         b.observed(status_=retiring(S.AWAITING_POD_GONE, sessions_to_rebind=3), pods=(), desired_hash=b.HASH2),
         [WS({"history[-1].sessions_to_rebind": None}), step_time("AwaitingPodGone"),
          Rec(M.HANDOFFS, (("outcome", "Retired"),)), NewPod(gen=8, token=5, template_hash=b.HASH2)], 0),
]


@pytest.mark.parametrize("o,now,expected,wait", SEAL + DRAIN + CALLS + WITHOUT + MISCONFIGURED + HISTORY + SESSIONS)
def test_gateway_retire(o: obs.Observed, now: datetime.datetime, expected: list[Any], wait: float | None) -> None:
    check_decide(o, now, expected, wait)


def test_a_long_note_fits_the_crd() -> None:
    o = gw(S.STOPPING_ADMISSION, deadline=0.0, gateway_sealed=False, gateway_error="x" * 1000)
    from baton.lifecycle import decide
    write = decide(o, NOW).actions[0]
    assert isinstance(write, p.WriteStatus) and write.status.transition is not None
    note = write.status.transition.drain_note
    assert note is not None and len(note) == retire.DRAIN_NOTE_LIMIT <= 512
