"""A small simulated API server and operator replicas that run Baton's real code against it.

What is real: the pass itself, ``baton.reconcile.Reconciler`` (its memory, the probes it asks
for, the lock-wait bookkeeping, folding what a plan learnt), and so ``baton.lifecycle.decide``
(every decision), ``baton.cache.snapshot.read_snapshot`` (how the snapshot is built from the
views, including the fresh GETs by name), ``baton.cache``'s stores (the views, read-your-writes),
``baton.execute.Executor`` (how each action is carried out, the fresh-Lease check, the fencing
token on status writes) and ``baton.k8s`` (the requests it sends: UID preconditions, the Lease
compare-and-swap, the JSON-patch test on annotations). What is simulated: the transport under
``baton.k8s.client`` (``FakeApi``), which hands each request to ``Server``: objects with
resourceVersions and UIDs, name uniqueness, compare-and-swap, the CRD's CEL fence, grace periods
and finalizers, a kubelet, watches that can lag, requests held back and delivered later; the
drain probe's answer (``ToolProber``, run by the real ``baton.probing.Probes``: it answers
once the pass that started it is done, and its wake-up makes the replica pass again); the gateway
replicas (``Gateway``: the forwarding rule of docs/architecture.md "Sealed admission", modelled,
not the gateway's code, but for two real decisions: a held call is forwarded only by
``baton.gateway.proxy.forwardable``, an admin request is admitted only by
``baton.gateway.admin.authorized``), reached by the pass through ``SimGateways`` at baton.sealing's
adapter boundary. Time is simulated (``Clock``, injected into the pass); nothing sleeps.

The server also checks the invariants that are about what it accepts (``Server.violations``):
it knows which replica sent each request and whether that replica held the Lease.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from typing import Any, Callable

import pydantic

from baton import clock as clock_mod
from baton import drainprobe, execute, hookcall, hooking, probing, reconcile, triggers
from baton import faults as faults_mod
from baton.cache import informer
from baton.cache import snapshot
from baton.cache import views
from baton.gateway import admin as gw_admin
from baton.gateway import proxy as gw_proxy
from baton.gateway import route as gw_route
from baton.k8s import api, client
from baton.k8s import gateways as gw
from baton.lifecycle import plan
from baton.model import names, status as status_mod


def clone(obj: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), as a fresh parse of the same
    response would give each reader. copy.deepcopy's memo bookkeeping was a quarter of the
    model's time; nothing here is shared or cyclic, so it is not needed."""
    t = type(obj)
    if t is dict:
        return {k: clone(v) for k, v in obj.items()}
    if t is list:
        return [clone(v) for v in obj]
    if t is tuple:
        return tuple(clone(v) for v in obj)
    return obj

NS = "agents"
RT = "search-mcp"
T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
LEASE_SECONDS = 6
BUDGETS = {"lockSeconds": 5, "connectSeconds": 8, "drainSeconds": 3, "terminationGraceSeconds": 2,
           "cleanupSeconds": 6, "pinSeconds": 8}
PINNING_STATES = ("CommitEligible", "Committed")
# The gateway replicas' registration Leases (BATON_GATEWAY_LEASE_SECONDS) and the margin before
# their expiry at which a replica stops forwarding (2 s, or duration/5 if smaller).
GATEWAY_LEASE_SECONDS = 5
GATEWAY_MARGIN_SECONDS = min(2.0, GATEWAY_LEASE_SECONDS / 5)
# The gateway admin key (BATON_GATEWAY_ADMIN_KEY_FILE's content), shared by the operator replicas
# and the gateway replicas; a foreign actor does not have it.
ADMIN_KEY = b"model-admin-key-0123456789abcdefghijklmnopqrstuv"
STUCK_FINALIZER = "example.com/stuck"
# Slack on top of a step's budget before the budget check fails: a Lease handover (a dead
# holder is replaced once the others saw its Lease unchanged for its duration, plus the lock
# wait) and scheduling.
SLACK_SECONDS = 2 * LEASE_SECONDS + BUDGETS["lockSeconds"] + 4

STEP_BUDGET = {
    status_mod.Step.STOPPING_ADMISSION: BUDGETS["drainSeconds"],
    status_mod.Step.DRAINING: BUDGETS["drainSeconds"],
    status_mod.Step.TERMINATING: BUDGETS["cleanupSeconds"],
    status_mod.Step.AWAITING_POD_GONE: BUDGETS["cleanupSeconds"],
    status_mod.Step.CREATING: BUDGETS["connectSeconds"],
    status_mod.Step.CONNECTING: BUDGETS["connectSeconds"],
    status_mod.Step.FINALIZING: 1,
}


class Clock(clock_mod.Manual):
    """Simulated time from T0: both clocks advance only when the model says so."""

    def __init__(self) -> None:
        super().__init__(T0)


def _ts(clock: Clock) -> str:
    return clock.wall().strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _err(status: int, reason: str, message: str = "") -> api.ApiError:
    return api.ApiError(status, reason, message or reason)


LIFECYCLE_FIELDS = ("transition", "current", "latestGeneration", "history", "lastCleanupFailure")


@dataclasses.dataclass
class Held:
    """A request held back in the network, delivered later (or never)."""

    sender: str
    method: str
    path: str
    body: Any
    content_type: str
    what: str
    rv: int = 0  # the server's resourceVersion when it was sent


