"""What the gateway replicas say about a retiring pod, as the pass's Observed (spec.service.gateway
only). Does I/O only through the Gateways it is given (baton.k8s.gateways: a LIST of the gateway
Leases, then the admin calls of each live replica, side by side, each bounded).

Two questions, each asked only by the runtime's Lease holder (other replicas never call the
gateways), and only at its step:
- StoppingAdmission, once the pod is labelled serving=false: seal it on every live replica
  (POST /v1/seal); sealed when every one confirmed (none live: sealed, nobody can forward).
- Draining: the calls still in flight on it, summed over the live replicas (GET /v1/inflight);
  a replica that cannot be read makes the count unknown (counted busy by decide()).
Both answers also carry the calls each replica holds for the runtime: with the in-flight sums
they reach Observed.gateway_calls, which decide() only records in status for people to read; so
do the MCP sessions the in-flight answers list, counted once each over the replicas (a session's
calls may go through several), for the generation's history entry.
decide() (baton.lifecycle.retire) judges the answers; nothing here decides.

spec.idle adds two questions, asked of a runtime at rest (no transition), by any replica that
runs its pass (no Lease needed: only read):
- serving (a current pod, not idle yet): its activity, GET /v1/activity of every live replica,
  combined into Observed.activity (the least idleSeconds, the summed in-flight and held calls);
  unknown (None) when a replica could not be read or none is live: never idled on a guess.
- idle (status.idle.since set): who demands a wake, into Observed.wake_demand: the live replicas
  whose registration Lease lists the runtime in ANN_WAKE_DEMAND (read from the operator's watch
  of those Leases, judged live as for a seal; only with spec.idle.wakeOnRequest), and a person's
  ANN_WAKE (`kubectl baton wake`) newer than status.idle.since.

A lapsed replica (its Lease stopped changing, its static window not over: it may still forward
to runtimes in steady state; docs/gateway.md, "When the API server is away") is asked like a
live one. What it answers is read as: a confirmed seal or a count, as from a live one; refused
(nothing listens: its process is dead) or misaddressed (409: another process under another
Lease listens there), gone: it forwards nothing, so it neither holds the seal nor counts; a
timeout or any other failure, unconfirmed (the seal waits, the count is unknown: busy until the
drain budget ends, as for a live replica that cannot be reached).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any, Callable, Protocol, Sequence

from baton import adminkey
from baton import clock as clock_mod
from baton.k8s import client
from baton.k8s import gateways as gw
from baton.model import meta, names
from baton.model import observed as observed_mod
from baton.model import status as status_mod
from baton.sharding import ranges

log = logging.getLogger("baton.sealing")

# The LIST of gateway Leases: bounded apart from the API client's own timeouts, so that a pass is
# never held long (the admin calls carry their own, gw.ADMIN_TIMEOUT_SECONDS, side by side).
LIST_TIMEOUT_SECONDS = 3.0


class Gateways(Protocol):
    async def live(self) -> Sequence[gw.Replica]: ...

    async def seal(self, replica: gw.Replica, *, namespace: str, runtime: str, uid: str) -> gw.Counts: ...

    async def inflight(self, replica: gw.Replica, *, uid: str, namespace: str, runtime: str) -> gw.Counts: ...

    async def activity(self, replica: gw.Replica, *, namespace: str, runtime: str) -> gw.Activity: ...

    async def wake_demand(self, *, namespace: str, runtime: str) -> tuple[str, ...]:
        """The live replicas whose Lease lists the runtime in ANN_WAKE_DEMAND (their names)."""
        ...


class ApiGateways:
    """The gateway replicas registered in `namespace` (BATON_SYSTEM_NAMESPACE), by the API server.

    Liveness by this process's monotonic clock (gw.live_replicas): when each Lease was last seen
    to change, remembered here across passes. The admin key (BATON_GATEWAY_ADMIN_KEY_FILE) is
    read when first needed and again when the file changes; without one, the admin calls go
    without it and a gateway refuses them (401): the seal stays unconfirmed and says why."""

    def __init__(self, *, namespace: str, clock: clock_mod.Clock, admin_key_file: str = "",
                 leases: Callable[[], Sequence[dict[str, Any]] | None] | None = None) -> None:
        self.namespace = namespace
        self.clock = clock
        self.sightings = ranges.Sightings()
        # The watch-fed view of the gateway Leases (the controller's; None until it is listed):
        # a wake's demand is read there, not by a LIST per pass of each idle runtime. Its own
        # sightings: the view may lag a fresh LIST, and an older version is no renewal.
        self.leases = leases
        self.demand_sightings = ranges.Sightings()
        self.admin_key_file = admin_key_file
        self._key: adminkey.KeyFile | None = None
        self._warned = False

    def _admin_key(self) -> bytes | None:
        if not self.admin_key_file:
            if not self._warned:  # said once, when a gateway is first called: most runtimes never need it
                self._warned = True
                log.warning("%s is not set: gateway replicas will refuse this operator's seals (401)", adminkey.VARIABLE)
            return None
        if self._key is None:
            try:
                self._key = adminkey.KeyFile(self.admin_key_file)
            except adminkey.AdminKeyError as exc:
                raise gw.AdminError(str(exc)) from None
        return self._key.key()

    async def live(self) -> Sequence[gw.Replica]:
        return await asyncio.wait_for(gw.list_live(self.namespace, sightings=self.sightings, now=self.clock.monotonic()),
                                      LIST_TIMEOUT_SECONDS)

    async def seal(self, replica: gw.Replica, *, namespace: str, runtime: str, uid: str) -> gw.Counts:
        return await gw.seal(replica, namespace=namespace, runtime=runtime, uid=uid, key=self._admin_key())

    async def inflight(self, replica: gw.Replica, *, uid: str, namespace: str, runtime: str) -> gw.Counts:
        return await gw.inflight(replica, uid=uid, namespace=namespace, runtime=runtime, key=self._admin_key())

    async def activity(self, replica: gw.Replica, *, namespace: str, runtime: str) -> gw.Activity:
        return await gw.activity(replica, namespace=namespace, runtime=runtime, key=self._admin_key())

    async def wake_demand(self, *, namespace: str, runtime: str) -> tuple[str, ...]:
        listed = self.leases() if self.leases is not None else None
        if listed is None:
            replicas = await self.live()  # the view is not listed (yet): a fresh LIST
        else:
            replicas = gw.live_replicas(list(listed), sightings=self.demand_sightings, now=self.clock.monotonic())
        return demanding(replicas, namespace=namespace, runtime=runtime)

    async def close(self) -> None:
        await gw.close()


def gone(replica: gw.Replica, answer: object) -> bool:
    """A lapsed replica whose answer says it is not there (gw.AdminGone: connection refused, or
    409 misaddressed). A live replica's such answer is a failure like any other: its Lease is
    being renewed, so something there is forwarding."""
    return replica.lapsed and isinstance(answer, gw.AdminGone)


def applies(o: observed_mod.Observed) -> bool:
    """The runtime is routed through the gateway."""
    return o.spec.service is not None and o.spec.service.gateway


def sessions_counted(counts: Sequence[gw.Counts]) -> int | None:
    """The distinct sessions the answering replicas last forwarded to the pod (one client's calls
    may go through several: counted once); None when none answered, or one answered without the
    list (a gateway before it: unknown). A replica that listed only its bound makes it a floor."""
    if not counts or any(c.sessions is None for c in counts):
        return None
    return len(frozenset().union(*(c.sessions for c in counts if c.sessions is not None)))


def demanding(replicas: Sequence[gw.Replica], *, namespace: str, runtime: str) -> tuple[str, ...]:
    """The replicas (names, sorted) whose Lease lists the runtime as demanded. A lapsed one is
    left out: its Lease stopped changing, so what it lists is not known to be true now; so is one
    this process never saw write (after this process started, a killed replica's Lease is still
    listed, live by first sight, with the demand it had: a live replica renews within a third of
    its duration, and that write is seen)."""
    key = f"{namespace}/{runtime}"
    return tuple(sorted(r.name for r in replicas
                        if not r.lapsed and r.written_since_seen and key in r.wake_demand))


def combined_activity(answers: Sequence[gw.Activity]) -> observed_mod.Activity | None:
    """The replicas' answers as one: the least idleSeconds (the latest call that counts, on any
    replica), in-flight and held calls summed. None without an answer (no live replica: nothing
    counted the calls, so how long the runtime has been idle is unknown)."""
    if not answers:
        return None
    return observed_mod.Activity(idle_seconds=min(a.idle_seconds for a in answers),
                                 inflight=sum(a.inflight for a in answers), held=sum(a.held for a in answers))


def person_wake(annotations: dict[str, str], *, idle_since: datetime.datetime) -> datetime.datetime | None:
    """The time of a `kubectl baton wake` (ANN_WAKE, RFC 3339) when it is newer than
    status.idle.since (an older one was answered by an earlier wake, or asked before the idle);
    None otherwise, or when it is not a time."""
    asked = meta.parse_time(annotations.get(names.ANN_WAKE))
    if asked is None or asked.tzinfo is None or asked <= idle_since:
        return None
    return asked


def wake_demand_text(*, replicas: Sequence[str], asked_at: datetime.datetime | None) -> str | None:
    """Who demands a wake, for the Waking condition's message and the event; None: nobody."""
    parts = []
    if replicas:
        parts.append(f"calls held at gateway replica{'' if len(replicas) == 1 else 's'} {', '.join(replicas)}")
    if asked_at is not None:
        parts.append(f"kubectl baton wake at {asked_at.isoformat().replace('+00:00', 'Z')}")
    return "; ".join(parts) or None


