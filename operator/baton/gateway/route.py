"""The gateway's pure rules. No I/O: Host parsing, refusal bodies (JSON-RPC aware) and the
forwarding decision from a view of one runtime. Hop-by-hop headers and request-smuggling checks:
``baton.gateway.hygiene``.

The decision reads plain API objects (dicts, as the informers store them): the runtime and its
pods. The caller passes what only it knows (the sealed pod UIDs, the allowed CIDRs, UIDs a held
call must never be forwarded to).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import ipaddress
import json
import math
from typing import Any, Callable, Container, Iterable, Mapping

from baton.gateway import idle
from baton.model import names

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Reason(str, enum.Enum):
    """Why a call was not forwarded (the Baton-Reason header; a bounded metric label)."""

    UNKNOWN_RUNTIME = "UnknownRuntime"  # 404: the Host names no runtime served by the gateway
    TRANSITIONING = "Transitioning"  # 503: held past budgets.admissionSeconds
    SUSPENDED = "Suspended"
    CLEANUP_FAILED = "CleanupFailed"
    CONNECT_TIMEOUT = "ConnectTimeout"
    POD_REJECTED = "PodRejected"
    DELETING = "Deleting"
    ADDRESS_NOT_ALLOWED = "AddressNotAllowed"  # the serving pod's IP is outside BATON_GATEWAY_ALLOWED_CIDRS
    OVERLOADED = "Overloaded"  # too many calls held for this runtime
    TOO_LARGE = "RequestTooLarge"  # 413: a held call's body over the cap
    GATEWAY_SHUTDOWN = "GatewayShutdown"
    UNKNOWN_SESSION = "UnknownSession"  # 404: an Mcp-Session-Id a generation now gone issued
    SESSION_REPLAY_FAILED = "SessionReplayFailed"  # 404: re-binding the session on the serving pod failed
    BAD_REQUEST = "BadRequest"  # 400: smuggling, a bad Host
    UPSTREAM_ERROR = "UpstreamError"  # 502: the pod failed mid-call
    CLIENT_NOT_ALLOWED = "ClientNotAllowed"  # 403: the caller is outside spec.service.clients
    # Idle runtimes (baton.gateway.idle; the same strings as the model's reasons, issue 43):
    IDLE = "Idle"  # 503 at once: ping or no JSON-RPC request for an idle runtime (no wake)
    WAKE_TIMEOUT = "WakeTimeout"  # 503: held for a wake past spec.idle.wakeSeconds
    WAKE_FAILED = "WakeFailed"  # 503 at once: a missed wake is retired, then its back-off (status.retry.notBefore) runs
    # spec.hooks (issue 45): a Fail postReady hook failed (Degraded=True reason HookFailed) and keeps
    # the new generation out of serving: a held call is refused with it at its admission bound.
    HOOK_FAILED = "HookFailed"


STATUS = {
    Reason.UNKNOWN_RUNTIME: 404, Reason.UNKNOWN_SESSION: 404, Reason.SESSION_REPLAY_FAILED: 404, Reason.TOO_LARGE: 413,
    Reason.BAD_REQUEST: 400, Reason.UPSTREAM_ERROR: 502, Reason.CLIENT_NOT_ALLOWED: 403,
}


def status_of(reason: Reason) -> int:
    return STATUS.get(reason, 503)


@dataclasses.dataclass(frozen=True)
class Target:
    """What a Host header names: a runtime, and the Service port (None: not given)."""

    namespace: str
    runtime: str
    port: int | None


def _label(text: str) -> bool:
    """A DNS-1123 label (what a Service, hence a runtime, and a namespace are named)."""
    return 0 < len(text) <= 63 and text[0].isalnum() and text[-1].isalnum() and all(
        c.islower() or c.isdigit() or c == "-" for c in text)


@functools.lru_cache(maxsize=4096)
def parse_host(host: str, *, cluster_domain: str) -> Target | None:
    """`<runtime>.<namespace>`, `.svc` or `.svc.<cluster domain>`, with an optional `:<port>`.
    Anything else (an IP, a bad name, another domain, a bad port): None. Cached: clients send the
    same few Host values over and over (a Target is immutable)."""
    text = host.strip().lower().rstrip(".") if host else ""
    if not text or text.startswith("["):
        return None  # empty, or an IPv6 literal
    port: int | None = None
    if ":" in text:
        text, _, port_text = text.rpartition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        port = int(port_text)
    text = text.rstrip(".")
    domain = cluster_domain.strip(".").lower()
    labels = text.split(".")
    if len(labels) == 2:
        pass
    elif len(labels) == 3 and labels[2] == "svc":
        pass
    elif labels[2:3] == ["svc"] and ".".join(labels[3:]) == domain:
        pass
    else:
        return None
    runtime, namespace = labels[0], labels[1]
    if not (_label(runtime) and _label(namespace)):
        return None
    return Target(namespace=namespace, runtime=runtime, port=port)


def service_port(runtime: Mapping[str, Any], port: int | None) -> Mapping[str, Any] | None:
    """The Service port the Host names: `port` if the runtime's Service has it; with no port,
    port 80 if there is one, else the only port. None: no such port."""
    ports = [p for p in ((runtime.get("spec") or {}).get("service") or {}).get("ports") or [] if isinstance(p, dict)]
    if port is None:
        by80 = [p for p in ports if p.get("port") == 80]
        if by80:
            return by80[0]
        return ports[0] if len(ports) == 1 else None
    return next((p for p in ports if p.get("port") == port), None)


def target_port(svc_port: Mapping[str, Any], pod: Mapping[str, Any]) -> int | None:
    """The pod port a Service port maps to: targetPort's number, a named container port from the
    pod's spec, or (no targetPort) the port itself, as a Service does."""
    tp = svc_port.get("targetPort")
    if tp is None or tp == "":
        tp = svc_port.get("port")
    if isinstance(tp, int):
        return tp if 0 < tp < 65536 else None
    text = str(tp)
    if text.isdigit():
        return int(text) if 0 < int(text) < 65536 else None
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == text and isinstance(p.get("containerPort"), int):
                return int(p["containerPort"])
    return None


