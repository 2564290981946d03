"""Operator and gateway settings from the environment (the Helm chart sets these). No I/O beyond
reading the environment.

Each variable is one field of a pydantic model (its alias is the variable's name), so a bad value
is refused before anything starts, with an error naming the variable: SettingsError, which
`python -m baton` reports as one JSON line on stderr and exit code 2. An empty variable counts as
unset (the chart renders empty values), except the CIDR lists, where empty means "none".
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
from typing import Annotated, Any, ClassVar, Literal

import pydantic

from baton.sharding import ranges

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Bind = tuple[str, int]


class SettingsError(ValueError):
    """A variable with a value Baton refuses; `variable` names it, `problem` says why."""

    def __init__(self, *, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


def _default_identity() -> str:
    pod = os.environ.get("POD_NAME")
    return pod or f"{socket.gethostname()}-{os.getpid()}"


def parse_bind(text: str) -> Bind:
    """`host:port`, `[v6 address]:port`, `:port` or `port`. An empty host means every address of
    both families (asyncio binds 0.0.0.0 and :: side by side); `0.0.0.0` is IPv4 only and `::` is
    IPv6 only (asyncio sets IPV6_V6ONLY)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]")
        if not sep or not port.startswith(":"):
            raise ValueError("write [address]:port")
        port = port[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in brackets is not an IPv6 address") from None
    else:
        host, _, port = text.rpartition(":")
        if ":" in host:
            raise ValueError("write an IPv6 address in brackets, e.g. [::1]:8080")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("the port must be a number in 0..65535")
    return (host, int(port))


def format_address(host: str, port: int) -> str:
    """host:port as a URL or a Lease annotation writes it ([v6]:port)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _networks(text: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in text.split(",") if c.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _as_str(parse: Any) -> Any:
    # Values come from the environment as text; only text is parsed (a tuple given in code, e.g.
    # a test's model_validate, passes through).
    return pydantic.BeforeValidator(lambda v: parse(v) if isinstance(v, str) else v)


def parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    """`key=value,key=value`: label pairs as a matchLabels selector holds them."""
    pairs = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.fullmatch(key.strip()) or not _LABEL_VALUE.fullmatch(value.strip()):
            raise ValueError(f"{item!r} is not key=value with a valid label key and value")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")

BindField = Annotated[Bind, _as_str(parse_bind)]
Networks = Annotated[tuple[Network, ...], _as_str(_networks)]
Names = Annotated[tuple[str, ...], _as_str(_names)]
Labels = Annotated[tuple[tuple[str, str], ...], _as_str(parse_labels)]


LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                     pydantic.BeforeValidator(lambda v: v.strip().upper() if isinstance(v, str) else v)]
Seconds = Annotated[float, pydantic.Field(ge=0, allow_inf_nan=False)]


class _Env(pydantic.BaseModel):
    """The variables, by name (each field's alias); unknown variables are ignored."""

    model_config = pydantic.ConfigDict(extra="ignore", frozen=True)
    # Variables where an empty value means an empty list, not "unset".
    EMPTY_IS_A_VALUE: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def read(cls, env: dict[str, str] | None) -> Any:
        e = os.environ if env is None else env
        known = {f.alias for f in cls.model_fields.values() if f.alias}
        given = {k: v for k, v in e.items() if k in known and (v.strip() or k in cls.EMPTY_IS_A_VALUE)}
        try:
            return cls.model_validate(given)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            variable = str(first["loc"][0]) if first["loc"] else "environment"
            problem = str(first["msg"]).removeprefix("Value error, ")
            if variable in given:
                problem += f", got {given[variable]!r}"
            raise SettingsError(variable=variable, problem=problem) from None


def _f(name: str, default: Any, **bounds: Any) -> Any:
    return pydantic.Field(default, alias=name, **bounds)


class _OperatorEnv(_Env):
    EMPTY_IS_A_VALUE: ClassVar[frozenset[str]] = frozenset({"BATON_PROBE_ALLOWED_CIDRS"})

    identity: str | None = _f("BATON_INSTANCE_ID", None)
    namespaces: Names = _f("BATON_NAMESPACES", ())
    metrics_bind: BindField = _f("BATON_METRICS_BIND", ("", 8080))
    health_bind: BindField = _f("BATON_HEALTH_BIND", ("", 8081))
    lease_seconds: int = _f("BATON_LEASE_SECONDS", 15, ge=3, le=300)
    backoff_base_seconds: float = _f("BATON_BACKOFF_BASE_SECONDS", 5.0, gt=0, le=3600, allow_inf_nan=False)
    shutdown_grace_seconds: Seconds = _f("BATON_SHUTDOWN_GRACE_SECONDS", 25.0)
    probe_allowed: Networks = _f("BATON_PROBE_ALLOWED_CIDRS", "0.0.0.0/0,::/0", validate_default=True)
    log_level: LogLevel = _f("BATON_LOG_LEVEL", "INFO")
    probe_concurrency: int = _f("BATON_PROBE_CONCURRENCY", 64, ge=1, le=1024)
    workers: int = _f("BATON_WORKERS", 8, ge=1, le=256)
    watch_configmaps: bool = _f("BATON_WATCH_CONFIGMAPS", True)
    watch_secrets: bool = _f("BATON_WATCH_SECRETS", True)
    resync_seconds: int = _f("BATON_RESYNC_SECONDS", 300, ge=5, le=86400)
    system_namespace: str = _f("BATON_SYSTEM_NAMESPACE", "default")
    digest_key_file: str = _f("BATON_DIGEST_KEY_FILE", "")
    shard_ranges: int = _f("BATON_SHARD_RANGES", 0, ge=0)
    gateway_admin_key_file: str = _f("BATON_GATEWAY_ADMIN_KEY_FILE", "")
    isolate_tool_pods: bool = _f("BATON_ISOLATE_TOOL_PODS", False)
    operator_pod_labels: Labels = _f("BATON_OPERATOR_POD_LABELS", ())
    image: str = _f("BATON_IMAGE", "", max_length=4096, pattern=r"^[^\s]*$")

    @pydantic.field_validator("shard_ranges")
    @classmethod
    def _whole_buckets(cls, value: int) -> int:
        # Each range must be a whole set of the objects' hash-bucket labels (baton.sharding).
        if not ranges.valid_count(value):
            raise ValueError(f"must be 0 (off) or a power of two up to {ranges.MAX_RANGES}")
        return value


@dataclasses.dataclass(frozen=True)
class Settings:
    identity: str
    namespaces: tuple[str, ...]  # empty: all namespaces
    metrics_bind: Bind
    health_bind: Bind
    lease_seconds: int
    backoff_base_seconds: float
    shutdown_grace_seconds: float
    probe_allowed: tuple[Network, ...]
    log_level: str
    # Drain probes in flight at once (async sockets, apart from Lease renewals).
    probe_concurrency: int = 64
    # Runtimes acted on at once (workers of the queue); each pass is a few API calls.
    workers: int = 8
    # Watch ConfigMaps/Secrets for config-ref rolls; off where RBAC grants no access to them.
    watch_configmaps: bool = True
    watch_secrets: bool = True
    # Every runtime gets a pass at least this often, spread over the period: the wake-up of last
    # resort for what no watch event reports (a pod whose labels were edited away going, a
    # foreign object removed).
    resync_seconds: int = 300
    # Where the gateway replicas register their Leases (the chart's release namespace).
    system_namespace: str = "default"
    # The file holding the installation's digest key (the chart mounts its Secret there): every
    # digest of referenced ConfigMap/Secret data is an HMAC under it. Required at startup.
    digest_key_file: str = ""
    # Sharding: the runtimes' hash space cut into this many ranges, held by the replicas through
    # Leases in system_namespace (baton.sharding). 0: off, every replica tries every runtime.
    shard_ranges: int = 0
    # The file holding the gateway admin key (the chart mounts its Secret there): presented to the
    # gateway replicas' admin API. Unset: seals go without it, and a gateway refuses them (401).
    gateway_admin_key_file: str = ""
    # spec.service.gateway runtimes get a NetworkPolicy admitting only the gateway's pods and the
    # operator's own (drain probes) to their pods (docs/gateway.md, "Closing the direct path");
    # operator_pod_labels: the operator pods' labels (the chart's selector labels), required then.
    isolate_tool_pods: bool = False
    operator_pod_labels: tuple[tuple[str, str], ...] = ()
    # Baton's own image (the chart sets it): a stdio runtime's pod copies the bridge from it
    # (docs/stdio.md). Unset: stdio runtimes are not started (Degraded InvalidSpec says why).
    image: str = ""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        """Raises SettingsError naming the first bad variable."""
        parsed = _OperatorEnv.read(env)
        fields = parsed.model_dump()
        fields["identity"] = parsed.identity or _default_identity()
        fields["system_namespace"] = parsed.system_namespace.strip() or "default"
        fields["digest_key_file"] = parsed.digest_key_file.strip()
        fields["gateway_admin_key_file"] = parsed.gateway_admin_key_file.strip()
        fields["image"] = parsed.image.strip()
        if parsed.isolate_tool_pods and not parsed.operator_pod_labels:
            # Without them the policy would shut the operator's drain probes out of the pods.
            raise SettingsError(variable="BATON_OPERATOR_POD_LABELS",
                                problem="required when BATON_ISOLATE_TOOL_PODS is true (the operator pods' labels, key=value,...)")
        return cls(**fields)


# Pod networks are private ranges in practice; loopback, link-local (the cloud metadata service)
# and public addresses are never dialled unless BATON_GATEWAY_ALLOWED_CIDRS says so.
GATEWAY_DEFAULT_CIDRS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fd00::/8"


class _GatewayEnv(_Env):
    EMPTY_IS_A_VALUE: ClassVar[frozenset[str]] = frozenset({"BATON_GATEWAY_ALLOWED_CIDRS"})

    identity: str | None = _f("BATON_INSTANCE_ID", None)
    system_namespace: str = _f("BATON_SYSTEM_NAMESPACE", "default")
    namespaces: Names = _f("BATON_NAMESPACES", ())
    bind: BindField = _f("BATON_GATEWAY_BIND", ("", 8000))
    admin_bind: BindField = _f("BATON_GATEWAY_ADMIN_BIND", ("", 8082))
    admin_address: str | None = _f("BATON_GATEWAY_ADMIN_ADDRESS", None)
    pod_ip: str | None = _f("POD_IP", None)
    metrics_bind: BindField = _f("BATON_METRICS_BIND", ("", 8080))
    health_bind: BindField = _f("BATON_HEALTH_BIND", ("", 8081))
    allowed: Networks = _f("BATON_GATEWAY_ALLOWED_CIDRS", GATEWAY_DEFAULT_CIDRS, validate_default=True)
    lease_seconds: int = _f("BATON_GATEWAY_LEASE_SECONDS", 15, ge=3, le=300)
    cluster_domain: str = _f("BATON_CLUSTER_DOMAIN", "cluster.local")
    shutdown_grace_seconds: Seconds = _f("BATON_SHUTDOWN_GRACE_SECONDS", 25.0)
    log_level: LogLevel = _f("BATON_LOG_LEVEL", "INFO")
    max_held_per_runtime: int = _f("BATON_GATEWAY_MAX_HELD", 1000, ge=1, le=100000)
    max_held_body_bytes: int = _f("BATON_GATEWAY_MAX_HELD_BODY_BYTES", 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_held_total: int = _f("BATON_GATEWAY_MAX_HELD_TOTAL", 4000, ge=1, le=1000000)
    max_buffered_bytes: int = _f("BATON_GATEWAY_MAX_BUFFERED_BYTES", 64 * 1024 * 1024, ge=64 * 1024, le=16 * 1024 ** 3)
    max_held_bytes_per_runtime: int = _f("BATON_GATEWAY_MAX_HELD_BYTES_PER_RUNTIME", 16 * 1024 * 1024, ge=1024, le=16 * 1024 ** 3)
    max_connections: int = _f("BATON_GATEWAY_MAX_CONNECTIONS", 4096, ge=1, le=1000000)
    max_connections_per_client: int = _f("BATON_GATEWAY_MAX_CONNECTIONS_PER_CLIENT", 1024, ge=1, le=1000000)
    body_timeout_seconds: int = _f("BATON_GATEWAY_BODY_SECONDS", 30, ge=1, le=3600)
    max_upstream_connections: int = _f("BATON_GATEWAY_MAX_UPSTREAM_CONNECTIONS", 4096, ge=1, le=1000000)
    max_upstream_per_pod: int = _f("BATON_GATEWAY_MAX_UPSTREAM_PER_POD", 512, ge=1, le=1000000)
    stream_idle_seconds: float = _f("BATON_GATEWAY_STREAM_IDLE_SECONDS", 2.0, ge=0.1, le=3600)
    idle_timeout_seconds: int = _f("BATON_GATEWAY_IDLE_SECONDS", 300, ge=1, le=86400)
    header_timeout_seconds: int = _f("BATON_GATEWAY_HEADER_SECONDS", 10, ge=1, le=300)
    admin_key_file: str = _f("BATON_GATEWAY_ADMIN_KEY_FILE", "")
    static_seconds: int = _f("BATON_GATEWAY_STATIC_SECONDS", 120, ge=0, le=600)


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    """`python -m baton gateway` (DESIGN.md, "Gateway")."""

    identity: str
    system_namespace: str  # where the registration Lease lives
    namespaces: tuple[str, ...]  # watched for ToolRuntimes and pods; empty: all
    bind: Bind  # calls
    admin_bind: Bind  # the operator's seal and in-flight calls
    admin_address: str  # host:port the operator dials (the Lease's annotation)
    metrics_bind: Bind
    health_bind: Bind
    allowed: tuple[Network, ...]
    lease_seconds: int
    cluster_domain: str
    shutdown_grace_seconds: float
    log_level: str
    # Bounds: calls held per runtime, bytes of one held call's body, the upstream connect and
    # idle (no byte either way) timeouts.
    max_held_per_runtime: int = 1000
    max_held_body_bytes: int = 1024 * 1024
    # The whole gateway: calls held over all runtimes; bytes of request bodies kept in memory at
    # once (held calls' bodies, and small bodies read whole before they are forwarded); client
    # connections open, in all and per client address; the total time to receive a body that is
    # read whole (a held call's: also within its admissionSeconds).
    max_held_total: int = 4000
    max_buffered_bytes: int = 64 * 1024 * 1024
    max_held_bytes_per_runtime: int = 16 * 1024 * 1024  # held bodies of one runtime
    max_connections: int = 4096
    max_connections_per_client: int = 1024
    body_timeout_seconds: float = 30.0
    # Connections to pods, in all and per pod, on each of the two upstream clients (whole-body
    # calls; streamed uploads, HEAD and WebSockets): one runtime's streams or slow calls cannot
    # take another's. Waiting for a place is bounded (UPSTREAM_WAIT_SECONDS), then 503 Overloaded.
    max_upstream_connections: int = 4096
    max_upstream_per_pod: int = 512
    # At the seal, an open stream to the sealed pod (a GET event stream, a WebSocket) that carried
    # nothing for this long is ended, so its client reconnects to the next generation.
    stream_idle_seconds: float = 2.0
    connect_timeout_seconds: float = 3.0
    idle_timeout_seconds: float = 300.0
    # A connection's first request head (request line and headers) must arrive within this
    # (slowloris: a client dribbling its headers holds a connection no longer).
    header_timeout_seconds: float = 10.0
    # The file holding the admin key every admin request must present (required at startup).
    admin_key_file: str = ""
    # Fail static (docs/gateway.md, "When the API server is away"): how long past the end of its
    # registration a replica that cannot renew keeps forwarding to runtimes in steady state (0: it
    # stops at once, as before). Announced in its Lease, so the operator keeps asking it that long.
    static_seconds: int = 0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "GatewaySettings":
        """Raises SettingsError naming the first bad variable."""
        p = _GatewayEnv.read(env)
        host = p.admin_bind[0]
        if host in ("0.0.0.0", "::", ""):
            host = p.pod_ip or socket.gethostname()
        return cls(
            identity=p.identity or _default_identity(),
            system_namespace=p.system_namespace,
            namespaces=p.namespaces,
            bind=p.bind,
            admin_bind=p.admin_bind,
            admin_address=p.admin_address or format_address(host, p.admin_bind[1]),
            metrics_bind=p.metrics_bind,
            health_bind=p.health_bind,
            allowed=p.allowed,
            lease_seconds=p.lease_seconds,
            cluster_domain=p.cluster_domain.strip("."),
            shutdown_grace_seconds=p.shutdown_grace_seconds,
            log_level=p.log_level,
            max_held_per_runtime=p.max_held_per_runtime,
            max_held_body_bytes=p.max_held_body_bytes,
            max_held_total=p.max_held_total,
            max_buffered_bytes=p.max_buffered_bytes,
            max_held_bytes_per_runtime=p.max_held_bytes_per_runtime,
            max_connections=p.max_connections,
            max_connections_per_client=p.max_connections_per_client,
            body_timeout_seconds=float(p.body_timeout_seconds),
            max_upstream_connections=p.max_upstream_connections,
            max_upstream_per_pod=p.max_upstream_per_pod,
            stream_idle_seconds=float(p.stream_idle_seconds),
            idle_timeout_seconds=float(p.idle_timeout_seconds),
            header_timeout_seconds=float(p.header_timeout_seconds),
            admin_key_file=p.admin_key_file.strip(),
            static_seconds=p.static_seconds,
        )
