"""The lifecycle Lease gate: acquire, fenced-out take-up, the resume-token write, lock waits."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Callable

from baton.lifecycle import conditions
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st


# Wake a little after a foreign Lease should have expired, so takeover is prompt.
LEASE_EXPIRY_SLACK = 0.2


def held_here(o: obs.Observed) -> bool:
    # lease_held_here is the executor's own judgement: renewed in time by the local monotonic
    # clock, with a safety margin. Timestamps in the Lease are never compared with our clock.
    """Whether the Lease names this identity and this process holds it (renewed in time)."""
    return o.lease.holder == o.identity and o.lease_held_here


def with_lease(o: obs.Observed, now: datetime.datetime, then: Callable[[], p.Plan]) -> p.Plan:
    """`then()` only under a Lease held here whose token status carries; otherwise the plan that
    gets there (acquire, take it up past status, write our token) or waits for another holder."""
    lease, status = o.lease, o.status
    if held_here(o):
        if status.fencing_token > lease.token:
            # Status carries a token above the Lease we hold. Either our view of the Lease is
            # stale (another took it and wrote status: the compare-and-swap below fails and we
            # stand back), or the Lease was deleted and created again below a token its holder
            # had written (a person deleted it between that holder's acquire and our create):
            # take our own Lease up past the status first, never act on the lower token. Waiting
            # instead would hold that Lease, renewed, and do nothing, for good.
            token = status.fencing_token + 1
            return p.Plan((p.AcquireLease(token=token),), 0, f"fenced out: take the Lease up to token {token}")
        if status.fencing_token < lease.token and status.transition is not None:
            # Resuming someone's transition: write our token before any step is acted on.
            resumed = transitions.stamped(o, now)
            told = (f"{o.identity} holds the lifecycle Lease (fencing token {lease.token}); "
                    f"resuming {st.text(status.transition.kind)} at step {st.text(status.transition.step)}")
            confirm: tuple[p.Action, ...] = ()
            if create_may_be_in_flight(o):
                # The holder before may have sent this number's create, still held in the
                # network: sent again here, a late one could land after this pod has come and
                # gone, a second pod of one number (chaos seed 11179). The name is read fresh
                # first (its pod may be there, behind our view: then the number is kept), then
                # the number is given up in the write of our token; a late pod is a stray.
                given_up = status.transition.to
                assert given_up is not None
                resumed, nxt = transitions.number_given_up(o, status.transition, now, number=given_up)
                told += (f"; generation {given_up} given up (its create may still be in flight under "
                         f"fencing token {status.fencing_token}), generation {nxt} is created instead")
                if o.pod_by_name(names.pod_name(o.name)) is None:
                    confirm = (p.ConfirmNoPod(names.pod_name(o.name)),)
            return p.Plan(
                (*confirm, p.WriteStatus(resumed), p.Event("Normal", st.Reason.LEASE_ACQUIRED.value, told)),
                0,
                "write fencing token before resuming",
            )
        return then()
    if o.deleting and o.namespace_terminating and lease.free():
        # The namespace is being deleted: its Lease went with it and cannot be created again.
        # Nothing can start a generation there (every create is refused, for everyone), so the
        # deletion finishes without the Lease; pods are still deleted by UID, status written on
        # the version read.
        planned = then()
        return dataclasses.replace(planned, lease_free=True, note=f"{planned.note} (no Lease: the namespace is being deleted)")
    if o.lease_outside_view is not None and lease.free():
        # Our create met a Lease the label-selected view does not show: said once (a status
        # write on the version read, as LockTimeout's), then the create is tried again, backed
        # off, so a Lease labelled again or deleted is taken as usual.
        degraded = status.condition(st.ConditionType.DEGRADED)
        if not (degraded and degraded.status == "True" and degraded.reason == st.Reason.LEASE_OUTSIDE_VIEW.value
                and degraded.message == o.lease_outside_view):
            said = conditions.with_conditions(
                status, o, now, (st.ConditionType.DEGRADED, True, st.Reason.LEASE_OUTSIDE_VIEW, o.lease_outside_view))
            return p.Plan((p.WriteStatus(said), p.Event("Warning", st.Reason.LEASE_OUTSIDE_VIEW.value, o.lease_outside_view)),
                          0, "Lease outside the view: said")
    if lease.free() or lease.holder == o.identity:
        # Free, expired, or naming this identity without this process holding it (a restart
        # under the same name): take it with a new token, so older writes stay fenced.
        token = max(lease.token, status.fencing_token) + 1
        return p.Plan((p.AcquireLease(token=token),), 0, f"acquire Lease (token {token})")
    # Held by another process that is still renewing.
    wait = LEASE_EXPIRY_SLACK + lease.seconds_until_free()
    since = o.lock_wait_since or now
    waited = (now - since).total_seconds()
    budget = o.spec.budgets.lock_seconds
    actions: list[p.Action] = []
    if status.transition is None:
        # Nobody visibly works on this runtime, yet the Lease is held: that is a lock timeout.
        degraded = status.condition(st.ConditionType.DEGRADED)
        if waited >= budget and not (degraded and degraded.reason == st.Reason.LOCK_TIMEOUT.value):
            new = conditions.with_conditions(
                status,
                o,
                now,
                (st.ConditionType.DEGRADED, True, st.Reason.LOCK_TIMEOUT, f"lifecycle Lease held by {lease.holder} for more than lockSeconds={budget}; retrying"),
            )
            actions += [
                p.WriteStatus(new),
                p.Event("Warning", st.Reason.LOCK_TIMEOUT.value, f"waited {waited:.0f}s for the lifecycle Lease held by {lease.holder}"),
                p.Record(p.Metric.LOCK_TIMEOUTS),
            ]
        elif waited < budget:
            wait = min(wait, budget - waited + 0.05)
    return p.Plan(tuple(actions), wait, f"Lease held by {lease.holder}", lease_wait=True)


def create_may_be_in_flight(o: obs.Observed) -> bool:
    """Whether status is in Creating with a number whose create another holder may have sent
    (written under a token this process never held: another process, or this identity before a
    restart), and no pod of that number is in view: resuming must not send that number again.
    Under a token held here, this process's own memory says (`create_in_doubt`): a Lease
    released after a refused create or a name conflict and taken again keeps its number."""
    t = o.status.transition
    if t is None or t.step != st.Step.CREATING or t.to is None or o.status.fencing_token in o.tokens_here:
        return False
    return not any(pod.generation == t.to for pod in o.owned_pods())
