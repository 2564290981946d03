"""One seeded ordering (`Ordering`) and what it found (`Result`; RESULTS: every ordering of the
session, summed up by tests/chaos/conftest.py)."""
from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.wait import WaitTimeout, wait_for
from harness import apiproxy
from harness.chaos.actions import (
    BUDGETS, CONVERGE_SECONDS, HOLD, KINDS, LEASE_SECONDS, PROXIED, REPLICAS, RUNTIMES, SHARD_RANGES, Action, Verb,
    actions, replay_hint, sharded,
)
from harness.chaos.checks import check
from harness.operator import OperatorProcess
from harness.runtimes import GROUP, PLURAL, VERSION, Runtimes, runtime_manifest
from harness.watchlog import PodWatch, WatchLog

RESULTS: list["Result"] = []  # every ordering run in this session (tests/chaos/conftest.py sums them up)


@dataclass
class Result:
    seed: int
    actions: list[Action]
    done: list[str] = field(default_factory=list)   # what each action found and did
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # seen, allowed, worth knowing
    wall: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds: setup, actions, converge, check

    def report(self) -> str:
        took = ", ".join(f"{k} {v:.1f}s" for k, v in self.phases.items())
        mode = f"sharded, {SHARD_RANGES} ranges" if sharded(self.seed) else "unsharded"
        lines = [f"seed {self.seed} ({mode}): {len(self.violations)} violation(s) in {self.wall:.1f}s ({took}); "
                 f"replay: {replay_hint(self.seed)}"]
        lines += [f"  VIOLATION {v}" for v in self.violations]
        lines += [f"  note: {n}" for n in self.notes]
        lines.append("actions:")
        lines += [f"  {i:2d}. {a}" for i, a in enumerate(self.actions, 1)]
        lines.append("what they did:")
        lines += [f"  {d}" for d in self.done]
        return "\n".join(lines)


Start = Callable[..., OperatorProcess]


