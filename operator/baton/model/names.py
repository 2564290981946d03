"""The API's names, in one place: group, version, kinds, plurals, every ``baton.dev/...`` label,
annotation and finalizer, and the pure functions that name the objects Baton owns. No I/O.

The operator, its adapters and the kubectl plugin (``baton.cli``) all read them from here, so a
name the API server stores is spelled once.
"""

from __future__ import annotations

import hashlib

GROUP = "baton.dev"
VERSION = "v1alpha1"
API_VERSION = "baton.dev/v1alpha1"  # GROUP/VERSION, as objects carry it

KIND = "ToolRuntime"
PLURAL = "toolruntimes"
CLAIM_KIND = "ToolRuntimeClaim"
CLAIM_PLURAL = "toolruntimeclaims"

# On a ToolRuntime: held until its last generation is retired and its Service and Lease are gone.
FINALIZER = "baton.dev/retire"

# Labels on the objects Baton owns (pods, the Service, the Lease); the informers select on RUNTIME.
LABEL_RUNTIME = "baton.dev/runtime"
LABEL_GENERATION = "baton.dev/generation"
LABEL_SERVING = "baton.dev/serving"
# On the same objects: the runtime's hash bucket (shardhash.hash_bucket), so a sharded replica lists and
# watches only its ranges' objects (baton.sharding; each range is a whole set of buckets).
LABEL_HASH_BUCKET = "baton.dev/hash-bucket"

# Annotations on a generation's pod.
ANN_GENERATION = "baton.dev/generation"
ANN_FENCING_TOKEN = "baton.dev/fencing-token"
ANN_TEMPLATE_HASH = "baton.dev/template-hash"

# Annotations a person (or the plugin) writes on a ToolRuntime: requests naming a generation.
ANN_RESET = "baton.dev/reset"
ANN_FORCE_RECOVERY = "baton.dev/force-recovery"
ANN_FORCE_RETIRE = "baton.dev/force-retire"
# Idle and wake (spec.idle; issue 43). On a ToolRuntime: ANN_WAKE, set by `kubectl baton wake NAME`
# to the RFC 3339 time of the ask (a wake is demanded while it is newer than status.idle.since);
# ANN_KEEP_AWAKE = "true": never idled.
ANN_WAKE = "baton.dev/wake"
ANN_KEEP_AWAKE = "baton.dev/keep-awake"

# The gateway (DESIGN.md, "Gateway"): each replica holds a Lease in the system namespace, labelled
# LABEL_COMPONENT=COMPONENT_GATEWAY (never LABEL_RUNTIME), renewed while it lives; the annotation
# carries its admin address (host:port) where the operator seals admission and reads in-flight counts.
LABEL_COMPONENT = "baton.dev/component"
COMPONENT_GATEWAY = "gateway"
ANN_GATEWAY_ADMIN = "baton.dev/gateway-admin"
# Seconds (a decimal integer) a gateway replica may keep forwarding to runtimes in steady state past
# the end of its Lease when it cannot renew (BATON_GATEWAY_STATIC_SECONDS; docs/gateway.md, "When
# the API server is away"). The operator keeps asking such a replica that long (baton.k8s.gateways).
ANN_GATEWAY_STATIC = "baton.dev/gateway-static-seconds"
# On a gateway replica's registration Lease: a JSON list of "namespace/name" (sorted, at most
# WAKE_DEMAND_MAX) of the idle runtimes for which that replica holds calls now (the wake's demand).
ANN_WAKE_DEMAND = "baton.dev/wake-demand"
WAKE_DEMAND_MAX = 512
# The operator replica that exports the per-runtime metrics holds a Lease in the system namespace
# labelled LABEL_COMPONENT=COMPONENT_METRICS (metrics_lease_name).
COMPONENT_METRICS = "runtime-metrics"
# Sharding (BATON_SHARD_RANGES): each operator replica's membership Lease and the Leases through
# which replicas hold ranges of the runtimes' hash space, all in the operator's namespace.
COMPONENT_SHARD_MEMBER = "shard-member"
COMPONENT_SHARD_RANGE = "shard-range"
# The gateway's pods (the chart labels them LABEL_COMPONENT=COMPONENT_GATEWAY in the system
# namespace): with spec.service.gateway the runtime's Service has no selector and Baton keeps one
# EndpointSlice for it listing the Ready gateway pods at their container port of this name.
GATEWAY_PORT_NAME = "calls"
# Well-known EndpointSlice labels (discovery.k8s.io): the Service a slice belongs to, and who
# manages it (the EndpointSlice controller leaves slices of other managers alone).
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER = "operator.baton.dev"  # a label value: no slash
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"  # the EndpointSlice controller's own
# Response headers the gateway adds.
HEADER_GENERATION = "Baton-Generation"
HEADER_REASON = "Baton-Reason"
HEADER_HELD_MS = "Baton-Held-Ms"  # on every answer to a call that was held: the milliseconds it waited

