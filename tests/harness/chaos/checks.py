"""The invariants of an ordering, checked on what the API server recorded: the watch logs (pure
functions of the logs: tests/unit/harness/test_chaos_checks.py) and the final objects."""
from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from kubernetes import client

from dev.wait import WaitTimeout, wait_for
from harness import scenarios
from harness.chaos.actions import GC_SECONDS, RUNTIMES, Verb
from harness.runtimes import Runtimes
from harness.watchlog import PodWatch

if TYPE_CHECKING:  # an Ordering runs check(); check only reads it
    from harness.chaos.ordering import Ordering


# -- the invariants, on the recorded logs (each returns violations, never raises)

def _cond(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def check(o: Ordering) -> list[str]:
    out: list[str] = []
    out += check_pods(o.pods)
    out += check_runtime_log(o.runtimes_log.snapshot(), o.pods, o.verbs)
    out += check_lease_log(o.leases_log.snapshot())
    out += check_stale_refused(o.rts, o.verbs, o.deleted)
    out += check_deleted_leave_nothing(o.rts, o.coord, o.deleted, o.result.notes)
    return out


def check_pods(pods: PodWatch) -> list[str]:
    """At most one pod per runtime at any point of the watch log; N+1 ADDED after N's DELETED;
    generation labels never reused; the fencing token on each new pod never lower. A late stray
    (a fenced-out holder's create of a number given up, landing later, never serving) is exempt
    from the order of numbers and tokens, not from one pod at a time or one pod per number."""
    out = []
    for name in RUNTIMES:
        try:
            pods.assert_one_pod_per_generation(name)
        except AssertionError as e:
            out.append(f"pods of {name}: {e}")
        strays = pods.late_strays(name)
        tokens = [(e.generation, int(e.annotations.get("baton.dev/fencing-token", "0")))
                  for e in pods.added() if e.of(name) and e.uid not in strays]
        if any(b[1] < a[1] for a, b in zip(tokens, tokens[1:])):
            out.append(f"pods of {name}: a pod was created with a lower fencing token than its predecessor's "
                       f"(generation, token): {tokens}")
    return out


def check_runtime_log(events: list[tuple[str, int, dict[str, Any]]], pods: PodWatch,
                      verbs: list[Verb]) -> list[str]:
    """On the ToolRuntime watch log: token and generation counters never decrease; a history
    entry, once written, never changes (a generation number names one pod); a Reset or
    ForceRecovered outcome only for a generation a current verb named; CleanupFailed cleared
    only after that pod's DELETED in the pod watch log (PodGone) or by a force recovery this run
    asked for (ForceRecovered)."""
    out: list[str] = []
    deleted_rv = {e.uid: e.resource_version for e in pods.deleted()}
    named = {(v.runtime, v.key, v.value) for v in verbs if v.intent == "current"}
    prev: dict[str, dict[str, Any]] = {}
    history: dict[tuple[str, int], tuple[Any, Any]] = {}
    for typ, rv, obj in events:
        name = obj["metadata"]["name"]
        st = obj.get("status") or {}
        before = prev.get(name, {})
        for key in ("fencingToken", "latestGeneration"):
            if key in before and int(st.get(key) or 0) < int(before[key] or 0):
                out.append(f"{name} rv {rv}: status.{key} decreased {before[key]} -> {st.get(key)}")
        g_then, g_now = (before.get("current") or {}).get("generation"), (st.get("current") or {}).get("generation")
        if g_then is not None and g_now is not None and g_now < g_then:
            out.append(f"{name} rv {rv}: current.generation decreased {g_then} -> {g_now}")
        for h in st.get("history") or []:
            key2 = (name, int(h["generation"]))
            seen = history.setdefault(key2, (h.get("uid"), h.get("outcome")))
            if seen != (h.get("uid"), h.get("outcome")):
                out.append(f"{name} rv {rv}: history of generation {h['generation']} changed {seen} -> "
                           f"{(h.get('uid'), h.get('outcome'))}")
            if h.get("outcome") == "Reset" and (name, "baton.dev/reset", int(h["generation"])) not in named:
                out.append(f"{name} rv {rv}: generation {h['generation']} retired as Reset, no reset named it")
            if h.get("outcome") == "ForceRecovered" and (
                    name, "baton.dev/force-recovery", int(h["generation"])) not in named:
                out.append(f"{name} rv {rv}: generation {h['generation']} ForceRecovered, no force-recovery named it")
        was, now = _cond(before, "CleanupFailed"), _cond(st, "CleanupFailed")
        if was.get("status") == "True" and now.get("status") != "True":
            failure = before.get("lastCleanupFailure") or {}
            uid, gen = failure.get("uid"), failure.get("generation")
            reason = now.get("reason")
            if reason == "PodGone":
                if uid not in deleted_rv or deleted_rv[uid] > rv:
                    out.append(f"{name} rv {rv}: CleanupFailed cleared (PodGone) but pod {uid} of generation "
                               f"{gen} has no DELETED before it in the pod watch log")
            elif reason == "ForceRecovered":
                if (name, "baton.dev/force-recovery", int(gen or -1)) not in named:
                    out.append(f"{name} rv {rv}: CleanupFailed cleared by a force recovery of generation {gen} "
                               "that no force-recovery annotation named")
            elif typ != "DELETED":
                out.append(f"{name} rv {rv}: CleanupFailed of generation {gen} cleared with reason {reason!r}")
        prev[name] = st
    return out


def check_lease_log(events: list[tuple[str, int, dict[str, Any]]]) -> list[str]:
    """The fencing token (spec.leaseTransitions) of each runtime's Lease never decreases (the
    operator's other Leases in the namespace, sharding's and the metrics reporter's, carry none)."""
    out, last = [], {}
    for _, rv, obj in events:
        if "baton.dev/runtime" not in ((obj.get("metadata") or {}).get("labels") or {}):
            continue
        name = obj["metadata"]["name"]
        token = int((obj.get("spec") or {}).get("leaseTransitions") or 0)
        if name in last and token < last[name]:
            out.append(f"Lease {name} rv {rv}: fencing token decreased {last[name]} -> {token}")
        last[name] = max(token, last.get(name, 0))
    return out


def check_stale_refused(rts: Runtimes, verbs: list[Verb], deleted: set[str]) -> list[str]:
    """Each stale reset and force-recovery was refused: its Warning event, naming the value."""
    out = []
    reasons = {"baton.dev/reset": "StaleReset", "baton.dev/force-recovery": "StaleForceRecovery"}
    for v in verbs:
        if v.intent != "stale" or v.runtime in deleted:
            continue
        def named(evs: list[Any]) -> bool:
            return any(f"names generation {v.value}" in (e.message or "") and e.type == "Warning" for e in evs)

        # Events are posted apart from the plan that consumed the annotation: a moment later.
        deadline = time.monotonic() + 10
        evs = rts.events(v.runtime, reasons[v.key])
        while not named(evs) and time.monotonic() < deadline:
            time.sleep(0.5)
            evs = rts.events(v.runtime, reasons[v.key])
        if not named(evs):
            out.append(f"{v.runtime}: stale {v.key}={v.value} has no Warning {reasons[v.key]} event naming it "
                       f"({[e.message for e in evs]})")
    return out


def check_deleted_leave_nothing(rts: Runtimes, coord: client.CoordinationV1Api, deleted: set[str],
                                notes: list[str]) -> list[str]:
    """A deleted runtime leaves no runtime, pod, Service or Lease. Something left at first look
    gets a bounded wait: a replica whose view still had the runtime can create its Lease again
    just after the deletion finished, and a pod create held in the network can land after it
    (seed 6012); both carry an ownerReference to the deleted runtime, so the garbage collector
    deletes them within GC_SECONDS. A pod then goes as a kubelet lets it go: at the end of its
    own grace period (the template's, 30 s by default; kwok removes it at deletionTimestamp), so
    the wait for a pod the collector is deleting runs to its deletionTimestamp plus GC_SECONDS.
    That is noted, not a violation; anything left past those bounds is."""
    def read_pod(name: str) -> Any:
        return scenarios.read_or_none(lambda: rts.core.read_namespaced_pod(name, rts.ns))

    def left(name: str) -> list[str]:
        return [what for what, read in (
            ("runtime", lambda: rts.get(name)),
            ("pod", lambda: read_pod(name)),
            ("Service", lambda: rts.core.read_namespaced_service(name, rts.ns)),
            ("Lease", lambda: coord.read_namespaced_lease(f"baton-{name}", rts.ns)),
        ) if scenarios.read_or_none(read) is not None]

    out = []
    for name in sorted(deleted):
        first = left(name)
        if not first:
            continue
        t = time.monotonic()
        try:
            wait_for(lambda: not left(name), timeout=GC_SECONDS, what=f"what {name} left to go", interval=0.5)
        except WaitTimeout:
            pod = read_pod(name)
            if left(name) == ["pod"] and pod is not None and pod.metadata.deletion_timestamp is not None:
                # The collector is deleting it: give it its grace period, to deletionTimestamp + GC_SECONDS.
                grace = (pod.metadata.deletion_timestamp - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
                try:
                    wait_for(lambda: not left(name), timeout=max(0.5, max(0.0, grace) + GC_SECONDS),
                             what=f"{name}'s terminating pod to go", interval=0.5)
                except WaitTimeout:
                    pass
            still = left(name)
            if still:
                pod = read_pod(name)
                about = (f"; pod uid {pod.metadata.uid} deletionTimestamp {pod.metadata.deletion_timestamp} "
                         f"finalizers {pod.metadata.finalizers} owners "
                         f"{[(r.kind, r.uid) for r in pod.metadata.owner_references or []]}") if pod is not None else ""
                out.append(f"deleted runtime {name} left {still} ({time.monotonic() - t:.0f}s after convergence{about})")
                continue
        notes.append(f"deleted runtime {name}: {first} still there at convergence, gone "
                     f"{time.monotonic() - t:.1f}s later (garbage collector: ownerReference to the deleted runtime)")
    return out
