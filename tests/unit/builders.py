"""Builders of Observed snapshots for the pure lifecycle tests, plus a tiny fake executor.

Everything is relative to one frozen clock, ``NOW``. Defaults describe the runtime
``agents/search-mcp`` served by generation 7 (pod ``search-mcp``, uid ``uid-7``), fencing
token 5, identity ``baton-a``; every builder takes keyword overrides.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from baton.lifecycle import plan as p
from baton.model import names
from baton.model import observed as obs
from baton.model import spec as sp
from baton.model import status as st

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EARLIER = NOW - datetime.timedelta(hours=1)  # lastTransitionTime of conditions already set

NS = "agents"
RT = "search-mcp"
RT_UID = "rt-uid-1"
ME = "baton-a"
OTHER = "baton-b"
HASH = "hash-a"
HASH2 = "hash-b"
TOKEN = 5
META_GEN = 3

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "search"}, "annotations": {"team": "tools"}},
    "spec": {
        "containers": [
            {
                "name": "server",
                "image": "ghcr.io/example/search-mcp:1.4.2",
                "ports": [{"containerPort": 8080}],
            }
        ]
    },
}

SERVICE = sp.ServiceSpec(ports=(sp.ServicePort(port=80, target_port=8080),))
PROBE = sp.Drain(probe=sp.DrainProbe(http_get=sp.HttpGet(path="/idle", port=8080), period_seconds=1))

S = st.Step
K = st.TransitionKind
T = st.Trigger


def at(seconds: float) -> datetime.datetime:
    """NOW shifted by `seconds` (negative: in the past)."""
    return NOW + datetime.timedelta(seconds=seconds)


def name(gen: int) -> str:
    """Every generation's pod has the runtime's name (the generation is in its labels)."""
    return names.pod_name(RT)


def uid(gen: int) -> str:
    return f"uid-{gen}"


# --- spec ------------------------------------------------------------------------------------


def spec(
    *,
    service: bool = False,
    probe: bool = False,
    suspend: bool = False,
    force: bool = False,
    gateway: bool = False,
    **budgets: int,
) -> sp.ToolRuntimeSpec:
    return sp.ToolRuntimeSpec(
        template=TEMPLATE,
        service=SERVICE.model_copy(update={"gateway": True}) if gateway else SERVICE if service else None,
        budgets=sp.Budgets(**budgets),
        drain=PROBE if probe else sp.Drain(),
        recovery=sp.Recovery(on_cleanup_failure=sp.OnCleanupFailure.FORCE if force else sp.OnCleanupFailure.HOLD),
        suspend=suspend,
    )


# --- pods and Lease --------------------------------------------------------------------------


def pod(
    gen: int | None,
    *,
    uid_: str | None = None,
    pod_name: str | None = None,
    ready: bool = True,
    serving: bool = True,
    phase: str = "Running",
    deleting: bool = False,
    finalizers: tuple[str, ...] = (),
    template_hash: str | None = HASH,
) -> obs.PodInfo:
    if pod_name is None:
        assert gen is not None
        pod_name = name(gen)
    return obs.PodInfo(
        name=pod_name,
        uid=uid_ or (uid(gen) if gen is not None else f"uid-{pod_name}"),
        generation=gen,
        phase=phase,
        ready=ready,
        serving=serving,
        deleting=deleting,
        finalizers=finalizers,
        created_at=EARLIER,
        template_hash=template_hash,
    )


def pending(gen: int) -> obs.PodInfo:
    """Just created: not Ready, not serving."""
    return pod(gen, ready=False, serving=False, phase="Pending")


def lease_mine(token: int = TOKEN) -> obs.LeaseInfo:
    return obs.LeaseInfo(exists=True, holder=ME, renew_time=NOW, duration_seconds=15, token=token)


def lease_other(token: int = TOKEN, *, renewed: float = 0.0, duration: int = 15) -> obs.LeaseInfo:
    """Held by OTHER, seen unchanged by this process for -`renewed` seconds (renewed: <= 0)."""
    return obs.LeaseInfo(exists=True, holder=OTHER, renew_time=at(renewed), duration_seconds=duration, token=token,
                         unchanged_seconds=max(0.0, -renewed))


def lease_free(token: int = TOKEN) -> obs.LeaseInfo:
    """Exists, released (no holder)."""
    return obs.LeaseInfo(exists=True, holder=None, renew_time=None, token=token)


NO_LEASE = obs.LeaseInfo()


# --- status ----------------------------------------------------------------------------------


def cond(kind: st.ConditionType, true: bool, reason: str, message: str = "", since: datetime.datetime = EARLIER) -> st.Condition:
    return st.Condition(
        type=kind,
        status="True" if true else "False",
        reason=reason,
        message=message,
        observed_generation=META_GEN,
        last_transition_time=since,
    )


def steady_conditions(gen: int | None = 7, **override: st.Condition) -> tuple[st.Condition, ...]:
    """The conditions decide() leaves on an idle runtime serving `gen` (None: nothing serves)."""
    C = st.ConditionType
    base = {
        C.READY: (
            cond(C.READY, True, "GenerationReady", f"generation {gen} serves ({name(gen)})")
            if gen is not None
            else cond(C.READY, False, "NoGeneration", "no generation serves yet")
        ),
        C.PROGRESSING: cond(C.PROGRESSING, False, "Idle"),
        C.CLEANUP_FAILED: cond(C.CLEANUP_FAILED, False, "Clean"),
        C.DEGRADED: cond(C.DEGRADED, False, "Healthy"),
        C.SUSPENDED: cond(C.SUSPENDED, False, "Active"),
    }
    for key, value in override.items():
        base[C(key)] = value
    return tuple(base[c] for c in st.INITIAL_CONDITIONS)


def current(gen: int = 7, *, template_hash: str = HASH, uid_: str | None = None) -> st.Current:
    return st.Current(
        generation=gen, pod=name(gen), uid=uid_ or uid(gen), template_hash=template_hash,
        started_at=EARLIER, ready_since=EARLIER,
    )


def history(*gens: int, outcome: st.Outcome = st.Outcome.RETIRED) -> tuple[st.HistoryEntry, ...]:
    return tuple(
        st.HistoryEntry(generation=g, pod=name(g), uid=uid(g), started_at=EARLIER, retired_at=EARLIER, outcome=outcome)
        for g in gens
    )


def status(
    *,
    gen: int | None = 7,
    token: int = TOKEN,
    latest: int | None = None,
    transition: st.Transition | None = None,
    conditions: tuple[st.Condition, ...] | None = None,
    **extra: Any,
) -> st.ToolRuntimeStatus:
    """A persisted status. Without a transition it is the steady status decide() writes."""
    fields: dict[str, Any] = dict(
        observed_generation=META_GEN,
        fencing_token=token,
        latest_generation=latest if latest is not None else max(gen or 0, (transition.to or 0) if transition else 0),
        holder=ME,
        current=current(gen) if gen is not None else None,
        transition=transition,
        conditions=conditions if conditions is not None else steady_conditions(gen),
    )
    fields.update(extra)
    return st.ToolRuntimeStatus(**fields)


def transition(
    step: st.Step,
    *,
    kind: st.TransitionKind = K.HANDOFF,
    trigger: st.Trigger = T.TEMPLATE_CHANGED,
    from_: int | None = 7,
    to: int | None = 8,
    to_uid: str | None = None,
    deadline: float | None = 20.0,
    started: float = -30.0,
    step_started: float = -10.0,
    **extra: Any,
) -> st.Transition:
    """A persisted transition; times are seconds relative to NOW."""
    return st.Transition(
        kind=kind,
        trigger=trigger,
        from_=from_,
        from_pod=name(from_) if from_ else None,
        from_uid=extra.pop("from_uid", uid(from_) if from_ else None),
        from_started_at=EARLIER if from_ else None,
        to=to,
        to_uid=to_uid,
        template_hash=extra.pop("template_hash", None),
        step=step,
        started_at=at(started),
        step_started_at=at(step_started),
        deadline=at(deadline) if deadline is not None else None,
        **extra,
    )


def in_flight(t: st.Transition, *, gen: int | None = 7, token: int = TOKEN, **extra: Any) -> st.ToolRuntimeStatus:
    """A status with `t` in flight (current still `gen` during a retire unless given None)."""
    return status(gen=gen, token=token, transition=t, **extra)


# --- the snapshot ----------------------------------------------------------------------------


def observed(
    *,
    status_: st.ToolRuntimeStatus | None = None,
    pods: tuple[obs.PodInfo, ...] | None = None,
    lease: obs.LeaseInfo | None = None,
    spec_: sp.ToolRuntimeSpec | None = None,
    desired_hash: str = HASH,
    finalizers: tuple[str, ...] = (names.FINALIZER,),
    annotations: dict[str, str] | None = None,
    **extra: Any,
) -> obs.Observed:
    """Default: idle, serving g7 with a steady status, Lease held by this process (token 5)."""
    the_lease = lease if lease is not None else lease_mine()
    extra.setdefault("lease_held_here", the_lease.holder == ME)
    return obs.Observed(
        namespace=NS,
        name=RT,
        uid=RT_UID,
        meta_generation=extra.pop("meta_generation", META_GEN),
        finalizers=finalizers,
        annotations=annotations if annotations is not None else {},
        spec=spec_ if spec_ is not None else spec(),
        status=status_ if status_ is not None else status(),
        desired_hash=desired_hash,
        pods=pods if pods is not None else (pod(7),),
        lease=the_lease,
        identity=ME,
        **extra,
    )


def fresh() -> obs.Observed:
    """A just-applied ToolRuntime: empty status, no pods, no Lease yet (finalizer already added)."""
    return observed(status_=st.ToolRuntimeStatus(), pods=(), lease=NO_LEASE)


# --- a fake executor, for multi-pass scenarios -------------------------------------------------


@dataclasses.dataclass
class World:
    """What the executor would change in the cluster, reduced to the Observed snapshot."""

    o: obs.Observed
    uids: int = 100
    service_deleted: bool = False
    lease_deleted: bool = False

    def renew(self, now: datetime.datetime) -> None:
        """The executor renews a Lease it holds in the background."""
        if self.o.lease.holder == ME:
            self.o = self.o.model_copy(update={"lease": self.o.lease.model_copy(update={"renew_time": now})})

    def apply(self, plan: p.Plan, now: datetime.datetime) -> None:
        o = self.o
        for a in plan.actions:
            if isinstance(a, p.FENCED):
                assert o.lease.holder == ME and o.lease_held_here, f"{a} without the Lease"
            if isinstance(a, p.AddFinalizer):
                o = o.model_copy(update={"finalizers": (*o.finalizers, names.FINALIZER)})
            elif isinstance(a, p.ConfirmNoPod):
                assert not [pd for pd in o.pods if pd.name == a.pod and pd.owned], f"{a}: the pod still stands"
            elif isinstance(a, p.RemoveFinalizer):
                o = o.model_copy(update={"finalizers": tuple(f for f in o.finalizers if f != names.FINALIZER)})
            elif isinstance(a, p.RemoveAnnotation):
                o = o.model_copy(update={"annotations": {k: v for k, v in o.annotations.items() if k != a.key}})
            elif isinstance(a, p.AcquireLease):
                assert o.lease.free() or o.lease.holder == ME
                o = o.model_copy(update={"lease": obs.LeaseInfo(exists=True, holder=ME, renew_time=now, token=a.token),
                                         "lease_held_here": True})
            elif isinstance(a, p.ReleaseLease):
                o = o.model_copy(update={"lease": o.lease.model_copy(update={"holder": None, "renew_time": None}),
                                         "lease_held_here": False})
            elif isinstance(a, p.DeleteLease):
                self.lease_deleted = True
                o = o.model_copy(update={"lease": obs.LeaseInfo(), "lease_held_here": False})
            elif isinstance(a, p.WriteStatus):
                # The CRD's CEL rule: a status write never lowers the fencing token.
                assert a.status.fencing_token >= o.status.fencing_token
                o = o.model_copy(update={"status": a.status})
            elif isinstance(a, p.CreatePod):
                meta = a.manifest["metadata"]
                assert o.pod_by_name(meta["name"]) is None
                live = [q for q in o.pods if q.phase not in ("Failed", "Succeeded")]
                assert not live, f"Invariant 1: creating {meta['name']} while {live} stand"
                self.uids += 1
                new = obs.PodInfo(
                    name=meta["name"], uid=f"uid-{self.uids}", generation=int(meta["labels"][names.LABEL_GENERATION]),
                    serving=meta["labels"][names.LABEL_SERVING] == "true", created_at=now,
                    template_hash=meta["annotations"][names.ANN_TEMPLATE_HASH],
                )
                o = o.model_copy(update={"pods": (*o.pods, new)})
            elif isinstance(a, p.SetServing):
                o = self._pods(o, a.uid, serving=a.serving)
            elif isinstance(a, p.DeletePod):
                o = self._pods(o, a.uid, deleting=True)
            elif isinstance(a, p.ForceDeletePod):
                o = o.model_copy(update={"pods": tuple(q for q in o.pods if q.uid != a.uid)})
            elif isinstance(a, p.DeleteService):
                self.service_deleted = True
                o = o.model_copy(update={"service": obs.ServiceInfo()})
            elif isinstance(a, p.EnsureService):
                o = o.model_copy(update={"service": obs.ServiceInfo(
                    exists=True,
                    selector=a.manifest["spec"]["selector"],
                    ports=tuple(sp.ServicePort.model_validate(x) for x in a.manifest["spec"]["ports"]),
                    session_affinity=a.manifest["spec"]["sessionAffinity"],
                )})
        self.o = o

    @staticmethod
    def _pods(o: obs.Observed, uid_: str, **changes: Any) -> obs.Observed:
        return o.model_copy(update={"pods": tuple(q.model_copy(update=changes) if q.uid == uid_ else q for q in o.pods)})

    def pod_event(self, uid_: str | None = None, *, gone: bool = False, **changes: Any) -> None:
        """The cluster moves on its own: a pod becomes Ready, finishes terminating, ..."""
        o = self.o
        if gone:
            o = o.model_copy(update={"pods": tuple(q for q in o.pods if q.uid != uid_)})
        else:
            target = uid_ or o.pods[-1].uid
            o = self._pods(o, target, **changes)
        self.o = o