# Hooks around a handoff (spec.hooks; issue 45). ANN_RETRY_HOOK on a ToolRuntime names the
# generation whose failed hook to run again (`kubectl baton retry NAME`); the operator removes it.
# Every hook call (an HTTP POST to the generation's pod) carries the fence in these headers, with
# HEADER_GENERATION: the runtime (namespace/name), the holder's current fencing token, the hook.
ANN_RETRY_HOOK = "baton.dev/retry-hook"
HEADER_RUNTIME = "Baton-Runtime"
HEADER_FENCING_TOKEN = "Baton-Fencing-Token"
HEADER_HOOK = "Baton-Hook"

# Events' reportingComponent.
REPORTING_COMPONENT = "baton.dev/operator"


def pod_name(runtime: str) -> str:
    """Every generation's pod has the runtime's name: the API server's name uniqueness then
    refuses a second pod of a runtime while any earlier one exists, whoever sends the create."""
    return runtime


def lease_name(runtime: str) -> str:
    return f"baton-{runtime}"


def metrics_lease_name(namespaces: tuple[str, ...] | list[str]) -> str:
    """The Lease whose holder exports the per-runtime metrics: one per installation, told apart
    by the namespaces it watches (none: every namespace), so two installations sharing a system
    namespace each have theirs. The dot keeps it apart from every runtime's Lease."""
    scope = ",".join(sorted(namespaces)) or "*"
    return f"baton-runtime-metrics.{hashlib.sha256(scope.encode()).hexdigest()[:10]}"


def shard_member_lease_name(identity: str) -> str:
    """An operator replica's membership Lease (the dot keeps it apart from runtimes' Leases). The
    identity (a pod name, or host-pid) is folded into a DNS subdomain; the holder field keeps it whole."""
    folded = "".join(c if c.isascii() and (c.isalnum() or c in "-.") else "-" for c in identity.lower())
    return f"baton-member.{folded.strip('-.') or 'replica'}"[:253]


def shard_range_lease_name(*, index: int, ranges: int) -> str:
    """The Lease through which one replica holds range `index` of `ranges`: the count is in the
    name, so a changed count never meets Leases cut for another one."""
    return f"baton-range.{ranges}.{index}"


def parse_shard_range_lease_name(name: str) -> tuple[int, int] | None:
    """(index, ranges) of a range Lease's name (shard_range_lease_name), None for another name."""
    prefix, _, rest = name.partition(".")
    ranges, _, index = rest.partition(".")
    if prefix != "baton-range" or not ranges.isdigit() or not index.isdigit() or int(index) >= int(ranges):
        return None
    return int(index), int(ranges)


def gateway_slice_name(runtime: str) -> str:
    """The EndpointSlice Baton keeps for a runtime routed through the gateway. The dot keeps it
    apart from the EndpointSlice controller's names (<service>-<random>)."""
    return f"{runtime}.baton-gateway"


def tool_pod_policy_name(runtime: str) -> str:
    """The NetworkPolicy that admits only the gateway (and the operator) to a gateway-routed
    runtime's pods (BATON_ISOLATE_TOOL_PODS). The dot keeps it apart from names people give."""
    return f"{runtime}.baton-gateway-only"


def gateway_lease_name(instance: str) -> str:
    """A gateway replica's registration Lease. The dot keeps it apart from every runtime's Lease
    (lease_name): a runtime's name is a DNS label (its Service's name), so it has no dot."""
    return f"baton-gateway.{instance}"

# The purpose the gateway's MCP session-id key is derived for, under the admin key
# (baton.gateway.sessions): changing it invalidates every session id issued.
SESSION_ID_KEY_CONTEXT = "baton.dev/mcp-session-ids/v1"
