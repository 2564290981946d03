"""Issue 24: the model check of the seal. The same real pass and simulated API server as
test_model.py (BatonModel, every rule of it), with the runtime routed through the gateway and two
gateway replicas as actors (tests/model/sim.py, `Gateway`: the contract's forwarding rule,
modelled): each simulated second every running replica renews its Lease, follows the watch
(unless its view lags) and gets a new call; rules crash one (its Lease stays until it expires,
unanswered), start it again (a new instance: registers, then lists), pause it (SIGSTOP) for less
or more than its Lease, make its view lag, and send one more call between two passes. Issue 41
adds two actors: a client whose call is held (during a transition) leaves before a pod takes it,
and someone without the admin key posts a seal of the serving pod to a replica's admin address.
One more: the operator cut off from one replica's admin address (its seal and in-flight calls time
out) while that replica stays live, forwards and lags behind the serving=false flip, over a
handoff's whole StoppingAdmission (gateway_admin_unreachable).
Two decisions of the gateway's real code are used by the modelled replicas: whether a held call
is forwarded (baton.gateway.proxy.forwardable) and whether an admin request carries the admin key
(baton.gateway.admin.authorized); the operator's own seals carry the key (sim.SimGateways).

Invariants (judged at each call in sim.Gateway):
- no call is forwarded to a pod after its StoppingAdmission completed (left without
  DrainIncomplete, i.e. with the seal confirmed by every live replica);
- no held call is forwarded after its client left;
- a call that finds the runtime in steady state (no transition, its current pod serving, the
  replica's view up to date) is forwarded: a seal without the key changed nothing.
Mutations (hack/mutations.py) caught here: `seal-without-confirmation`, `forward-abandoned-call`,
`seal-without-key`.

Budget: MODEL_GATEWAY_EXAMPLES (default half of MODEL_EXAMPLES), MODEL_STEPS, MODEL_SEED.
"""

from __future__ import annotations

import os
import pathlib
import unittest
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import stateful
from hypothesis import strategies as hs
from hypothesis.stateful import initialize, precondition, rule

from baton.gateway import admin as gw_admin
from baton.gateway import proxy as gw_proxy
from baton.k8s import gateways as gw
from baton.lifecycle import retire
from baton.model import status as status_mod
from hack import mutations as hack_mutations

from . import sim
from .test_model import EXAMPLES, SEED, STEPS, BatonModel

pytestmark = [pytest.mark.model]