@dataclasses.dataclass(frozen=True)
class Forward:
    uid: str
    ip: str
    port: int
    generation: int


@dataclasses.dataclass(frozen=True)
class Hold:
    """No forwardable generation, a transition under way (or the view not yet trustworthy).
    `wake_seconds`: the runtime is idle and this is a hold for its wake, bounded by
    spec.idle.wakeSeconds from the call's arrival (None: budgets.admissionSeconds)."""

    why: str
    wake_seconds: int | None = None


@dataclasses.dataclass(frozen=True)
class Refuse:
    reason: Reason
    retry_after: int
    message: str
    generation: int | None = None


Decision = Forward | Hold | Refuse


def _cond(runtime: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in ((runtime.get("status") or {}).get("conditions") or []):
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def hook_failed(runtime: Mapping[str, Any] | None) -> str | None:
    """The message of Degraded=True reason HookFailed (a failed postReady hook holds the new
    generation out of serving), None otherwise."""
    degraded = _cond(runtime, "Degraded") if runtime is not None else None
    if degraded is None or degraded.get("status") != "True" or degraded.get("reason") != Reason.HOOK_FAILED.value:
        return None
    return str(degraded.get("message") or "a hook failed")


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _generation_label(pod: Mapping[str, Any]) -> int | None:
    text = _labels(pod).get(names.LABEL_GENERATION) or ""
    return int(text) if text.isdigit() else None


def retiring_uids(runtime: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], sealed: Container[str]) -> set[str]:
    """Pods of this runtime that will never serve again: the transition's `from`, the sealed
    among its pods, those being deleted, and those labelled serving=false that are not newer
    than the current generation. A held call excludes them for good. (A sealed UID whose pod is
    not in the view needs no entry: decide() reads `sealed` itself, and a UID is forgotten there
    only long after its pod left the view.)

    A new generation's pod is created serving=false and labelled serving=true before it becomes
    current: it is not retiring, and a call held while it connects must be forwarded to it (it
    once was excluded, so the call waited for the generation after it, or its whole budget)."""
    out: set[str] = set()
    status = runtime.get("status") or {}
    t = status.get("transition") or {}
    if t.get("fromUid"):
        out.add(str(t["fromUid"]))
    current = (status.get("current") or {}).get("generation")
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or meta.get("uid") in sealed:
            out.add(str(meta.get("uid") or ""))
        elif _labels(pod).get(names.LABEL_SERVING) == "false":
            gen = _generation_label(pod)
            newer = gen is not None and (not isinstance(current, int) or gen > current)
            if not newer:
                out.add(str(meta.get("uid") or ""))
    return out