class Server:
    """One namespace, one ToolRuntime and what belongs to it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.rv = 0
        self.uid_seq = 0
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name) -> object
        self.events: list[tuple[str, str, dict[str, Any]]] = []  # watch log: (type, kind, object)
        # Every replica's views keep the watch log's objects themselves, not copies (a copy per
        # replica per event was the model's largest cost): nothing that reads a view may change
        # what it reads. events_unchanged() proves it at the end of each example.
        self.event_prints: list[str] = []
        self.violations: list[str] = []
        self.held: list[Held] = []
        self.delay_next: set[str] = set()  # "create" | "status" | "delete": hold the next such request
        self.kubelet_broken = False  # new pods never become Ready
        self.tool_busy = False  # the drain probe never says idle
        # spec.hooks (issue 45): the hook receiver answers 2xx (hook_ok) or 500; every call it got:
        # (generation, fencing token, hook, answered 2xx).
        self.hook_ok = True
        self.hook_calls: list[tuple[int, int, str, bool]] = []
        self.senders: dict[str, Replica] = {}
        self.sender: str | None = None  # who is sending now
        self.delivering = False  # applying a held request (late): the API server's fences only
        # Facts for the invariants.
        self.all_pod_uids: dict[str, int | None] = {}  # uid -> generation label, every pod ever created
        # Pods a held create made when delivered late: unknown to every replica until its view
        # shows them (the API server's one name per runtime is what keeps a second one out).
        self.late_pod_uids: set[str] = set()
        self.gone_uids: set[str] = set()
        self.force_deleted: set[str] = set()  # UIDs Baton force-deleted (a recorded force recovery)
        self.creates_sent: list[int] = []  # generations of CreatePod sent on time
        self.resets_posted: set[str] = set()  # every value a person wrote to baton.dev/reset
        self.max_token = 0
        self.max_lease_token = 0
        self.max_latest = 0
        self.max_current = 0
        self.runtime_removed = False
        self.event_reasons: list[str] = []
        self.runtime_uid = ""
        self.status_rv = 0  # the server's resourceVersion at the last status write it accepted
        self.late_sent_rv: int | None = None  # while delivering a held request: the rv when it was sent
        self.late_status_refused = 0  # held status writes the API server refused on delivery
        self.claim_seq = 0
        self._status_cache: tuple[str, status_mod.ToolRuntimeStatus] | None = None  # (runtime rv, its status parsed)
        # The gateway replicas (the actors), the registration Leases of crashed ones (live until
        # they expire, unreachable), and for the seal invariant: when each pod's StoppingAdmission
        # completed with the seal confirmed, and every call forwarded (gateway instance, pod uid, t).
        self.gateways: list[Gateway] = []
        self.ghost_gateways: dict[str, float] = {}  # instance -> its Lease's last renew (sim time)
        self.sealed_at: dict[str, float] = {}
        self.forwarded: list[tuple[str, str, float]] = []
        # Calls, numbered across the gateway replicas: held calls forwarded once a pod took them,
        # held calls dropped because their client had left (proxy's ClientGone), and the seals
        # posted without the admin key that a replica refused (401).
        self.call_seq = 0
        self.held_forwarded: list[int] = []
        self.cancelled: list[int] = []
        self.foreign_seals_refused = 0
        self.admin_key = ADMIN_KEY

    # --- objects ----------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _uid(self, kind: str) -> str:
        self.uid_seq += 1
        return f"{kind.lower()}-uid-{self.uid_seq}"

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.objs.get((kind, name))

    def _log(self, type_: str, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((type_, kind, obj))
        self.event_prints.append(json.dumps(obj))

    def events_changed(self) -> list[int]:
        """Indices of watch-log objects that something changed after they were logged."""
        return [i for i, (_t, _k, obj) in enumerate(self.events) if json.dumps(obj) != self.event_prints[i]]

    def store(self, kind: str, obj: dict[str, Any], type_: str = "MODIFIED") -> dict[str, Any]:
        if kind == "Lease":
            # Across the Lease's lives too: one created again after a deletion (with the runtime
            # being finalized, or by a person) must not reuse a lower token
            # (test_a_lease_created_again_never_reuses_a_lower_token).
            token = int((obj.get("spec") or {}).get("leaseTransitions") or 0)
            if token < self.max_lease_token:
                self.violation(f"{self.sender}: Lease {obj['metadata']['name']} written with fencing token {token}, "
                               f"below {self.max_lease_token} used before")
            self.max_lease_token = max(self.max_lease_token, token)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        obj.setdefault("kind", kind)
        self.objs[(kind, obj["metadata"]["name"])] = obj
        self._log(type_, kind, clone(obj))
        return clone(obj)

    def remove(self, kind: str, name: str) -> None:
        obj = self.objs.pop((kind, name))
        obj = clone(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._log("DELETED", kind, obj)
        if kind == "Pod":
            self.gone_uids.add(obj["metadata"]["uid"])
        if kind == "ToolRuntime":
            self._runtime_removed(obj)

    def create(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", NS)
        if (kind, meta["name"]) in self.objs:
            raise _err(409, "AlreadyExists", f"{kind.lower()}s \"{meta['name']}\" already exists")
        meta["uid"] = self._uid(kind)
        meta["creationTimestamp"] = _ts(self.clock)
        meta["generation"] = 1
        if kind == "Pod":
            obj["status"] = {"phase": "Pending", "conditions": []}
        return self.store(kind, obj, "ADDED")

    def create_runtime(self, spec: dict[str, Any]) -> None:
        rt = self.create("ToolRuntime", {"apiVersion": "baton.dev/v1alpha1", "metadata": {"name": RT, "namespace": NS},
                                         "spec": spec})
        self.runtime_uid = rt["metadata"]["uid"]

    def runtime(self) -> dict[str, Any] | None:
        return self.get("ToolRuntime", RT)

    def pods(self) -> list[dict[str, Any]]:
        return [o for (k, _), o in self.objs.items() if k == "Pod"]

    def status(self) -> status_mod.ToolRuntimeStatus | None:
        """The runtime's status, parsed once per resourceVersion (every stored write gets a new
        one); callers only read it."""
        rt = self.runtime()
        if rt is None:
            return None
        return self._parsed_status(rt["metadata"]["resourceVersion"], rt.get("status") or {})

    def _parsed_status(self, rv: str, raw: dict[str, Any]) -> status_mod.ToolRuntimeStatus:
        if self._status_cache is None or self._status_cache[0] != rv:
            self._status_cache = (rv, status_mod.ToolRuntimeStatus.model_validate(raw))
        return self._status_cache[1]

    def steady_pod(self) -> str | None:
        """The pod uid the runtime serves from in steady state (routed through the gateway, no
        transition, not deleting or suspended; its status.current pod labelled serving=true,
        Running, Ready, not deleting), else None."""
        rt, s = self.runtime(), self.status()
        if (rt is None or s is None or s.transition is not None or s.current is None or not _gateway_on(rt)
                or rt["metadata"].get("deletionTimestamp") or rt["spec"].get("suspend")):
            return None
        pod = next((p for p in self.pods() if p["metadata"]["uid"] == s.current.uid), None)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return None
        st = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
        serving = (pod["metadata"].get("labels") or {}).get(names.LABEL_SERVING) == "true"
        return s.current.uid if serving and ready and st.get("phase") == "Running" else None

    def violation(self, text: str) -> None:
        self.violations.append(f"t={self.clock.t:.1f} {text}")

    # --- a person / the cluster ---------------------------------------------------------------

    def tick(self) -> None:
        """The kubelet and the garbage collector, one simulated second."""
        for pod in list(self.pods()):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                if not meta.get("finalizers") and self.clock.t >= meta["_goneAt"]:
                    self.remove("Pod", meta["name"])
                continue
            if pod["status"].get("phase") == "Pending" and not self.kubelet_broken:
                pod = clone(pod)
                pod["status"] = {"phase": "Running", "podIP": "10.0.0.1",
                                 "conditions": [{"type": "Ready", "status": "True"}]}
                self.store("Pod", pod)
        rt = self.runtime()
        if rt is not None and rt["metadata"].get("deletionTimestamp") and not rt["metadata"].get("finalizers"):
            self.remove("ToolRuntime", RT)

    def _runtime_removed(self, obj: dict[str, Any]) -> None:
        self.runtime_removed = True
        left = [f"{k} {n}" for (k, n) in self.objs if k in ("Pod", "Lease", "Service")]
        if left:
            self.violation(f"runtime removed, yet left behind: {left}")
        # The garbage collector then deletes what the runtime owned (a late create's pod).
        for (k, n), o in list(self.objs.items()):
            if k in ("Pod", "Lease", "Service") and client.owned_by(o, obj["metadata"]["uid"]):
                self.objs.pop((k, n))
                if k == "Pod":
                    self.gone_uids.add(o["metadata"]["uid"])

    def user_patch_runtime(self, fn: Callable[[dict[str, Any]], None]) -> None:
        rt = self.runtime()
        if rt is None:
            return
        rt = clone(rt)
        before = rt.get("spec")
        fn(rt)
        if rt.get("spec") != before:
            rt["metadata"]["generation"] = int(rt["metadata"].get("generation") or 1) + 1
        self.store("ToolRuntime", rt)

    def user_delete_runtime(self) -> None:
        rt = self.runtime()
        if rt is None or rt["metadata"].get("deletionTimestamp"):
            return
        if not rt["metadata"].get("finalizers"):
            self.remove("ToolRuntime", RT)
            return
        rt = clone(rt)
        rt["metadata"]["deletionTimestamp"] = _ts(self.clock)
        self.store("ToolRuntime", rt)

    def user_restore_lease(self, token: int) -> None:
        """A person puts back an old copy of the runtime's Lease (a restore from a backup, a
        `kubectl replace` of an old manifest): deleted, then created again carrying `token`, below
        tokens Baton has used. Baton's own writes are judged from this token on (the Lease check
        guards Baton's writes, not a person's); status keeps the higher token, and no step may
        be acted on under the lower one."""
        name = names.lease_name(RT)
        old = self.get("Lease", name)
        assert old is not None, "no Lease to restore"
        copy = clone(old)
        for field in ("uid", "resourceVersion", "creationTimestamp"):
            copy["metadata"].pop(field, None)
        copy["spec"]["leaseTransitions"] = token
        self.remove("Lease", name)
        self.max_lease_token = token
        self.create("Lease", copy)

    def user_pod(self, fn: Callable[[dict[str, Any]], None]) -> None:
        for pod in self.pods():
            pod = clone(pod)
            fn(pod)
            self.store("Pod", pod)

    def delete_pod(self, name: str, grace: int) -> dict[str, Any] | None:
        pod = self.get("Pod", name)
        assert pod is not None
        if pod["metadata"].get("deletionTimestamp"):
            pod = clone(pod)
            pod["metadata"]["_goneAt"] = min(pod["metadata"]["_goneAt"], self.clock.t + grace)
            return self.store("Pod", pod)
        pod = clone(pod)
        pod["metadata"]["deletionTimestamp"] = _ts(self.clock)
        # The kubelet stops it within its grace (here: after min(grace, 1) s).
        pod["metadata"]["_goneAt"] = self.clock.t + min(grace, 1)
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        stored = self.store("Pod", pod)
        if grace == 0 and not pod["metadata"].get("finalizers"):
            self.remove("Pod", name)
        return stored

    # --- the requests Baton sends ------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any, content_type: str, query: Any = None) -> Any:
        parts = [x for x in path.split("/") if x]
        i = parts.index("namespaces")
        plural = parts[i + 2]
        name = parts[i + 3] if len(parts) > i + 3 else None
        sub = parts[i + 4] if len(parts) > i + 4 else None
        kind = {"pods": "Pod", "leases": "Lease", "services": "Service", "toolruntimes": "ToolRuntime",
                "toolruntimeclaims": "ToolRuntimeClaim", "events": "Event"}[plural]
        if kind == "Event":
            self.event_reasons.append(body.get("reason", ""))
            return body
        if method == "GET" and name is None:
            # A list; only the field selector metadata.name=<name> is understood.
            field, _, value = str((query or {}).get("fieldSelector") or "").partition("=")
            assert field == "metadata.name", query
            obj = self.get(kind, value)
            return {"metadata": {"resourceVersion": str(self.rv)}, "items": [] if obj is None else [clone(obj)]}
        if method == "GET":
            obj = self.get(kind, name or "")
            if obj is None:
                raise _err(404, "NotFound")
            return clone(obj)
        if method == "POST":
            if kind == "Pod":
                self._check_fenced(f"create pod g{body['metadata']['labels'].get(names.LABEL_GENERATION)}")
                owner = (body["metadata"].get("ownerReferences") or [{}])[0].get("uid")
                if self.runtime() is None or owner != self.runtime_uid:
                    # The garbage collector would delete it at once: treat as refused.
                    raise _err(404, "NotFound", "owner gone")
                created = self.create(kind, body)
                gen_text = created["metadata"]["labels"].get(names.LABEL_GENERATION)
                self.all_pod_uids[created["metadata"]["uid"]] = int(gen_text) if gen_text else None
                if self.delivering:
                    self.late_pod_uids.add(created["metadata"]["uid"])
                return created
            # A Lease whose owner is gone is created all the same, as the API server does (its
            # garbage collector comes later, seconds to minutes): its holder must delete it.
            return self.create(kind, body)
        obj = self.get(kind, name or "")
        if kind == "Pod" and method in ("DELETE", "PATCH"):
            # Judged when sent, whatever the API server answers (the pod may be gone already).
            self._check_fenced(f"{method.lower()} pod")
        if method == "PUT":
            if obj is None:
                raise _err(404, "NotFound")
            if body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                raise _err(409, "Conflict", "the object has been modified")
            new = clone(body)
            new["metadata"] = {**obj["metadata"], **{k: v for k, v in new["metadata"].items() if k != "resourceVersion"}}
            return self.store(kind, new)
        if method == "DELETE":
            if obj is None:
                raise _err(404, "NotFound")
            pre = ((body or {}).get("preconditions") or {}).get("uid")
            if pre is not None and pre != obj["metadata"]["uid"]:
                raise _err(409, "Conflict", "Precondition failed: UID in precondition")
            if kind == "Pod":
                self._check_delete(obj)
                return self.delete_pod(obj["metadata"]["name"], int((body or {}).get("gracePeriodSeconds", 30)))
            self.remove(kind, obj["metadata"]["name"])
            return None
        if method == "PATCH":
            if obj is None:
                raise _err(404, "NotFound")
            if content_type == "application/json-patch+json":
                return self._json_patch(kind, obj, body)
            meta_patch = (body or {}).get("metadata") or {}
            # As kube-apiserver answers (tests/integration/test_k8s_adapters.py): a merge patch's
            # metadata.uid on another object is refused as invalid (422, not 409); a status
            # subresource ignores it altogether.
            if "uid" in meta_patch and meta_patch["uid"] != obj["metadata"]["uid"] and sub != "status":
                raise _err(422, "Invalid", f'{kind} "{name}" is invalid: metadata.uid: Invalid value: '
                           f'"{meta_patch["uid"]}": field is immutable')
            if "resourceVersion" in meta_patch and meta_patch["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                raise _err(409, "Conflict", "the object has been modified")
            if kind == "ToolRuntime" and sub == "status":
                return self._status_patch(obj, body)
            if kind == "Pod":
                self._check_pins(obj, body)
            new = _merge(obj, {**body, "metadata": {k: v for k, v in meta_patch.items()
                                                    if k not in ("uid", "resourceVersion")}})
            if kind == "Pod" and new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                stored = self.store(kind, new)
                if self.clock.t >= new["metadata"]["_goneAt"]:
                    self.remove(kind, obj["metadata"]["name"])
                return stored
            if kind == "ToolRuntime":
                fins = new["metadata"].get("finalizers")
                stored = self.store(kind, new)
                if new["metadata"].get("deletionTimestamp") and not fins:
                    self.remove(kind, RT)
                return stored
            return self.store(kind, new)
        raise _err(405, "MethodNotAllowed")

    def _json_patch(self, kind: str, obj: dict[str, Any], ops: list[dict[str, Any]]) -> Any:
        new = clone(obj)
        for op in ops:
            keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
            parent = new
            for k in keys[:-1]:
                parent = parent.get(k) or {}
            if op["op"] == "test":
                if parent.get(keys[-1]) != op["value"]:
                    raise _err(422, "Invalid", "test failed")
            elif op["op"] == "remove":
                if keys[-1] not in parent:
                    raise _err(422, "Invalid", "path not found")
                del parent[keys[-1]]
            elif op["op"] == "add":
                parent[keys[-1]] = clone(op["value"])
            else:
                raise _err(422, "Invalid", f"op {op['op']} not simulated")
        return self.store(kind, new)

    def _status_patch(self, obj: dict[str, Any], body: dict[str, Any]) -> Any:
        old = obj.get("status") or {}
        new_status = _merge(old, body.get("status") or {})
        # The CRD's CEL transition rules: fencingToken and latestGeneration never decrease.
        if int(new_status.get("fencingToken") or 0) < int(old.get("fencingToken") or 0):
            raise _err(422, "Invalid", "status.fencingToken: Invalid value: must not decrease")
        if int(new_status.get("latestGeneration") or 0) < int(old.get("latestGeneration") or 0):
            raise _err(422, "Invalid", "status.latestGeneration: Invalid value: must not decrease")
        if self._sender_holds():
            self._check_fenced("status write", token=int((body.get("status") or {}).get("fencingToken") or 0))
        elif any(old.get(f) != new_status.get(f) for f in LIFECYCLE_FIELDS) and not self.delivering:
            self.violation(f"{self.sender}: a status write without the Lease changed the lifecycle state")
        if self.late_sent_rv is not None and self.status_rv > self.late_sent_rv:
            # A write decided before a later status write landed over it: status rolled back.
            self.violation(f"{self.sender}: a status write sent at rv {self.late_sent_rv}, held in the network, was "
                           f"accepted after a later status write (rv {self.status_rv}): status rolled back")
        try:
            parsed = status_mod.ToolRuntimeStatus.model_validate(new_status)
        except pydantic.ValidationError as exc:
            # (A merge patch applied to a state it was not computed from can leave a torn status.)
            self.violation(f"{self.sender}: a status write would leave a status that does not parse: "
                           f"{str(exc).splitlines()[0]}")
            raise _err(422, "Invalid", "status does not match the schema") from exc
        old_parsed = self._parsed_status(obj["metadata"]["resourceVersion"], old)
        new = clone(obj)
        new["status"] = new_status
        stored = self.store("ToolRuntime", new)
        self.status_rv = self.rv
        self._status_cache = (new["metadata"]["resourceVersion"], parsed)
        self._check_status(old_parsed, parsed)
        return stored

    # --- invariants about what is accepted ----------------------------------------------------

    def _sender_holds(self) -> bool:
        """Whether the sender believes it holds the Lease (a holder's write, fenced by the token)."""
        rep = self.senders.get(self.sender or "")
        return rep is not None and (NS, RT) in rep.executor.leases.held

    def _check_pins(self, pod: dict[str, Any], body: dict[str, Any]) -> None:
        """Pins: admission to a serving generation is stopped only when no CommitEligible or
        Committed claim names it, as far as the sender's claims view shows (a claim it has not
        seen yet cannot hold it), unless a person force-retired it past its pins. A pod already
        lost (terminating, or a PodLost retire) is not pinned."""
        labels = ((body.get("metadata") or {}).get("labels") or {})
        if self.delivering or self.sender is None or labels.get(names.LABEL_SERVING) != "false":
            return
        meta = pod["metadata"]
        if meta.get("labels", {}).get(names.LABEL_SERVING) != "true" or meta.get("deletionTimestamp"):
            return
        s = self.status()
        t = s.transition if s is not None else None
        if t is not None and (t.force_retired or t.trigger == status_mod.Trigger.POD_LOST):
            return
        gen = meta.get("labels", {}).get(names.LABEL_GENERATION)
        rep = self.senders[self.sender]
        known = rep.views.claims_known(NS)
        pinning = [c["metadata"]["name"] for c in rep.views.claims.by_label(NS, RT)
                   if c["spec"]["state"] in PINNING_STATES and str(c["spec"]["generation"]) == gen]
        if pinning or not known:
            self.violation(f"{self.sender}: admission to generation {gen} stopped while "
                           f"{'claims ' + ', '.join(pinning) + ' pin it' if pinning else 'its claims view is not listed'} "
                           "and no force-retire was recorded")

    def _check_fenced(self, what: str, token: int | None = None) -> None:
        """Invariant 3: a lifecycle write sent on time comes from the current Lease holder, with
        the token it acquired. (A request delivered late is fenced by the API server alone: the
        one pod name, UID preconditions, the CEL rule; those are what the other checks prove.)"""
        if self.delivering or self.sender is None:
            return
        rep = self.senders[self.sender]
        lease = self.get("Lease", names.lease_name(RT))
        spec = (lease or {}).get("spec") or {}
        held = rep.executor.leases.held.get((NS, RT))
        if (held is None or spec.get("holderIdentity") != rep.identity
                or int(spec.get("leaseTransitions") or 0) != held.token):
            self.violation(f"{rep.identity}: {what} sent while it does not hold the Lease "
                           f"(Lease: {spec.get('holderIdentity')} token {spec.get('leaseTransitions')}; "
                           f"its token {held.token if held else None})")
        elif token is not None and token != held.token:
            self.violation(f"{rep.identity}: {what} with token {token}, but it holds token {held.token}")

    def _check_delete(self, pod: dict[str, Any]) -> None:
        """A pod Baton deletes is the one its persisted transition retires (by UID)."""
        s = self.status()
        uid = pod["metadata"]["uid"]
        if s is None or s.transition is None or s.transition.from_uid != uid:
            self.violation(f"{self.sender}: deleted pod uid {uid} that no persisted transition retires "
                           f"(transition: {s.transition.from_uid if s and s.transition else None})")

    def _check_status(self, old: status_mod.ToolRuntimeStatus, new: status_mod.ToolRuntimeStatus) -> None:
        if new.fencing_token < self.max_token:
            self.violation(f"fencing token went back from {self.max_token} to {new.fencing_token}")
        self.max_token = max(self.max_token, new.fencing_token)
        if new.latest_generation < self.max_latest:
            self.violation(f"latestGeneration went back from {self.max_latest} to {new.latest_generation}")
        self.max_latest = max(self.max_latest, new.latest_generation)
        if new.current is not None and (old.current is None or old.current.uid != new.current.uid):
            if new.current.generation <= self.max_current:
                self.violation(f"generation {new.current.generation} serves after {self.max_current}: reused")
            self.max_current = max(self.max_current, new.current.generation)
        # Invariant 2: a transition that takes a new number takes one above every number given out.
        nt, ot = new.transition, old.transition
        if nt is not None and nt.to is not None and (ot is None or ot.to != nt.to) and nt.to <= old.latest_generation:
            self.violation(f"a transition takes generation {nt.to}, but latestGeneration was {old.latest_generation}: reused")
        # The seal: a retire that leaves StoppingAdmission without DrainIncomplete has had every
        # live gateway replica confirm it; from then on no call may be forwarded to that pod.
        if (ot is not None and ot.step == status_mod.Step.STOPPING_ADMISSION and ot.from_uid
                and (nt is None or nt.from_uid != ot.from_uid or nt.step != status_mod.Step.STOPPING_ADMISSION)
                and not (nt is not None and nt.from_uid == ot.from_uid and nt.drain_incomplete)):
            self.sealed_at.setdefault(ot.from_uid, self.clock.t)
        # Invariant 5: CleanupFailed=True is cleared only when that pod is gone or force-recovered.
        was, now = old.condition(status_mod.ConditionType.CLEANUP_FAILED), new.condition(status_mod.ConditionType.CLEANUP_FAILED)
        if was is not None and was.status == "True" and (now is None or now.status != "True"):
            failure = old.last_cleanup_failure
            fuid = failure.uid if failure else None
            forced = new.transition is not None and new.transition.forced and new.transition.from_uid == fuid
            # A failed preRetire hook (issue 45) is resolved by the hook's end: a retry that
            # succeeded, or a person's force recovery, recorded in the transition's hooks.
            forced = forced or (failure is not None and failure.reason == status_mod.Reason.HOOK_FAILED.value
                                and new.transition is not None and any(
                                    r.hook == status_mod.HookName.PRE_RETIRE.value and r.outcome != status_mod.HookOutcome.FAILED.value
                                    for r in new.transition.hooks))
            if fuid is not None and fuid not in self.gone_uids and not forced:
                self.violation(f"CleanupFailed cleared ({now.reason if now else 'removed'}) while pod uid {fuid} "
                               "still exists and no force recovery was recorded")
        if old.last_cleanup_failure is not None and new.last_cleanup_failure is None:
            self.violation("lastCleanupFailure removed")
        # A retirement recorded as a reset names a generation a person asked to reset.
        old_keys = {(h.generation, h.uid) for h in old.history}
        for h in new.history:
            if (h.generation, h.uid) in old_keys:
                continue
            if h.outcome == status_mod.Outcome.RESET and str(h.generation) not in self.resets_posted:
                self.violation(f"generation {h.generation} retired as Reset, but no reset named it "
                               f"(resets posted: {sorted(self.resets_posted)})")

    def check_state(self) -> None:
        """Invariant 1 (at every instant): at most one pod object, at most one serving."""
        pods = [pd for pd in self.pods() if pd["metadata"].get("labels", {}).get(names.LABEL_RUNTIME) == RT
                or client.owned_by(pd, self.runtime_uid)]
        live = [pd for pd in pods if not pd["metadata"].get("deletionTimestamp")]
        if len(live) > 1:
            self.violation(f"{len(live)} non-terminated pods: {[pd['metadata']['name'] for pd in live]}")
        serving = [pd for pd in live if pd["metadata"]["labels"].get(names.LABEL_SERVING) == "true"]
        if len(serving) > 1:
            self.violation("two serving pods")

    def create_sent(self, replica: str, gen: int) -> None:
        """Invariant 1/2, checked when a replica sends a create on time (the API server would
        refuse a second pod of the name anyway: this is about the decision): every earlier
        generation's pod the runtime knew of is gone by UID, or force-recovered; a generation
        number is never sent again once a later one was. A pod a late create made counts once
        the sender's view shows it: until then the next create, sent on a view behind, is
        refused by name (test_a_create_landing_after_its_number_was_given_up_is_refused_by_name_then_retired)."""
        sender = self.senders.get(replica)
        for uid, g in self.all_pod_uids.items():
            if uid in self.late_pod_uids and (sender is None or not any(
                    pd["metadata"]["uid"] == uid for pd in sender.views.pods.items())):
                continue
            if g is not None and g < gen and uid not in self.gone_uids and uid not in self.force_deleted:
                self.violation(f"{replica}: create of g{gen} sent while g{g}'s pod uid {uid} still exists")
        if self.creates_sent and gen < max(self.creates_sent):
            self.violation(f"{replica}: create of g{gen} sent after g{max(self.creates_sent)}: a number reused")
        s = self.status()
        if s is not None and any(h.generation >= gen for h in s.history):
            self.violation(f"{replica}: create of g{gen} sent, but history already has it")
        self.creates_sent.append(gen)

    def create_attempted(self, replica: str, gen: int, token: int) -> None:
        """Invariant 2, on every create sent (held in the network or not): a number is never sent
        again while a create of it may still land, under any fencing token. A create still held
        could land after this number's pod has come and gone: a second pod of one generation
        (chaos seed 11179: another holder's create; or this holder's own, timed out)."""
        earlier = sorted({str(h.body["metadata"]["annotations"][names.ANN_FENCING_TOKEN]) for h in self.held
                          if h.what == "create" and int(h.body["metadata"]["labels"][names.LABEL_GENERATION]) == gen
                          })
        if earlier:
            self.violation(f"{replica}: create of g{gen} sent under fencing token {token}, after one under "
                           f"{earlier} that may still land")

    # --- held requests -------------------------------------------------------------------------

    def deliver(self, i: int) -> None:
        h = self.held.pop(i)
        self.delivering, self.sender, self.late_sent_rv = True, h.sender, h.rv
        try:
            self.handle(h.method, h.path, h.body, h.content_type)
        except api.ApiError:
            # Refused by the API server's own fences: what a late request should meet.
            self.late_status_refused += h.what == "status"
        finally:
            self.delivering, self.sender, self.late_sent_rv = False, None, None

    # --- claims (a consumer's records; Baton only writes their status) -----------------------

    def create_claim(self, generation: int, state: str) -> str:
        self.claim_seq += 1
        name = f"claim-{self.claim_seq}"
        self.create("ToolRuntimeClaim", {
            "apiVersion": "baton.dev/v1alpha1", "metadata": {"name": name, "namespace": NS},
            "spec": {"runtimeRef": {"name": RT}, "generation": generation, "fork": "plan-1",
                     "branch": f"b{self.claim_seq}", "state": state}})
        return name

    def claims(self) -> list[dict[str, Any]]:
        return [o for (k, _), o in self.objs.items() if k == "ToolRuntimeClaim"]

    def release_claims(self) -> None:
        for c in self.claims():
            if c["spec"]["state"] in PINNING_STATES:
                c = clone(c)
                c["spec"]["state"] = "Released"
                self.store("ToolRuntimeClaim", c)


def _gateway_on(rt: dict[str, Any] | None) -> bool:
    return rt is not None and bool(((rt.get("spec") or {}).get("service") or {}).get("gateway"))


@dataclasses.dataclass
class Call:
    """One client's call at a gateway replica, held while no pod may take it."""

    id: int
    arrived: float  # sim time
    leaves_at: float | None = None  # when its client gives up waiting (None: it waits for the answer)
    client_left: bool = False  # its client closed the connection


class Gateway:
    """One gateway replica, modelled: its registration Lease (renewed each simulated second while
    it runs), its own view of the runtime and its pods (listed at start, then fed from the watch
    log, possibly lagging), the pods it sealed, and the forwarding rule of the contract
    (docs/architecture.md, "Sealed admission"): a new call goes to pod P only if the runtime routes
    through the gateway, P is the runtime's status.current, labelled serving=true, Running and
    Ready, not deleting, not sealed here, and the replica's last renew is fresher than its Lease
    duration minus the margin (else it re-registers and lists again before forwarding anything).

    A call no pod may take is held (the runtime routed here, not deleting, not suspended) for the
    runtime's admissionSeconds, and looked at again each second (the wake-up of a view change):
    forwarded once a pod may take it, if the real ``proxy.forwardable`` says so (its client may
    have left meanwhile: the model does not count on aiohttp's cancellation landing first). Its
    admin API admits a request only if the real ``admin.authorized`` accepts its credential, and
    answers only while the operator can reach it (``admin_reachable``: else a timeout).

    Invariants judged here: no call forwarded to a pod after its StoppingAdmission completed; no
    held call forwarded after its client left; a call that finds the runtime in steady state (no
    transition, its current pod serving, Running and Ready, this replica's view up to date) is
    forwarded, not held (what a seal posted without the admin key must not change)."""

    def __init__(self, name: str, server: Server, clock: Clock) -> None:
        self.name, self.server, self.clock = name, server, clock
        self.seq = 0
        # How long the clients of calls held here wait before they leave (None: as long as it
        # takes); the clients', not the process's, so a restart keeps it.
        self.patience: float | None = None
        server.gateways.append(self)
        self.start()

    def start(self) -> None:
        """A fresh process: registers (its Lease), then lists its view; nothing sealed yet."""
        self.seq += 1
        self.instance = f"{self.name}-{self.seq}"
        self.alive, self.paused, self.lagging = True, False, False
        # The operator can reach its admin address (False: a network cut between the two; the
        # replica itself runs on, renews its Lease, follows its view and forwards).
        self.admin_reachable = True
        self.sealed: set[str] = set()
        self.held_calls: list[Call] = []
        self.renewed = self.clock.t
        # spec.idle: when the last call that counts arrived here (since the process started if none).
        self.last_call_at = self.clock.t
        self.relist()

    def crash(self) -> None:
        """SIGKILL: the Lease stays until it expires; nobody answers at its admin address. The
        calls it held die with it (their clients see the connection reset)."""
        if self.alive:
            self.server.ghost_gateways[self.instance] = self.renewed
            self.alive = False
            self.held_calls = []

    def relist(self) -> None:
        self.pods = {n: o for (k, n), o in self.server.objs.items() if k == "Pod"}
        self.runtime = self.server.objs.get(("ToolRuntime", RT))
        self.cursor = len(self.server.events)

    def catch_up(self) -> None:
        for type_, kind, obj in self.server.events[self.cursor:]:
            if kind == "Pod":
                if type_ == "DELETED":
                    self.pods.pop(obj["metadata"]["name"], None)
                else:
                    self.pods[obj["metadata"]["name"]] = obj
            elif kind == "ToolRuntime":
                self.runtime = None if type_ == "DELETED" else obj
        self.cursor = len(self.server.events)

    def running(self) -> bool:
        return self.alive and not self.paused

    def fresh(self) -> bool:
        return self.clock.t - self.renewed < GATEWAY_LEASE_SECONDS - GATEWAY_MARGIN_SECONDS

    def live(self) -> bool:
        """Its Lease, as the operator judges it: renewTime + duration still ahead."""
        return self.alive and self.renewed + GATEWAY_LEASE_SECONDS > self.clock.t

    def tick(self) -> None:
        if not self.running():
            return
        if self.fresh():
            self.renewed = self.clock.t  # renewed well within duration/3 (each simulated second)
        if not self.lagging:
            self.catch_up()
        self.release_held()

    def target(self) -> str | None:
        rt = self.runtime
        if not _gateway_on(rt) or rt is None:
            return None
        current = ((rt.get("status") or {}).get("current") or {}).get("uid")
        for pod in self.pods.values():
            meta, st = pod["metadata"], pod.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            if (meta["uid"] == current and (meta.get("labels") or {}).get(names.LABEL_SERVING) == "true"
                    and st.get("phase") == "Running" and ready and not meta.get("deletionTimestamp")
                    and meta["uid"] not in self.sealed):
                return str(meta["uid"])
        return None

    def _fresh_view(self) -> None:
        if not self.fresh():
            # Its Lease may have expired unseen: register again, list again, then forward.
            self.renewed = self.clock.t
            self.relist()

    def holds(self) -> bool:
        """A call no pod may take now is held (route.decide's Hold), not refused."""
        rt = self.runtime
        return (_gateway_on(rt) and rt is not None and not rt["metadata"].get("deletionTimestamp")
                and not (rt.get("spec") or {}).get("suspend"))

    def idle_wake_seconds(self) -> int | None:
        """spec.idle.wakeSeconds while this replica's view says the runtime idle (status.idle.since):
        a call held for its wake waits that long (then 503 WakeTimeout); None otherwise."""
        rt = self.runtime or {}
        since = ((rt.get("status") or {}).get("idle") or {}).get("since")
        wake = ((rt.get("spec") or {}).get("idle") or {}).get("wakeSeconds")
        return int(wake) if since and isinstance(wake, int) else None

    def wake_backing_off(self) -> bool:
        """An idle runtime whose failed wake backs off (status.retry.notBefore ahead): a call gets
        503 WakeFailed at once, is not held, and demands nothing."""
        status = (self.runtime or {}).get("status") or {}
        not_before = (status.get("retry") or {}).get("notBefore")
        if not not_before or self.idle_wake_seconds() is None:
            return False
        return bool(datetime.datetime.fromisoformat(not_before.replace("Z", "+00:00")) > self.clock.wall())

    def call(self) -> None:
        """A new call arrives at this replica."""
        if not self.running():
            return
        self._fresh_view()
        self.server.call_seq += 1
        self.last_call_at = self.clock.t  # a tools/call: it counts as activity
        c = Call(self.server.call_seq, self.clock.t)
        if self._forward(c, held=False):
            return
        self._judge_steady()
        if self.holds() and not self.wake_backing_off():
            c.leaves_at = None if self.patience is None else self.clock.t + self.patience
            self.held_calls.append(c)

    def release_held(self) -> None:
        """The held calls looked at again: forwarded once a pod may take them, refused (503
        Transitioning) past admissionSeconds."""
        if not self.running() or not self.held_calls:
            return
        self._fresh_view()
        admission = self.idle_wake_seconds() or gw_route.admission_seconds(self.runtime)
        for c in list(self.held_calls):
            if c.leaves_at is not None and self.clock.t >= c.leaves_at:
                c.client_left = True
            if self.clock.t - c.arrived >= admission or self._forward(c, held=True):
                self.held_calls.remove(c)

    def client_leaves(self, i: int) -> None:
        """The client of held call `i` closes its connection."""
        self.held_calls[i].client_left = True

    def _forward(self, c: Call, *, held: bool) -> bool:
        """Forward `c` if a pod may take it: True when done with it (forwarded, or dropped by
        the real decision because its client left), False when it waits."""
        uid = self.target()
        if uid is None:
            return False
        if not gw_proxy.forwardable(held=held, client_waiting=not c.client_left):
            self.server.cancelled.append(c.id)  # ClientGone: counted cancelled, never sent
            return True
        self.server.forwarded.append((self.instance, uid, self.clock.t))
        if held:
            self.server.held_forwarded.append(c.id)
        if c.client_left:
            self.server.violation(f"gateway {self.instance} forwarded held call {c.id} (held since "
                                  f"t={c.arrived:.0f}) to pod uid {uid} after its client left")
        # A pod already gone (deleted by someone else, its retire then recorded at once) is not a
        # breach of the seal: such a call finds nobody at that address (a view that lags).
        if uid in self.server.sealed_at and uid not in self.server.gone_uids:
            self.server.violation(f"gateway {self.instance} forwarded a call to pod uid {uid} after its "
                                  f"StoppingAdmission completed (t={self.server.sealed_at[uid]:.0f})")
        return True

    def _judge_steady(self) -> None:
        """A call not forwarded although the runtime is in steady state, as the API server has it
        and this replica's view shows it (listed up to the last event): a breach."""
        if self.cursor != len(self.server.events):
            return
        uid = self.server.steady_pod()
        if uid is not None:
            why = "it sealed that pod" if uid in self.sealed else "its rule found no pod"
            self.server.violation(f"gateway {self.instance} did not forward a call to the runtime in steady "
                                  f"state (pod uid {uid} serving): {why}")

    def _admit(self, authorization: str | None) -> None:
        """The admin API's gate: reachable, and the admin key presented (else 401)."""
        if not self.running():
            raise gw.AdminError(f"{self.instance}: unreachable")
        if not self.admin_reachable:
            # What baton.k8s.gateways raises for a call that timed out: unconfirmed, not gone.
            raise gw.AdminError(f"{self.instance}: TimeoutError (its admin address unreachable)")
        if not gw_admin.authorized(authorization, key=self.server.admin_key):
            raise gw.AdminError(f"{self.instance}: 401 (unauthorized: present the gateway admin key as a bearer token)")

    def seal(self, uid: str, *, authorization: str | None) -> int:
        self._admit(authorization)
        self.sealed.add(uid)
        return 0

    def inflight(self, uid: str, *, authorization: str | None) -> int:
        self._admit(authorization)
        return 0


class SimGateways:
    """baton.sealing's Gateways, answered by the modelled replicas (and crashed ones' Leases).
    Each admin call carries the admin key as baton.k8s.gateways sends it (a bearer token)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.authorization = "Bearer " + server.admin_key.decode("ascii")

    def _by_instance(self, instance: str) -> Gateway | None:
        return next((g for g in self.server.gateways if g.instance == instance and g.alive), None)

    async def live(self) -> list[gw.Replica]:
        t = self.server.clock.t
        out = [gw.Replica(g.instance, g.name) for g in self.server.gateways if g.live()]
        out += [gw.Replica(i, "ghost") for i, renewed in self.server.ghost_gateways.items()
                if renewed + GATEWAY_LEASE_SECONDS > t]
        return out

    async def seal(self, replica: gw.Replica, *, namespace: str, runtime: str, uid: str) -> gw.Counts:
        g = self._by_instance(replica.name)
        if g is None:
            raise gw.AdminError(f"{replica.name}: unreachable")
        return gw.Counts(inflight=g.seal(uid, authorization=self.authorization))

    async def inflight(self, replica: gw.Replica, *, uid: str, namespace: str, runtime: str) -> gw.Counts:
        g = self._by_instance(replica.name)
        if g is None:
            raise gw.AdminError(f"{replica.name}: unreachable")
        return gw.Counts(inflight=g.inflight(uid, authorization=self.authorization))

    async def activity(self, replica: gw.Replica, *, namespace: str, runtime: str) -> gw.Activity:
        """GET /v1/activity (spec.idle): seconds since the last call that counts here, calls held
        here (a modelled replica forwards at once: none stays in flight)."""
        g = self._by_instance(replica.name)
        if g is None:
            raise gw.AdminError(f"{replica.name}: unreachable")
        g._admit(self.authorization)
        return gw.Activity(idle_seconds=max(0.0, self.server.clock.t - g.last_call_at), inflight=0,
                           held=len(g.held_calls))

    async def wake_demand(self, *, namespace: str, runtime: str) -> tuple[str, ...]:
        """The live replicas holding calls now: each lists the runtime in its Lease's ANN_WAKE_DEMAND."""
        return tuple(sorted(g.instance for g in self.server.gateways if g.live() and g.running() and g.held_calls))


class FakeApi:
    """Stands in for ``baton.k8s.api.Api``: the same two calls, answered by ``Server``."""

    def __init__(self, server: Server) -> None:
        self.server = server

    async def request(self, method: str, path: str, *, query: Any = None, body: Any = None,
                      content_type: str = "application/json", timeout: float | None = None) -> Any:
        s = self.server
        body = json.loads(json.dumps(body)) if body is not None else None  # as it goes on the wire
        what = None
        if method == "POST" and "/pods" in path:
            what = "create"
        elif method == "PATCH" and path.endswith("/status"):
            what = "status"
        elif method == "DELETE" and "/pods/" in path:
            what = "delete"
        if what == "create" and not s.delivering:
            meta = body["metadata"]
            s.create_attempted(s.sender or "?", int(meta["labels"][names.LABEL_GENERATION]),
                               int(meta["annotations"][names.ANN_FENCING_TOKEN]))
        if what is not None and what in s.delay_next:
            s.delay_next.discard(what)
            s.held.append(Held(s.sender or "?", method, path, body, content_type, what, s.rv))
            raise asyncio.TimeoutError(f"{what} request timed out (held in the network)")
        if what == "create" and s.sender is not None and not s.delivering:
            # Judged when the create is sent on time (not when planned: an earlier action of the
            # plan, ConfirmNoPod, may stop it), whatever the API server answers.
            s.create_sent(s.sender, int(body["metadata"]["labels"][names.LABEL_GENERATION]))
        return s.handle(method, path, body, content_type, query)

    async def get_or_none(self, path: str) -> Any:
        try:
            return await self.request("GET", path)
        except api.ApiError as exc:
            if exc.status == 404:
                return None
            raise


class ToolProber:
    """The tool's drain endpoint: idle unless the server says the tool is busy."""

    def __init__(self, server: Server) -> None:
        self.server = server

    async def probe(self, *, pod: dict[str, Any], probe: Any, timeout: float | None = None) -> drainprobe.Result:
        idle = not self.server.tool_busy
        return drainprobe.Result(idle=idle, error=None if idle else "HTTP 503")


class HookCaller:
    """The hook receiver (spec.hooks' httpPost): records each call with its fence, answers 200
    while the server says hook_ok, else 500."""

    def __init__(self, server: Server) -> None:
        self.server = server

    async def call(self, *, pod: dict[str, Any], post: Any, fence: hookcall.Fence, timeout: float,
                   timeout_seconds: int) -> hookcall.Result:
        ok = self.server.hook_ok
        self.server.hook_calls.append((fence.generation, fence.fencing_token, fence.hook, ok))
        return hookcall.Result(ok, "answered 200" if ok else "answered 500")


LOOP = asyncio.new_event_loop()
_TASKS_STARTED: list[asyncio.Task[Any]] = []  # tasks a coroutine started (asyncio.all_tasks was a scan per call)


def _record_task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    task = asyncio.Task(coro, loop=loop, **kwargs)
    _TASKS_STARTED.append(task)
    return task


LOOP.set_task_factory(_record_task)  # type: ignore[arg-type]

KIND_STORE = {"ToolRuntime": "runtimes", "Pod": "pods", "Lease": "leases", "Service": "services",
              "ToolRuntimeClaim": "claims"}


class Replica:
    """One operator process: its views (fed from the server's watch log, possibly lagging), its
    pass (real: baton.reconcile, its executor and its memory). One `step` = one pass; `decide`
    and `execute` are the pass's two halves, so a replica can freeze between them."""

    def __init__(self, identity: str, server: Server, clock: Clock) -> None:
        self.identity, self.server, self.clock = identity, server, clock
        server.senders[identity] = self
        self.paused_plan: tuple[snapshot.Snapshot, plan.Plan] | None = None
        self.pause_before_fenced = False  # freeze at the next plan that changes pods
        self.restart()

    def restart(self) -> None:
        """A crash and restart: every local fact is lost; the views are listed afresh."""
        self.views = views.Views(namespaces=(NS,), watch_configmaps=False, watch_secrets=False)
        # The claims view is listed (the CRD installed, list granted), as in a real cluster: pins
        # are known. Fed from the watch log below like the others; never run.
        self.claims_informer = informer.Informer(
            FakeApi(self.server), kind="ToolRuntimeClaim", group_version="baton.dev/v1alpha1",
            plural="toolruntimeclaims", namespace=NS, store=self.views.claims)
        self.claims_informer.synced.set()
        self.views.informers.append(self.claims_informer)
        # EndpointSlices are not simulated: a listed, empty view, as if the EndpointSlice
        # controller dropped a pod the moment it stops serving. (Unlisted, every retire waited
        # out drainSeconds in StoppingAdmission and the model never reached Draining or a probe.)
        slices = informer.Informer(
            FakeApi(self.server), kind="EndpointSlice", group_version="discovery.k8s.io/v1",
            plural="endpointslices", namespace=NS, store=self.views.slices)
        slices.synced.set()
        self.views.informers.append(slices)
        self.woken = False
        self.executor = execute.Executor(identity=self.identity, lease_seconds=LEASE_SECONDS, views=self.views,
                                         clock=self.clock, faults=faults_mod.Faults())
        # The real probe runner: a pass starts the probe it needs and decides without its answer;
        # the answer comes when the pass's coroutine is done (`_run` lets it), and its wake-up
        # makes this replica pass again at once, as the controller's queue would.
        self.probe_woken = False
        self.probes = probing.Probes(prober=ToolProber(self.server), concurrency=64, clock=self.clock,
                                     wake=self._probe_answered)
        # spec.hooks: the real runner, its calls answered by the server's hook receiver.
        self.hooks = hooking.Hooks(caller=HookCaller(self.server), concurrency=64, clock=self.clock,
                                   wake=self._probe_answered)
        self.reconciler = reconcile.Reconciler(
            identity=self.identity, lease_seconds=LEASE_SECONDS, backoff_base_seconds=5.0, views=self.views,
            executor=self.executor, probes=self.probes, clock=self.clock, configs=triggers.ConfigIndex(),
            gateways=SimGateways(self.server), hooks=self.hooks)
        self.cursor = 0
        self.lagging = False
        # One watch stream behind the others (each kind is its own stream in a cluster): its
        # events are held back, in order, and delivered when it catches up.
        self.lagging_kinds: set[str] = set()
        self.held_back: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.pause_before_fenced = False
        self.paused_plan = None
        self.last_wait: float | None = 0.0
        self.catch_up()

    def catch_up(self, upto: int | None = None) -> None:
        """Deliver watch events up to `upto` (all by default)."""
        end = len(self.server.events) if upto is None else min(upto, len(self.server.events))
        for kind in [k for k in self.held_back if k not in self.lagging_kinds]:
            for type_, obj in self.held_back.pop(kind):
                self._deliver(type_, kind, obj)
        for type_, kind, obj in self.server.events[self.cursor:end]:
            if kind in self.lagging_kinds:
                self.held_back.setdefault(kind, []).append((type_, obj))
            else:
                self._deliver(type_, kind, obj)
        self.cursor = max(self.cursor, end)

    def _deliver(self, type_: str, kind: str, obj: dict[str, Any]) -> None:
        store = getattr(self.views, KIND_STORE[kind])
        if type_ == "DELETED":
            store.delete(obj)
        else:
            store.apply(obj)

    def stream_lag(self, kind: str, lag: bool) -> None:
        """The watch stream of `kind` falls behind (its events held back) or catches up."""
        if lag:
            self.lagging_kinds.add(kind)
        else:
            self.lagging_kinds.discard(kind)

    def _run(self, coro: Any) -> Any:
        """Run one coroutine to the end, as asyncio.run would (tasks it left, such as a Lease
        renewer, are cancelled: the model drives renewals itself), on one loop kept for the
        whole run (asyncio.run's loop setup and signal handling dominated the model's time)."""
        self.server.sender = self.identity
        try:
            answer = LOOP.run_until_complete(coro)
            if self.probes.flights:
                LOOP.run_until_complete(self.probes.settle())
            if self.hooks.flights:
                LOOP.run_until_complete(self.hooks.settle())
            # The executor posts events from a task of its own: let it post this call's (most
            # calls post none, and a loop pass per call was a tenth of the model's time).
            if self.executor.events.sending():
                LOOP.run_until_complete(self.executor.events.flush(timeout=60.0))
            return answer
        finally:
            self.server.sender = None
            left = [t for t in _TASKS_STARTED if not t.done()]
            _TASKS_STARTED.clear()
            for task in left:
                task.cancel()
            if left:
                LOOP.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                _TASKS_STARTED.clear()

    def renew(self) -> None:
        if (NS, RT) in self.executor.leases.held and self.paused_plan is None:
            held = self.executor.leases.held[(NS, RT)]
            if self.clock.monotonic() - held.renewed >= max(0.5, held.duration / 3):
                self._run(self.executor.leases.renew_once((NS, RT), lambda: None))

    def decide(self, *, standing_down: bool = False) -> tuple[snapshot.Snapshot, plan.Plan] | None:
        """The first half of a pass (None: the runtime is gone, its Lease abandoned).
        `standing_down`: the pass a replica runs for a runtime that is no longer its own (its
        range moved to another replica, or SIGTERM): persist, hand the Lease back, start nothing."""
        if not self.lagging:
            self.catch_up()
        planned: tuple[snapshot.Snapshot, plan.Plan] | None = self._run(
            self.reconciler.decide((NS, RT), shutting_down=standing_down))
        return planned

    def execute(self, snap: snapshot.Snapshot, planned: plan.Plan) -> bool:
        """The second half of a pass."""
        for a in planned.actions:
            if isinstance(a, plan.ForceDeletePod) and self.executor.leases.holds((NS, RT)):
                self.server.force_deleted.add(a.uid)
        self.woken = False
        result: reconcile.Result = self._run(self.reconciler.act(snap, planned, wake=self.wake))
        # Woken (a write refused for a stale resourceVersion, the runtime read again): decide
        # again at once, as the controller's queue would.
        self.last_wait = 1.0 if result.failed else (0.0 if self.woken or self.probe_woken else result.wait)
        self.probe_woken = False
        return not result.failed

    def wake(self) -> None:
        self.woken = True

    def _probe_answered(self, key: tuple[str, str]) -> None:
        self.probe_woken = True

    def step(self, *, standing_down: bool = False) -> plan.Plan | None:
        """One pass; None when the runtime is gone."""
        if self.paused_plan is not None:
            return None
        got = self.decide(standing_down=standing_down)
        if got is None:
            self.last_wait = None
            return None
        if self.pause_before_fenced and any(isinstance(a, plan.FENCED) for a in got[1].actions):
            self.pause_before_fenced = False
            self.paused_plan = got
            return None
        self.execute(*got)
        return got[1]

    def pause(self) -> None:
        """Decide, then freeze before acting (SIGSTOP): the plan is carried out on resume."""
        if self.paused_plan is None:
            got = self.decide()
            if got is not None:
                self.paused_plan = got

    def resume(self) -> None:
        if self.paused_plan is not None:
            snap, plan = self.paused_plan
            self.paused_plan = None
            self.execute(snap, plan)


def install(server: Server, clock: Clock) -> Callable[[], None]:
    """Point baton.k8s.client at the simulation; returns an undo."""
    fake = FakeApi(server)
    saved = (client._WORK, client._LEASES)
    client._WORK = client._LEASES = fake  # type: ignore[assignment]

    def undo() -> None:
        client._WORK, client._LEASES = saved

    return undo


def base_spec() -> dict[str, Any]:
    return {
        "template": {"metadata": {"labels": {"app": "search"}},
                     "spec": {"containers": [{"name": "server", "image": "example/search:1"}]}},
        "service": {"ports": [{"port": 80, "targetPort": 8080}]},
        "budgets": dict(BUDGETS),
        "drain": {"probe": {"httpGet": {"path": "/idle", "port": 8080}, "periodSeconds": 1}},
        "recovery": {"onCleanupFailure": "Hold"},
        "suspend": False,
    }
