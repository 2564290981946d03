"""Issue 24: the model check of the seal. The same real pass and simulated API server as
test_model.py (BatonModel, every rule of it), with the runtime routed through the gateway and two
gateway replicas as actors (tests/model/sim.py, `Gateway`: the contract's forwarding rule,
modelled): each simulated second every running replica renews its Lease, follows the watch
(unless its view lags) and gets a new call; rules crash one (its Lease stays until it expires,
unanswered), start it again (a new instance: registers, then lists), pause it (SIGSTOP) for less
or more than its Lease, make its view lag, and send one more call between two passes.

Invariant (judged at every forwarded call, sim.Gateway.call): no call is forwarded to a pod after
its StoppingAdmission completed (left without DrainIncomplete, i.e. with the seal confirmed by
every live replica). Mutation `seal-without-confirmation` (hack/mutations.py) is caught here.

Budget: MODEL_GATEWAY_EXAMPLES (default half of MODEL_EXAMPLES), MODEL_STEPS, MODEL_SEED.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as hs
from hypothesis.stateful import rule

from . import sim
from .test_model import EXAMPLES, SEED, STEPS, BatonModel

pytestmark = [pytest.mark.model]

GATEWAY_EXAMPLES = int(os.environ.get("MODEL_GATEWAY_EXAMPLES", str(max(10, EXAMPLES // 2))))
GATEWAYS = ("gw-a", "gw-b")
gateway_ix = hs.integers(0, len(GATEWAYS) - 1)


class GatewayModel(BatonModel):
    def __init__(self) -> None:
        super().__init__()
        self.gateways = [sim.Gateway(name, self.server, self.clock) for name in GATEWAYS]

    def spec(self) -> dict[str, Any]:
        spec = sim.base_spec()
        spec["service"]["gateway"] = True
        return spec

    def each_second(self) -> None:
        for g in self.gateways:
            g.tick()
            g.call()

    @rule(g=gateway_ix, lag=hs.booleans())
    def gateway_view_lags(self, g: int, lag: bool) -> None:
        self._t("gw-lag", g, lag)
        self.gateways[g].lagging = lag

    @rule(g=gateway_ix)
    def gateway_call(self, g: int) -> None:
        """One more call, between two passes of the operator replicas."""
        self._t("gw-call", g)
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

    def teardown(self) -> None:
        for g in self.gateways:
            g.paused = False
        super().teardown()


GatewayModel.TestCase.settings = settings(
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

    GatewayModel.TestCase = _seed(int(SEED))(GatewayModel.TestCase)


class TestGatewayModel(GatewayModel.TestCase):  # type: ignore[misc,valid-type]
    pass


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
