"""A deleted runtime: retire what stands, then remove the Service, the Lease and the finalizer."""

from __future__ import annotations

import datetime

from baton.lifecycle import conditions
from baton.lifecycle import plan as p
from baton.lifecycle import transitions
from baton.model import names
from baton.model import observed as obs
from baton.model import status as st


def convert_to_delete(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """A delete arrived mid-transition: finish retiring what stands, start nothing new."""
    kinds = st.TransitionKind
    if t.retiring:
        new_t = t.model_copy(update={"kind": kinds.DELETE})
    else:
        fresh = o.pod_by_uid(t.to_uid) or (o.pod_by_name(names.pod_name(o.name)) if t.to else None)
        if fresh is not None and fresh.owned:
            new_t = transitions.retiring(o, now, kind=kinds.DELETE, trigger=st.Trigger.DELETED, pod=fresh,
                              generation=fresh.generation, uid=fresh.uid)
        else:
            new_t = st.Transition(kind=kinds.DELETE, trigger=st.Trigger.DELETED, step=st.Step.FINALIZING,
                                  started_at=now, step_started_at=now)
    status = conditions.step_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
    return p.Plan((p.WriteStatus(status),), 0, "runtime deleted mid-transition")


def finalizing(o: obs.Observed, t: st.Transition, now: datetime.datetime) -> p.Plan:
    """Finalizing: retire any pod still owned, then remove the Service, the Lease and the finalizer."""
    if o.owned_pods():
        stray = o.owned_pods()[0]
        new_t = transitions.retiring(o, now, kind=st.TransitionKind.DELETE, trigger=st.Trigger.DELETED, pod=stray,
                          generation=stray.generation, uid=stray.uid)
        status = conditions.step_conditions(transitions.stamped(o, now).model_copy(update={"transition": new_t}), o, now, new_t)
        return p.Plan((p.WriteStatus(status),), 0, f"{stray.name} still stands: retire it first")
    # Nothing owned in view; the one pod name is read fresh first (ConfirmNoPod), so nothing the
    # views cannot see is left behind.
    actions: list[p.Action] = [p.ConfirmNoPod(names.pod_name(o.name))]
    if o.service.exists and o.service.owned:
        actions.append(p.DeleteService())
    # Its EndpointSlice (gateway routing): the garbage collector would remove it with the
    # runtime, but not before the finalizer goes, and not at all where none runs.
    actions += [p.DeleteEndpointSlice(s.name, s.uid) for s in o.slices
                if s.owned and s.manager == names.SLICE_MANAGER]
    actions += [p.DeleteLease(), p.RemoveFinalizer()]
    return p.Plan(tuple(actions), None, "nothing left: remove Service, Lease, finalizer")