@functools.lru_cache(maxsize=4096)
def address_of(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Parsed once per pod IP, not once per call (the decision runs on every call)."""
    try:
        return ipaddress.ip_address(ip)
    except ValueError:
        return None


def in_networks(ip: str, allowed: Iterable[Network]) -> bool:
    addr = address_of(ip)
    return addr is not None and any(addr.version == n.version and addr in n for n in allowed)


def decide(
    runtime: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    *,
    port: int | None,
    sealed: Container[str],
    excluded: Container[str],
    allowed: Iterable[Network],
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
) -> Decision:
    """Where a new call for `runtime` (as the view shows it) goes: the forwarding rule of
    /work/brief/gateway.md. `excluded`: pod UIDs this call must never reach (it was held while
    they retired). `now`: the wall clock, read only for an idle runtime's back-off."""
    if runtime is None or not ((runtime.get("spec") or {}).get("service") or {}).get("gateway"):
        return Refuse(Reason.UNKNOWN_RUNTIME, 0, "no runtime of that name is served by the gateway")
    svc_port = service_port(runtime, port)
    if svc_port is None:
        return Refuse(Reason.UNKNOWN_RUNTIME, 0, f"the runtime's Service has no port {port if port else '(default)'}")
    status = runtime.get("status") or {}
    current = status.get("current") or {}
    generation = current.get("generation") if isinstance(current.get("generation"), int) else None
    if (runtime.get("metadata") or {}).get("deletionTimestamp"):
        return Refuse(Reason.DELETING, 30, "the runtime is being deleted", generation)
    if (runtime.get("spec") or {}).get("suspend"):
        return Refuse(Reason.SUSPENDED, 30, "the runtime is suspended (spec.suspend)", generation)
    cleanup = _cond(runtime, "CleanupFailed")
    if cleanup is not None and cleanup.get("status") == "True":
        return Refuse(Reason.CLEANUP_FAILED, 30, str(cleanup.get("message") or "a generation's cleanup failed"), generation)
    uid = current.get("uid")
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not uid or meta.get("uid") != uid or uid in sealed or uid in excluded:
            continue
        if _labels(pod).get(names.LABEL_SERVING) != "true" or meta.get("deletionTimestamp") or not _pod_ready(pod):
            continue
        ip = str((pod.get("status") or {}).get("podIP") or "")
        if (pod.get("spec") or {}).get("hostNetwork"):
            # Its IP is the node's: the gateway would dial any port of the node for the tenant.
            return Refuse(Reason.ADDRESS_NOT_ALLOWED, 30,
                          "the serving pod uses the node's network (hostNetwork): the gateway never dials a node", generation)
        if not in_networks(ip, allowed):
            return Refuse(Reason.ADDRESS_NOT_ALLOWED, 30,
                          "the serving pod's IP is outside BATON_GATEWAY_ALLOWED_CIDRS", generation)
        pod_port = target_port(svc_port, pod)
        if pod_port is None:
            return Refuse(Reason.UNKNOWN_RUNTIME, 0, f"the Service port's targetPort {svc_port.get('targetPort')!r} names no container port")
        return Forward(uid=str(uid), ip=ip, port=pod_port, generation=int(generation or 0))
    # The operator's own failures: no generation will serve within a call's wait, so say why at
    # once (Degraded carries them; Ready says BackingOff while a retry waits).
    since = idle.idle_since(runtime)
    if since is not None:
        # Idle, no pod serves (docs/gateway.md, "Idle runtimes and wake"). A failed wake's
        # back-off: refused at once, no call held for a wake that will not start yet.
        left = idle.backoff_left(runtime, now=now())
        if left is not None:
            ready = _cond(runtime, "Ready") or {}
            return Refuse(Reason.WAKE_FAILED, max(1, math.ceil(left)),
                          str(ready.get("message") or "the runtime's last wake failed; the next waits for its back-off"),
                          generation)
    transition = status.get("transition") or {}
    degraded = _cond(runtime, "Degraded") or {}
    failed = str(degraded.get("reason") or "") if degraded.get("status") == "True" else ""
    if (transition.get("trigger") == Reason.CONNECT_TIMEOUT.value and transition.get("kind") == "Retire"
            and failed != Reason.WAKE_FAILED.value):
        failed = Reason.CONNECT_TIMEOUT.value
    if failed in (Reason.CONNECT_TIMEOUT.value, Reason.POD_REJECTED.value):
        return Refuse(Reason(failed), 10, str(degraded.get("message") or failed), generation)
    if failed == Reason.WAKE_FAILED.value and transition.get("trigger") == Reason.CONNECT_TIMEOUT.value:
        # A missed wake being retired: said as the back-off after it says it (idle.since and the
        # back-off are written once its pod is gone), not as ConnectTimeout.
        return Refuse(Reason.WAKE_FAILED, 10, str(degraded.get("message") or failed), generation)
    if since is not None:
        return Hold(f"the runtime is idle since {since}: waking it", wake_seconds=idle.wake_seconds(runtime))
    if transition:
        return Hold("a transition is under way")
    # A runtime not yet started, or whose pod is briefly not Ready: the operator's next step
    # is a transition; held within admissionSeconds like any other wait.
    return Hold("no generation serves yet")


STATIC_HOLD = "this replica cannot reach the API server: it forwards only to runtimes in steady state"


def fail_static(runtime: Mapping[str, Any] | None, decision: Decision) -> Decision:
    """The decision of a replica in static mode (its registration lapsed: the API server is away;
    docs/gateway.md, "When the API server is away"), from `decision` (decide() on the same view).
    A Forward stands only if the view shows the runtime in steady state: no status.transition
    and no spec change the operator has not yet observed (status.observedGeneration behind
    metadata.generation: a transition is about to start). decide() already checked the rest:
    the current pod, serving=true, Ready, not sealed, not excluded. Otherwise the call is held
    (answered 503 Transitioning at its admissionSeconds unless the API server returns first).
    Holds and refusals stand: neither dials anything."""
    if not isinstance(decision, Forward) or runtime is None:
        return decision
    status = runtime.get("status") or {}
    if status.get("transition"):
        return Hold(f"{STATIC_HOLD}, and a transition is under way")
    observed = status.get("observedGeneration")
    generation = (runtime.get("metadata") or {}).get("generation")
    if isinstance(observed, int) and isinstance(generation, int) and observed < generation:
        return Hold(f"{STATIC_HOLD}, and a spec change is not yet acted on")
    return decision


def current_generation(runtime: Mapping[str, Any] | None) -> int | None:
    """The generation the runtime's status names as current (a refusal's Baton-Generation)."""
    g = (((runtime or {}).get("status") or {}).get("current") or {}).get("generation")
    return g if isinstance(g, int) else None


def admission_seconds(runtime: Mapping[str, Any] | None, default: int = 60) -> int:
    value = (((runtime or {}).get("spec") or {}).get("budgets") or {}).get("admissionSeconds")
    return value if isinstance(value, int) and value > 0 else default


def jsonrpc_id(body: bytes) -> tuple[bool, Any]:
    """(whether `body` is a JSON-RPC request, its id; None for a notification)."""
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False, None
    if isinstance(msg, dict) and msg.get("jsonrpc") == "2.0" and "method" in msg:
        rid = msg.get("id")
        return True, rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
    return False, None


def refusal_body(*, reason: Reason, message: str, namespace: str | None, runtime: str | None,
                 generation: int | None, body: bytes | None) -> bytes:
    """The JSON body of a refusal: a JSON-RPC error response carrying the request's id when the
    request was JSON-RPC (code -32000, data {reason, runtime, generation}), else a plain object."""
    data = {"reason": reason.value, "runtime": f"{namespace}/{runtime}" if runtime else None, "generation": generation}
    is_rpc, rid = jsonrpc_id(body) if body else (False, None)
    if is_rpc:
        doc: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": message, "data": data}}
    else:
        doc = {"error": message, **data}
    return json.dumps(doc).encode()
