"""Which drain probe a pass needs, and what it answered, as the pass's Observed. Does I/O only
through the prober it is given (baton.drainprobe's HTTP GET).

Two probes: the retiring pod's while a transition is Draining, and the serving pod's when a
change waits for idle (handoff policy WhenIdle) and a check is due. Only the Lease holder
probes: other replicas never dial the pod.
"""

from __future__ import annotations

from typing import Any, Protocol

from baton import clock as clock_mod
from baton import drainprobe, lifecycle
from baton.cache import snapshot
from baton.model import observed as observed_mod
from baton.model import spec as spec_model
from baton.model import status as status_mod


class Prober(Protocol):
    async def probe(self, *, pod: dict[str, Any], probe: spec_model.DrainProbe) -> drainprobe.Result: ...


async def observe(snap: snapshot.Snapshot, *, prober: Prober, holds: bool, clock: clock_mod.Clock) -> observed_mod.Observed:
    """The snapshot's Observed with the probe this pass needs answered (the same one if none)."""
    o = snap.observed
    t = o.status.transition
    if (t is not None and t.step == status_mod.Step.DRAINING and o.spec.drain.probe is not None and t.from_uid
            and holds):
        retiring = next((pd for pd in snap.pods if pd["metadata"]["uid"] == t.from_uid), None)
        if retiring is not None:
            result = await prober.probe(pod=retiring, probe=o.spec.drain.probe)
            return o.model_copy(update={"drain_idle": result.idle, "drain_probe_error": result.error,
                                        "drain_probe_misconfigured": result.misconfigured})
    elif (t is not None and t.step == status_mod.Step.CONNECTING and o.spec.drain.probe is not None and t.to_uid
          and holds):
        # Checked once per generation, in the pass that makes it current (Ready and labelled
        # serving): a probe on a path the tool does not have is said now, not at the next drain.
        pod = o.pod_by_uid(t.to_uid)
        raw = next((pd for pd in snap.pods if pd["metadata"]["uid"] == t.to_uid), None)
        if pod is not None and pod.ready and pod.serving and raw is not None:
            result = await prober.probe(pod=raw, probe=o.spec.drain.probe)
            return o.model_copy(update={"drain_probe_misconfigured": result.misconfigured,
                                        "drain_probe_error": result.error})
    elif (t is None and o.status.pending is not None and o.spec.drain.probe is not None
          and o.status.current is not None and o.spec.handoff.policy == spec_model.HandoffPolicy.WHEN_IDLE
          and holds and lifecycle.idle_check_due(o, clock.wall())):
        # decide() takes the Lease only when a check is due, so this probe runs at most once per
        # check interval.
        serving = next((pd for pd in snap.pods if pd["metadata"]["uid"] == o.status.current.uid), None)
        idle: bool = False
        error: str | None = "the serving pod is not in view"
        if serving is not None:
            result = await prober.probe(pod=serving, probe=o.spec.drain.probe)
            idle, error = result.idle, result.error
        return o.model_copy(update={"drain_idle": idle, "drain_probe_error": error,
                                    "idle_checked_at": clock.wall()})
    return o