async def observe_idle(o: observed_mod.Observed, *, gateways: Gateways) -> observed_mod.Observed:
    """spec.idle at rest: the activity of a serving runtime, or who demands the wake of an idle one
    (the same `o` when neither is asked). Needs no Lease: it only reads."""
    idle = o.spec.idle
    if idle is None or o.status.transition is not None or o.spec.suspend or o.deleting:
        return o
    since = o.status.idle.since if o.status.idle is not None else None
    where = {"runtime": f"{o.namespace}/{o.name}"}
    if since is not None:
        held_at: tuple[str, ...] = ()
        if idle.wake_on_request:
            try:
                held_at = await asyncio.wait_for(gateways.wake_demand(namespace=o.namespace, runtime=o.name),
                                                 LIST_TIMEOUT_SECONDS)
            except Exception as exc:  # a person's wake still counts; the next pass asks again
                log.warning("the gateway Leases could not be read for wake demand: %s",
                            client.short(exc) or type(exc).__name__, extra=where)
        text = wake_demand_text(replicas=held_at, asked_at=person_wake(o.annotations, idle_since=since))
        return o if text is None else o.model_copy(update={"wake_demand": text})
    cur = o.status.current
    if cur is None or o.pod_by_uid(cur.uid) is None or o.annotations.get(names.ANN_KEEP_AWAKE) == "true":
        return o
    try:
        replicas = list(await gateways.live())
    except Exception as exc:  # unknown: never idled on it
        log.warning("the gateway Leases could not be listed for activity: %s",
                    client.short(exc) or type(exc).__name__, extra=where)
        return o
    answers = await asyncio.gather(*(gateways.activity(r, namespace=o.namespace, runtime=o.name) for r in replicas),
                                   return_exceptions=True)
    counted: list[gw.Activity] = []
    for r, a in zip(replicas, answers):
        if isinstance(a, gw.Activity):
            counted.append(a)
        elif gone(r, a):
            log.info("gateway %s (lapsed): %s; counted gone", r.name, a, extra=where)
        else:  # one replica unread (an older gateway's 404 included): the activity is unknown
            log.info("gateway %s%s: activity unknown: %s", r.name, " (lapsed)" if r.lapsed else "", a, extra=where)
            return o
    activity = combined_activity(counted)
    return o if activity is None else o.model_copy(update={"activity": activity})