GATEWAY_EXAMPLES = int(os.environ.get("MODEL_GATEWAY_EXAMPLES", str(max(10, EXAMPLES // 2))))
GATEWAYS = ("gw-a", "gw-b")
gateway_ix = hs.integers(0, len(GATEWAYS) - 1)
patience_s = hs.sampled_from([None, 0, 1, 2])
# What someone without the admin key presents: nothing, a wrong bearer key, the key under another
# scheme.
CREDENTIALS = ("none", "wrong-key", "other-scheme")
credential_s = hs.sampled_from(CREDENTIALS)


class GatewayModel(BatonModel):
    def __init__(self) -> None:
        super().__init__()
        self.gateways = [sim.Gateway(name, self.server, self.clock) for name in GATEWAYS]
        self.intruder: str | None = None  # the credential of a foreign actor sealing each second

    def spec(self) -> dict[str, Any]:
        spec = sim.base_spec()
        spec["service"]["gateway"] = True
        return spec

    def each_second(self) -> None:
        for g in self.gateways:
            g.tick()
            if self.intruder is not None:
                self.foreign_seal_of_serving_pod(g, self.intruder)
            g.call()

    def foreign_seal_of_serving_pod(self, gate: sim.Gateway, credential: str) -> None:
        """Someone without the admin key posts a seal of the serving pod (status.current) to
        `gate`'s admin address: refused (401), it must change nothing (judged at the next call:
        sim.Gateway, a call in steady state is forwarded)."""
        s = self.server.status()
        if s is None or s.current is None:
            return
        key = self.server.admin_key.decode("ascii")
        authorization = {"none": None, "wrong-key": "Bearer " + "x" * len(key), "other-scheme": "Basic " + key}[credential]
        try:
            gate.seal(s.current.uid, authorization=authorization)
        except gw.AdminError:
            self.server.foreign_seals_refused += int(gate.running())

    @rule(g=gateway_ix, lag=hs.booleans())
    def gateway_view_lags(self, g: int, lag: bool) -> None:
        self._t("gw-lag", g, lag)
        self.gateways[g].lagging = lag

    @rule(g=gateway_ix)
    def gateway_call(self, g: int) -> None:
        """One more call, between two passes of the operator replicas."""
        self._t("gw-call", g)
        self.gateways[g].call()

    @initialize(patience=patience_s, intruder=hs.none() | credential_s)
    def gateway_actors(self, patience: int | None, intruder: str | None) -> None:
        """Each example's clients' patience, and its intruder: none, or someone without the admin
        key who posts a seal of the serving pod to every replica each second (the rules below
        change the first and add single posts)."""
        self.clients_patience(patience)
        self._t("gw-intruder", intruder)
        self.intruder = intruder

    @rule(patience=patience_s)
    def clients_patience(self, patience: int | None) -> None:
        """The clients of calls held from now on leave after `patience` seconds held (None: they
        wait for the answer). A transition's hold lasts a few seconds, mostly within one rule:
        this is how clients leave while it is under way; drawn for each example, changed by a
        rule."""
        self._t("gw-patience", patience)
        for g in self.gateways:
            g.patience = patience

    @precondition(lambda self: any(g.held_calls for g in self.gateways))
    @rule(data=hs.data())
    def held_client_leaves(self, data: hs.DataObject) -> None:
        """The client of a held call closes its connection before a pod takes the call."""
        g = data.draw(hs.sampled_from([i for i, gate in enumerate(self.gateways) if gate.held_calls]))
        i = data.draw(hs.integers(0, len(self.gateways[g].held_calls) - 1))
        self._t("gw-client-leaves", g, i)
        self.gateways[g].client_leaves(i)

    @rule(g=gateway_ix, credential=credential_s)
    def foreign_seal(self, g: int, credential: str) -> None:
        """One post of a seal of the serving pod without the admin key, between two passes; then
        a call to that replica."""
        self._t("gw-foreign-seal", g, credential)
        self.foreign_seal_of_serving_pod(self.gateways[g], credential)
        self.gateways[g].call()

    @rule(g=gateway_ix)
    def gateway_crashes(self, g: int) -> None:
        self._t("gw-crash", g)
        self.gateways[g].crash()

    @rule(g=gateway_ix)
    def gateway_starts(self, g: int) -> None:
        self._t("gw-start", g)
        if not self.gateways[g].alive:
            self.gateways[g].start()

    @rule(g=gateway_ix, seconds=hs.sampled_from([1, sim.GATEWAY_LEASE_SECONDS + 2]))
    def gateway_paused(self, g: int, seconds: int) -> None:
        """SIGSTOP for less than its Lease, or past it (the operator counts it dead meanwhile),
        then SIGCONT: it must not forward on the view it had."""
        self._t("gw-pause", g, seconds)
        gate = self.gateways[g]
        gate.paused = True
        self.run_for(seconds)
        gate.paused = False
        gate.call()

    @precondition(lambda self: self.server.steady_pod() is not None or stopping_admission_uid(self.server) is not None)
    @rule(g=gateway_ix)
    def gateway_admin_unreachable(self, g: int) -> None:
        """The operator cannot reach one replica's admin address (a network cut: its seal and
        in-flight calls time out) while the replica runs on: it renews its Lease (live), forwards,
        and its view lags from now on (it will not see the serving=false flip). A handoff starts
        if none is under way. Held until the retire left StoppingAdmission (or
        ADMIN_CUT_SECONDS), then the admin path is back and the replica gets a call before it
        catches up: only the seal could stop it forwarding to the retired pod. The flip, the seal
        and the step to Draining happen within one second of the handoff's start, so an actor
        that must land on that second (gateway_paused) almost never met it; this one holds the
        whole step."""
        self._t("gw-admin-cut", g)
        gate = self.gateways[g]
        if not gate.running():
            return
        retiring = stopping_admission_uid(self.server) or self.server.steady_pod()
        lagging = gate.lagging
        gate.lagging, gate.admin_reachable = True, False
        if stopping_admission_uid(self.server) is None:
            self.template_changes()
        self.run_for(ADMIN_CUT_SECONDS, until=lambda: left_stopping_admission(self.server, retiring))
        gate.admin_reachable = True
        gate.call()
        gate.lagging = lagging

    def teardown(self) -> None:
        for g in self.gateways:
            g.paused = False
            g.admin_reachable = True
        super().teardown()


# How long gateway_admin_unreachable holds the cut at most: the retire's StoppingAdmission ends
# within drainSeconds (DrainIncomplete past it), plus one Lease handover.
ADMIN_CUT_SECONDS = sim.BUDGETS["drainSeconds"] + sim.LEASE_SECONDS


def stopping_admission_uid(server: sim.Server) -> str | None:
    """The pod a retire under way is at StoppingAdmission for, else None."""
    s = server.status()
    t = s.transition if s is not None else None
    return t.from_uid if t is not None and t.step == status_mod.Step.STOPPING_ADMISSION and t.from_uid else None


def left_stopping_admission(server: sim.Server, uid: str | None) -> bool:
    """The retire of pod `uid` has left StoppingAdmission (or a transition retires another pod,
    or none is under way and `uid` no longer serves)."""
    s = server.status()
    t = s.transition if s is not None else None
    if s is None or uid is None:
        return True
    if t is None:
        return s.current is None or s.current.uid != uid
    return t.from_uid != uid or t.step != status_mod.Step.STOPPING_ADMISSION


GATEWAY_SETTINGS = settings(
    max_examples=GATEWAY_EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate] if os.environ.get("MODEL_NO_SHRINK") else list(Phase),
)
if SEED is not None:
    from hypothesis import seed as _seed

    # On the machine itself: Hypothesis reads the seed from the state machine class (one put on
    # its TestCase is ignored).
    _seed(int(SEED))(GatewayModel)


class TestGatewayModel(unittest.TestCase):
    """GatewayModel's run, built here rather than inherited from GatewayModel.TestCase: with
    MODEL_SEED set, test_model.py replaces BatonModel.TestCase with a plain class, which
    GatewayModel.TestCase then found instead of its own (the seeded runs ran BatonModel, with no
    gateway, under these settings)."""

    def runTest(self) -> None:
        stateful.run_state_machine_as_test(GatewayModel, settings=GATEWAY_SETTINGS)


def test_the_model_forwards_calls_and_seals_across_handoffs() -> None:
    """The model itself can fail: calls are forwarded to each generation while it serves, every
    handoff's StoppingAdmission completes with the seal, and a gateway whose view lags behind the
    label flip is stopped by the seal alone (no forward after it)."""
    m = GatewayModel()
    try:
        m.start()
        m.run_for(10)
        first = {uid for _, uid, _ in m.server.forwarded}
        assert len(first) == 1, m.server.forwarded
        m.gateways[0].lagging = True  # it will not see the label flip
        m.template_changes()
        m.run_for(30)
        assert set(m.server.sealed_at) == first, (m.server.sealed_at, first)
        uids = [uid for _, uid, _ in m.server.forwarded]
        assert len(set(uids)) == 2 and uids[-1] not in first, "the next generation gets the calls"
        lagging = m.gateways[0]
        [old] = first
        assert old in lagging.sealed and lagging.pods and lagging.cursor < len(m.server.events)
        assert not m.server.violations, m.server.violations
    finally:
        m.undo()


@pytest.mark.parametrize("real", [True, False], ids=["real-decision", "decision-forwards-abandoned-calls"])
def test_a_held_call_whose_client_left_is_never_forwarded(real: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41. During a handoff the clients of one replica leave as soon as their calls are
    held, the other's wait: by the real decision (proxy.forwardable) the first are dropped once a
    pod may take them and the others forwarded to it. The model can fail: with a decision that
    forwards every call (what mutation forward-abandoned-call does) it records the breach."""
    if not real:
        monkeypatch.setattr(gw_proxy, "forwardable", lambda *, held, client_waiting: True)
    m = GatewayModel()
    try:
        m.start()
        m.run_for(10)
        m.gateways[0].patience = 0
        m.template_changes()
        m.run_for(30)
        srv = m.server
        assert srv.held_forwarded, "the patient clients' held calls were forwarded to the next generation"
        if real:
            assert srv.cancelled, "the calls whose clients left were dropped"
            assert not srv.violations, srv.violations
        else:
            assert not srv.cancelled
            assert any("after its client left" in v for v in srv.violations), srv.violations
    finally:
        m.undo()


@pytest.mark.parametrize("credential", CREDENTIALS)
def test_a_seal_without_the_admin_key_changes_nothing(credential: str) -> None:
    """Issue 41. Someone without the admin key posts a seal of the serving pod to both replicas
    each second: every post is refused, every call is still forwarded to that pod, and the
    operator's own seals (with the key, through baton.sealing) still confirm a handoff."""
    m = GatewayModel()
    try:
        m.start()
        m.run_for(10)
        srv = m.server
        s = srv.status()
        assert s is not None and s.current is not None
        serving = s.current.uid
        before = len(srv.forwarded)
        m.intruder = credential
        m.run_for(10)
        assert srv.foreign_seals_refused == 10 * len(GATEWAYS)
        assert all(serving not in g.sealed for g in m.gateways)
        assert [uid for _, uid, _ in srv.forwarded[before:]] == [serving] * (10 * len(GATEWAYS))
        m.template_changes()
        m.run_for(30)
        assert serving in srv.sealed_at, "the handoff's StoppingAdmission completed with the operator's seals"
        assert srv.forwarded[-1][1] != serving, "the next generation gets the calls"
        assert not srv.violations, srv.violations
    finally:
        m.undo()


def test_the_model_catches_a_seal_accepted_without_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge can fail: with an admin check that accepts any bearer key (what mutation
    seal-without-key does), the intruder's seal lands and the next call in steady state is held:
    recorded as a breach."""
    monkeypatch.setattr(gw_admin, "authorized", lambda header, *, key: (header or "").startswith("Bearer "))
    m = GatewayModel()
    try:
        m.start()
        m.run_for(10)
        m.intruder = "wrong-key"
        m.run_for(2)
        assert any("did not forward a call to the runtime in steady state" in v and "it sealed that pod" in v
                   for v in m.server.violations), m.server.violations
    finally:
        m.undo()


def _stopping_admission_without_confirmation() -> Any:
    """retire.stopping_admission with hack/mutations.py's `seal-without-confirmation` applied (its
    exact text edit, compiled apart): the step completes whatever the seal's answers."""
    [mutation] = [m for m in hack_mutations.MUTATIONS if m.name == "seal-without-confirmation"]
    source = pathlib.Path(retire.__file__).read_text()
    for old, new in mutation.edits:
        assert source.count(old) == 1 or new in source, f"{mutation.name}: its text is not in {retire.__file__}"
        source = source.replace(old, new)
    namespace: dict[str, Any] = {"__name__": retire.__name__}
    exec(compile(source, f"{retire.__file__} ({mutation.name})", "exec"), namespace)
    return namespace["stopping_admission"]


@pytest.mark.parametrize("real", [True, False], ids=["real-retire", "retire-without-confirmation"])
def test_a_seal_a_live_replica_cannot_confirm_holds_stopping_admission(real: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, the scenario of gateway_admin_unreachable, driven: the operator cannot reach one
    replica's admin address while it renews its Lease and forwards, its view behind the
    serving=false flip; a handoff starts. By the real retire StoppingAdmission does not complete
    with the seal unconfirmed: it waits out drainSeconds and ends with DrainIncomplete naming that
    replica (the pod then goes, calls cut: the documented trade). The model can fail: with the
    step completing unconfirmed (mutation seal-without-confirmation) the stale replica forwards a
    call to the pod after its StoppingAdmission completed: recorded as a breach."""
    if not real:
        monkeypatch.setattr(retire, "stopping_admission", _stopping_admission_without_confirmation())
    m = GatewayModel()
    try:
        m.start()
        m.run_for(10)
        srv = m.server
        old = srv.steady_pod()
        assert old is not None
        cut = m.gateways[0]
        started = m.clock.t
        m.gateway_admin_unreachable(0)
        assert cut.admin_reachable and not cut.lagging, "the cut and the lag end with the rule"
        s = srv.status()
        assert s is not None and s.transition is not None and s.transition.from_uid == old
        retiring = s.transition
        assert retiring.step != status_mod.Step.STOPPING_ADMISSION
        # The cut replica stayed live and kept forwarding to the pod on its stale view.
        assert any(inst == cut.instance and uid == old and t > started for inst, uid, t in srv.forwarded)
        if real:
            assert old not in srv.sealed_at, "StoppingAdmission never completed with the seal unconfirmed"
            why = f"gateway replicas did not confirm the seal ({cut.instance})"
            assert retiring.drain_incomplete and retiring.message == why, retiring
            assert m.clock.t - started >= sim.BUDGETS["drainSeconds"], "it waited out the drain budget"
            assert not srv.violations, srv.violations
            m.run_for(30)
            s = srv.status()
            assert s is not None
            [entry] = [h for h in s.history if h.uid == old]
            assert entry.message == f"drain incomplete: {why}", entry
            assert status_mod.Reason.DRAIN_INCOMPLETE.value in srv.event_reasons
            assert not srv.violations, srv.violations
        else:
            assert old in srv.sealed_at and not retiring.drain_incomplete
            assert any(f"gateway {cut.instance} forwarded a call to pod uid {old} after its StoppingAdmission completed" in v
                       for v in srv.violations), srv.violations
    finally:
        m.undo()