class Ordering:
    """Runs one ordering in `namespace` with the fixtures' `operators` factory and `rts`."""

    def __init__(self, seed: int, *, cluster: Any, namespace: str, workdir: Path, operators: Start,
                 rts: Runtimes, pod_watch: PodWatch) -> None:
        self.seed, self.ns, self.cluster = seed, namespace, cluster
        self.rng = random.Random(f"exec-{seed}")  # choices made while running (stale values)
        self.result = Result(seed, actions(seed))
        self.workdir, self.start_op, self.rts, self.pods = workdir, operators, rts, pod_watch
        self.core = rts.core
        self.coord = client.CoordinationV1Api(cluster.api_client)
        self.verbs: list[Verb] = []
        self.deleted: set[str] = set()
        self.ops: dict[str, OperatorProcess] = {}
        self.incarnation: dict[str, int] = {r: 0 for r in REPLICAS}
        self.stopped: dict[str, float] = {}
        self.holding = False
        self.images = 1
        self.t0 = time.monotonic()

    def log(self, text: str) -> None:
        self.result.done.append(f"{time.monotonic() - self.t0:6.2f}s {text}")

    # -- running

    def run(self) -> Result:
        t0 = time.monotonic()
        proxy_dir = self.workdir / "proxy"
        proxy_dir.mkdir(exist_ok=True)
        self.proxy = apiproxy.ApiProxy(self.cluster.kubeconfig, proxy_dir).start()
        self.runtimes_log = WatchLog(self.cluster.api_client, self.ns, "toolruntimes")
        self.leases_log = WatchLog(self.cluster.api_client, self.ns, "leases")
        try:
            for r in REPLICAS:  # side by side: each takes seconds to import and list
                self._launch(r)
            for name in RUNTIMES:
                self.rts.create(runtime_manifest(name, service=True, budgets=BUDGETS))
            for op in self.ops.values():
                op.wait_healthy()
            # Generation 1 as a rule; sharded, a range that moves while a runtime's first create
            # is under way gives that number up (lifecycle.lease.create_may_be_in_flight): 2.
            serving = [int(self.rts.wait_serving(name, timeout=30)["current"]["generation"]) for name in RUNTIMES]
            self.log("3 runtimes at generation 1" if serving == [1, 1, 1] else f"3 runtimes serving, generations {serving}")
            self._phase("setup", t0)
            for i, a in enumerate(self.result.actions, 1):
                time.sleep(a.gap)
                self.log(f"{i:2d}. {a.kind} {a.target}: {self._act(a)}")
            self._phase("actions", t0)
            self._release_all()
            self._converge()
            self._catch_up()
            self._phase("converge", t0)
            self.result.violations += check(self)
            self._phase("check", t0)
        finally:
            self.result.wall = time.monotonic() - t0
            for r, stopped_at in list(self.stopped.items()):
                self.ops[r].signal(signal.SIGCONT)
                del self.stopped[r]
            self.proxy.stop()
            self.runtimes_log.halt()
            self.leases_log.halt()
            self.pods.halt()  # the fixture's stop() then waits for it
            self.runtimes_log.stop()
            self.leases_log.stop()
        return self.result

    def _phase(self, name: str, t0: float) -> None:
        self.result.phases[name] = time.monotonic() - t0 - sum(self.result.phases.values())

    def _launch(self, replica: str) -> None:
        self.incarnation[replica] += 1
        identity = f"op-{replica}{self.incarnation[replica]}"
        env = {"BATON_LEASE_SECONDS": str(LEASE_SECONDS)}
        if sharded(self.seed):
            env["BATON_SHARD_RANGES"] = str(SHARD_RANGES)
        op = self.start_op(identity, env=env,
                           kubeconfig=self.proxy.kubeconfig if replica == PROXIED else None, wait=False)
        self.ops[replica] = op.launch()

    def _act(self, a: Action) -> str:
        if KINDS[a.kind][1] == "runtime" and a.target in self.deleted:
            return "skipped: runtime deleted"
        method = getattr(self, "_" + a.kind.replace("-", "_"))
        return str(method(a.target) if a.target else method())

    def _status(self, rt: str) -> dict[str, Any]:
        return self.rts.status(rt)

    def _annotation(self, rt: str, key: str) -> str | None:
        return (self.rts.get(rt)["metadata"].get("annotations") or {}).get(key)

    def _write_verb(self, rt: str, key: str, value: int, intent: str) -> str:
        # Only this run writes verbs, and never over one still pending: each value written is
        # one the operator sees (and must consume), so each can be checked.
        if self._annotation(rt, key) is not None:
            return f"skipped: {key} still pending"
        self.rts.annotate(rt, key, str(value))
        self.verbs.append(Verb(rt, key, value, intent))
        return f"{key}={value} ({intent})"

    def _stale_value(self, rt: str) -> int:
        """0 or a retired generation, but never the one a Reset under way carries out: a reset
        naming it then is the same request written twice, consumed without a word (verbs.py,
        pending_reset), not a stale one (seed 9314 drew it: reset=1 while Reset g1->g2 ran).
        Kept in the draw so the RNG's sequence, and every seed's ordering, stays as it was."""
        st = self._status(rt)
        retired = [int(h["generation"]) for h in st.get("history") or []]
        value = self.rng.choice([0, *retired])
        t = st.get("transition") or {}
        if t.get("trigger") == "Reset" and t.get("from") == value:
            return 0
        return value

    def _template(self, rt: str) -> str:
        self.images += 1
        self.rts.set_image(rt, f"example/tool:{self.images}")
        return f"image example/tool:{self.images}"

    def _reset(self, rt: str) -> str:
        cur = (self._status(rt).get("current") or {}).get("generation")
        if cur is None:
            return "skipped: no current generation"
        return self._write_verb(rt, "baton.dev/reset", int(cur), "current")

    def _reset_stale(self, rt: str) -> str:
        return self._write_verb(rt, "baton.dev/reset", self._stale_value(rt), "stale")

    def _suspend(self, rt: str) -> str:
        self.rts.patch(rt, {"spec": {"suspend": True}})
        return "suspend: true"

    def _resume(self, rt: str) -> str:
        self.rts.patch(rt, {"spec": {"suspend": False}})
        return "suspend: false"

    def _stick(self, rt: str) -> str:
        pod = self.rts.pod(rt)
        if pod is None or pod.metadata.deletion_timestamp is not None:
            return "skipped: no standing pod"
        try:
            self.core.patch_namespaced_pod(rt, self.ns, {"metadata": {
                "finalizers": [*(pod.metadata.finalizers or []), HOLD],
                "resourceVersion": pod.metadata.resource_version}})
        except ApiException as e:
            if e.status in (404, 409, 422):
                return f"skipped: {e.status}"
            raise
        return f"finalizer on {pod.metadata.uid} (g{(pod.metadata.labels or {}).get('baton.dev/generation')})"

    def _unstick(self, rt: str) -> str:
        pod = self.rts.pod(rt)
        if pod is None or HOLD not in (pod.metadata.finalizers or []):
            return "skipped: not stuck"
        return self._drop_hold(pod)

    def _drop_hold(self, pod: Any) -> str:
        rest = [f for f in pod.metadata.finalizers or [] if f != HOLD]
        try:
            self.core.patch_namespaced_pod(pod.metadata.name, self.ns, {"metadata": {
                "finalizers": rest or None, "resourceVersion": pod.metadata.resource_version}})
        except ApiException as e:
            if e.status in (404, 409):  # gone, or changed: the caller looks again
                return f"not released: {e.status}"
            raise
        return f"finalizer removed from {pod.metadata.uid}"

    def _cleanup_failed(self, rt: str) -> int | None:
        st = self._status(rt)
        cf = next((c for c in st.get("conditions") or [] if c["type"] == "CleanupFailed"), {})
        if cf.get("status") == "True" and st.get("lastCleanupFailure"):
            return int(st["lastCleanupFailure"]["generation"])
        return None

    def _force(self, rt: str) -> str:
        failed = self._cleanup_failed(rt)
        pod = self.rts.pod(rt)
        if failed is None and pod is not None and HOLD in (pod.metadata.finalizers or []) and (
                pod.metadata.deletion_timestamp is not None or self._status(rt).get("transition")):
            # A stuck pod being retired, on its way to CleanupFailed: wait for it (bounded by
            # the budgets of the steps left).
            budget = BUDGETS["drainSeconds"] + BUDGETS["terminationGraceSeconds"] + BUDGETS["cleanupSeconds"] + 4
            try:
                failed = wait_for(lambda: self._cleanup_failed(rt), timeout=budget,
                                  what=f"CleanupFailed of {rt}", interval=0.25)
            except WaitTimeout:
                failed = None
        if failed is None:
            return "skipped: no cleanup failure"
        return self._write_verb(rt, "baton.dev/force-recovery", failed, "current")

    def _force_stale(self, rt: str) -> str:
        return self._write_verb(rt, "baton.dev/force-recovery", self._stale_value(rt), "stale")

    def _sigkill(self, r: str) -> str:
        op = self.ops[r]
        op.signal(signal.SIGKILL)
        op.wait_exit(10)
        self.stopped.pop(r, None)
        self._launch(r)
        return f"killed {op.identity}, started {self.ops[r].identity}"

    def _leave_join(self, r: str) -> str:
        """A graceful leave (SIGTERM: ranges handed back, Leases released) and a new incarnation
        joining at once. A stopped replica is continued first (SIGTERM waits for a stopped one)."""
        prefix = f"first {self._sigcont(r)}; " if r in self.stopped else ""
        op = self.ops[r]
        op.signal(signal.SIGTERM)
        code = op.wait_exit(30)
        self._launch(r)
        return f"{prefix}{op.identity} left (exit {code}), {self.ops[r].identity} joined"

    def _sigstop(self, r: str) -> str:
        if r in self.stopped:
            return "skipped: stopped already"
        self.ops[r].signal(signal.SIGSTOP)
        self.stopped[r] = time.monotonic()
        return f"stopped {self.ops[r].identity}"

    def _sigcont(self, r: str) -> str:
        if r not in self.stopped:
            return "skipped: not stopped"
        # Past the Lease: another replica may have taken over what it held.
        time.sleep(max(0.0, self.stopped[r] + LEASE_SECONDS + 1 - time.monotonic()))
        self.ops[r].signal(signal.SIGCONT)
        del self.stopped[r]
        return f"continued {self.ops[r].identity} after {LEASE_SECONDS + 1}s or more"

    def _hold_create(self) -> str:
        if self.holding:
            return "skipped: holding already"
        self.proxy.hold(apiproxy.matching(method="POST", path=rf"/api/v1/namespaces/{self.ns}/pods"))
        self.holding = True
        return f"holding op-{PROXIED}'s pod creates in the proxy"

    def _release_create(self) -> str:
        if not self.holding:
            return "skipped: not holding"
        self.holding = False
        released = self.proxy.release(timeout=20)
        return "released " + (", ".join(f"POST -> {e.status}" for e in released) or "nothing")

    def _late_create(self) -> str:
        """A create that lands after a takeover. op-b's pod creates are held in the proxy; the
        other replicas are stopped while the template of a runtime at rest changes, so op-b takes
        the handoff and sends the create (held); they are continued, op-b is stopped past its
        Lease so another replica takes the transition over; then the held create is delivered
        and op-b continued. Bounded: about 30 s at most."""
        before = []
        if self.holding:  # an earlier hold-create: its creates go first
            before.append(f"first {self._release_create()}")
        if PROXIED in self.stopped:
            before.append(f"first {self._sigcont(PROXIED)}")
        prefix = "; ".join(before) + ("; " if before else "")
        at_rest = [rt for rt in RUNTIMES if rt not in self.deleted and self._at_rest(rt)]
        if not at_rest:
            return f"{prefix}skipped: no runtime at rest (each deleted, suspended, stuck or in a transition)"
        rt = self.rng.choice(at_rest)
        op = self.ops[PROXIED]
        others = [r for r in REPLICAS if r != PROXIED and r not in self.stopped]
        self.proxy.hold(apiproxy.matching(method="POST", path=rf"/api/v1/namespaces/{self.ns}/pods"))

        def creating_by_b() -> int | None:
            """rt's fencing token while op-b holds it at Creating (its create sent: held)."""
            st = self._status(rt)
            t = st.get("transition") or {}
            if t.get("step") == "Creating" and st.get("holder") == op.identity and self.proxy.held_count() > 0:
                return int(st["fencingToken"])
            return None

        token: int | None = None
        others_for = 0.0
        stopped_at = time.monotonic()
        for r in others:
            self.ops[r].signal(signal.SIGSTOP)
        try:
            self._template(rt)
            try:  # op-b retires the pod (drain, grace, gone), then creates: a few seconds
                token = wait_for(creating_by_b, timeout=10, what=f"{op.identity} creating {rt}", interval=0.1)
            except WaitTimeout:
                return f"{prefix}skipped: {op.identity} did not reach {rt}'s create within 10 s"
            finally:
                for r in others:
                    self.ops[r].signal(signal.SIGCONT)
                others_for = time.monotonic() - stopped_at
            op.signal(signal.SIGSTOP)
            time.sleep(LEASE_SECONDS + 1)  # past its Lease: another replica may take over
            try:
                wait_for(lambda: int(self._status(rt).get("fencingToken") or 0) > (token or 0), timeout=10,
                         what=f"another replica taking {rt} over", interval=0.1)
                # At once: it may land before the new holder's own create; later: after it.
                after = self.rng.choice([0.0, 2.0])
                time.sleep(after)
                takeover = f"taken over (fencing token above {token}), delivered {after:.0f}s after"
            except WaitTimeout:
                takeover = f"not taken over within {LEASE_SECONDS + 11} s"
            released = self.proxy.release(timeout=20)
        finally:
            self.proxy.release(timeout=20)  # nothing left held, whatever happened
            op.signal(signal.SIGCONT)
        return (f"{prefix}{rt}: others stopped {others_for:.1f}s, {op.identity} sent its create (held), was stopped "
                f"{LEASE_SECONDS + 1}s, {takeover}; delivered late: "
                + (", ".join(f"POST -> {e.status}" for e in released) or "nothing"))

    def _at_rest(self, rt: str) -> bool:
        """Serving, nothing in progress, not suspended, its pod not held by a finalizer."""
        obj = self.rts.get(rt)
        st, pod = obj.get("status") or {}, self.rts.pod(rt)
        return (not (obj.get("spec") or {}).get("suspend") and not st.get("transition") and bool(st.get("current"))
                and pod is not None and pod.metadata.deletion_timestamp is None
                and HOLD not in (pod.metadata.finalizers or []))

    def _delete(self, rt: str) -> str:
        self.rts.delete(rt)
        self.deleted.add(rt)
        return "runtime deleted"

    # -- after the actions

    def _release_all(self) -> None:
        for r in list(self.stopped):
            self.log(f"release: {self._sigcont(r)}")
        if self.holding:
            self.log(f"release: {self._release_create()}")
        for name in RUNTIMES:
            if name not in self.deleted:
                self._resume(name)
        for op in self.ops.values():
            op.wait_healthy()
        self.log("release: stopped replicas continued, held creates sent, runtimes resumed")
        # Stuck pods last: a pod may get our finalizer until the end; drop it (bounded retries).
        wait_for(self._no_hold_left, timeout=20, what="every stuck pod released", interval=0.5)

    def _no_hold_left(self) -> bool:
        stuck = [p for p in self.core.list_namespaced_pod(self.ns).items if HOLD in (p.metadata.finalizers or [])]
        for pod in stuck:
            self.log(f"release: {self._drop_hold(pod)}")
        return not stuck

    def _converged(self) -> bool:
        for name in RUNTIMES:
            if name in self.deleted:
                if self.rts.exists(name):
                    return False
                continue
            rt = self.rts.get(name)
            st = rt.get("status") or {}
            ann = rt["metadata"].get("annotations") or {}
            cur = st.get("current") or {}
            conds = {c["type"]: c for c in st.get("conditions") or []}
            pod = self.rts.pod(name)
            if (st.get("transition") or "baton.dev/reset" in ann or "baton.dev/force-recovery" in ann
                    or st.get("pendingReset") or not cur
                    or cur.get("generation") != st.get("latestGeneration")
                    or conds.get("Ready", {}).get("status") != "True"
                    or conds.get("CleanupFailed", {}).get("status") == "True"
                    or pod is None or pod.metadata.uid != cur.get("uid")
                    or pod.metadata.deletion_timestamp is not None):
                return False
        return True

    def _converge(self) -> None:
        t = time.monotonic()
        try:
            wait_for(self._converged, timeout=CONVERGE_SECONDS, what="convergence", interval=0.5)
        except WaitTimeout:
            state = {n: (self.rts.get(n).get("status") if self.rts.exists(n) else "gone") for n in RUNTIMES}
            self.result.violations.append(
                f"not converged within {CONVERGE_SECONDS}s after every fault was released: {state}")
            for op in self.ops.values():
                print(f"--- log of {op.identity} ---\n{op.log_tail(60)}")
            raise AssertionError(self.result.report()) from None
        self.log(f"converged in {time.monotonic() - t:.1f}s")

    def _catch_up(self) -> None:
        """Wait (bounded) until each watch has seen what the API server now holds."""
        pods = {p.metadata.uid for p in self.core.list_namespaced_pod(self.ns).items}

        def pods_seen() -> bool:
            added = {e.uid for e in self.pods.added()}
            deleted = {e.uid for e in self.pods.deleted()}
            return pods <= added and not (added - deleted - pods)

        def objects_seen(log: WatchLog, rvs: dict[str, int]) -> bool:
            last: dict[str, int] = {}
            for _, rv, obj in log.snapshot():
                last[obj["metadata"]["name"]] = rv
            return all(last.get(n, 0) >= rv for n, rv in rvs.items())

        runtimes = {o["metadata"]["name"]: int(o["metadata"]["resourceVersion"])
                    for o in self.rts.custom.list_namespaced_custom_object(
                        GROUP, VERSION, self.ns, PLURAL)["items"]}
        leases = {ls.metadata.name: int(ls.metadata.resource_version)
                  for ls in self.coord.list_namespaced_lease(self.ns).items}
        wait_for(lambda: pods_seen() and objects_seen(self.runtimes_log, runtimes)
                 and objects_seen(self.leases_log, leases), timeout=15, what="watch logs caught up")
