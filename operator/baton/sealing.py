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
import logging
from typing import Protocol, Sequence

from baton import adminkey
from baton import clock as clock_mod
from baton.k8s import client
from baton.k8s import gateways as gw
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


class ApiGateways:
    """The gateway replicas registered in `namespace` (BATON_SYSTEM_NAMESPACE), by the API server.

    Liveness by this process's monotonic clock (gw.live_replicas): when each Lease was last seen
    to change, remembered here across passes. The admin key (BATON_GATEWAY_ADMIN_KEY_FILE) is
    read when first needed and again when the file changes; without one, the admin calls go
    without it and a gateway refuses them (401): the seal stays unconfirmed and says why."""

    def __init__(self, *, namespace: str, clock: clock_mod.Clock, admin_key_file: str = "") -> None:
        self.namespace = namespace
        self.clock = clock
        self.sightings = ranges.Sightings()
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


async def observe(o: observed_mod.Observed, *, gateways: Gateways | None, holds: bool) -> observed_mod.Observed:
    """`o` with the gateways' answers this pass needs (the same `o` if none)."""
    t = o.status.transition
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
