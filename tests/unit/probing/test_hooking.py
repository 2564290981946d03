"""baton.hooking.observe: only the Lease holder calls a hook, only for a run persisted under the
token status carries now, with the fence of that run; the answer counts only for that run."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from baton import clock as clock_mod
from baton import hookcall, hooking
from baton.model import spec as sp
from baton.model import status as st

from .. import builders as b

KEY = (b.NS, b.RT)


class Receiver:
    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.fences: list[hookcall.Fence] = []

    async def call(self, *, pod: dict[str, Any], post: sp.HttpPost, fence: hookcall.Fence, timeout: float,
                   timeout_seconds: int) -> hookcall.Result:
        self.fences.append(fence)
        return hookcall.Result(self.ok, "answered 200" if self.ok else "answered 500")


def snap(*, token: int = b.TOKEN, run_token: int = b.TOKEN, lease_token: int = b.TOKEN, attempts: int = 1) -> Any:
    spec_ = b.spec().model_copy(update={"hooks": sp.Hooks(pre_retire=sp.Hook(http_post=sp.HttpPost(path="/r", port=8080)))})
    run = st.HookRun(hook=st.HookName.PRE_RETIRE, generation=7, started_at=b.NOW, fencing_token=run_token, attempts=attempts)
    t = b.transition(st.Step.PRE_RETIRE_HOOK, deadline=None, hook=run)
    o = b.observed(status_=b.in_flight(t, token=token), spec_=spec_, lease=b.lease_mine(lease_token),
                   pods=(b.pod(7, serving=False),))
    raw = {"metadata": {"uid": "uid-7", "name": b.name(7)}, "status": {"podIP": "127.0.0.9"}}
    return types.SimpleNamespace(observed=o, pods=[raw])


class Clock(clock_mod.Clock):
    def wall(self) -> Any:
        return b.NOW


def run_observe(snapshot: Any, *, holds: bool = True, receiver: Receiver | None = None) -> tuple[Any, Receiver]:
    receiver = receiver or Receiver()

    async def scenario() -> Any:
        hooks = hooking.Hooks(caller=receiver, concurrency=4, clock=Clock(), wake=lambda key: None)
        first = hooking.observe(snapshot, key=KEY, hooks=hooks, holds=holds, clock=Clock())
        await hooks.settle()
        second = hooking.observe(snapshot, key=KEY, hooks=hooks, holds=holds, clock=Clock())
        assert first.hook_answer is None
        return second
    return asyncio.run(scenario()), receiver


def test_the_holder_calls_with_the_runs_fence_and_gets_its_answer() -> None:
    o, receiver = run_observe(snap())
    assert receiver.fences == [hookcall.Fence(namespace=b.NS, runtime=b.RT, generation=7, fencing_token=b.TOKEN,
                                              hook="preRetire", pod=b.name(7))]
    assert o.hook_answer is not None and o.hook_answer.ok and o.hook_answer.message == "answered 200"


def test_a_replica_without_the_lease_never_calls() -> None:
    o, receiver = run_observe(snap(), holds=False)
    assert receiver.fences == [] and o.hook_answer is None


def test_never_a_call_under_a_token_status_does_not_carry_or_for_a_run_of_another_holder() -> None:
    # The Lease taken up (token 6) before status carries it: decide() writes the token first.
    o, receiver = run_observe(snap(lease_token=b.TOKEN + 1))
    assert receiver.fences == [] and o.hook_answer is None
    # The run was persisted by the holder before (token 3): decide() writes it again under ours first.
    o, receiver = run_observe(snap(run_token=3))
    assert receiver.fences == [] and o.hook_answer is None