async def observe(o: observed_mod.Observed, *, gateways: Gateways | None, holds: bool) -> observed_mod.Observed:
    """`o` with the gateways' answers this pass needs (the same `o` if none)."""
    t = o.status.transition
    if gateways is not None and t is None and o.spec.idle is not None and applies(o):
        return await observe_idle(o, gateways=gateways)
    if gateways is None or not holds or t is None or not t.from_uid or not applies(o):
        return o
    pod = o.pod_by_uid(t.from_uid)
    if pod is None:
        return o
    sealing = t.step == status_mod.Step.STOPPING_ADMISSION and not pod.serving
    if not sealing and t.step != status_mod.Step.DRAINING:
        return o
    try:
        replicas = list(await gateways.live())
    except Exception as exc:  # the API server unreachable, slow, or refusing: not sealed, not counted
        why = f"the gateway Leases could not be listed: {client.short(exc) or type(exc).__name__}"
        log.warning(why, extra={"runtime": f"{o.namespace}/{o.name}"})
        return o.model_copy(update={"gateway_sealed": False if sealing else None, "gateway_inflight": None,
                                    "gateway_error": why})
    uid = t.from_uid
    if sealing:
        asked = [gateways.seal(r, namespace=o.namespace, runtime=o.name, uid=uid) for r in replicas]
    else:
        asked = [gateways.inflight(r, uid=uid, namespace=o.namespace, runtime=o.name) for r in replicas]
    answers = await asyncio.gather(*asked, return_exceptions=True)
    for r, a in zip(replicas, answers):
        if isinstance(a, BaseException):
            log.info("gateway %s%s: %s%s", r.name, " (lapsed)" if r.lapsed else "", a,
                     "; counted gone" if gone(r, a) else "", extra={"runtime": f"{o.namespace}/{o.name}"})
    # A lapsed replica shown gone by its answer is no longer one of the replicas.
    kept = [(r, a) for r, a in zip(replicas, answers) if not gone(r, a)]
    replicas = [r for r, _ in kept]
    counts = [a for _, a in kept if isinstance(a, gw.Counts)]
    failed = tuple(r.name for r, a in kept if not isinstance(a, gw.Counts))
    inflight = None if failed else sum(c.inflight for c in counts)
    helds = [c.held for c in counts if c.held is not None]
    # For status only (a person's view): what the replicas that answered said, and who did not.
    shown = status_mod.GatewayCalls(inflight=sum(c.inflight for c in counts) if counts or not replicas else None,
                                    held=sum(helds) if helds or not replicas else None,
                                    replicas=len(replicas), unconfirmed=len(failed),
                                    sessions=None if sealing else sessions_counted(counts))
    update: dict[str, object] = {"gateway_inflight": inflight, "gateway_unconfirmed": failed, "gateway_calls": shown}
    if sealing:
        update["gateway_sealed"] = not failed
    return o.model_copy(update=update)
