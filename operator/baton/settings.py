"""Operator settings from the environment (the Helm chart sets these)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket


def _default_identity() -> str:
    pod = os.environ.get("POD_NAME")
    return pod or f"{socket.gethostname()}-{os.getpid()}"


def _bind(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host or "0.0.0.0", int(port))


def _flag(env: dict[str, str], name: str, default: bool = True) -> bool:
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{name} must be true or false, got {text!r}")


def _bounded(env: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = env.get(name) or str(default)
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number in {low}..{high}, got {text!r}") from None
    if not low <= n <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {n}")
    return n


@dataclasses.dataclass(frozen=True)
class Settings:
    identity: str
    namespaces: tuple[str, ...]  # empty: all namespaces
    metrics_bind: tuple[str, int]
    health_bind: tuple[str, int]
    lease_seconds: int
    backoff_base_seconds: float
    shutdown_grace_seconds: float
    probe_allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
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

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        e = dict(os.environ if env is None else env)
        namespaces = tuple(n.strip() for n in e.get("BATON_NAMESPACES", "").split(",") if n.strip())
        allowed = tuple(
            ipaddress.ip_network(c.strip(), strict=False)
            for c in e.get("BATON_PROBE_ALLOWED_CIDRS", "0.0.0.0/0,::/0").split(",")
            if c.strip()
        )
        lease_seconds = int(e.get("BATON_LEASE_SECONDS", "15"))
        if not 3 <= lease_seconds <= 300:
            raise ValueError(f"BATON_LEASE_SECONDS must be in 3..300, got {lease_seconds}")
        return cls(
            identity=e.get("BATON_INSTANCE_ID") or _default_identity(),
            namespaces=namespaces,
            metrics_bind=_bind(e.get("BATON_METRICS_BIND", "0.0.0.0:8080")),
            health_bind=_bind(e.get("BATON_HEALTH_BIND", "0.0.0.0:8081")),
            lease_seconds=lease_seconds,
            backoff_base_seconds=float(e.get("BATON_BACKOFF_BASE_SECONDS", "5")),
            shutdown_grace_seconds=float(e.get("BATON_SHUTDOWN_GRACE_SECONDS", "25")),
            probe_allowed=allowed,
            log_level=e.get("BATON_LOG_LEVEL", "INFO").upper(),
            probe_concurrency=_bounded(e, "BATON_PROBE_CONCURRENCY", 64, 1, 1024),
            workers=_bounded(e, "BATON_WORKERS", 8, 1, 256),
            watch_configmaps=_flag(e, "BATON_WATCH_CONFIGMAPS"),
            watch_secrets=_flag(e, "BATON_WATCH_SECRETS"),
            resync_seconds=_bounded(e, "BATON_RESYNC_SECONDS", 300, 5, 86400),
            system_namespace=e.get("BATON_SYSTEM_NAMESPACE", "").strip() or "default",
            digest_key_file=e.get("BATON_DIGEST_KEY_FILE", "").strip(),
            shard_ranges=_bounded(e, "BATON_SHARD_RANGES", 0, 0, 1024),
        )


# Pod networks are private ranges in practice; loopback, link-local (the cloud metadata service)
# and public addresses are never dialled unless BATON_GATEWAY_ALLOWED_CIDRS says so.
GATEWAY_DEFAULT_CIDRS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fd00::/8"


def _networks(text: str, name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    try:
        return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in text.split(",") if c.strip())
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    """`python -m baton gateway` (DESIGN.md, "Gateway")."""

    identity: str
    system_namespace: str  # where the registration Lease lives
    namespaces: tuple[str, ...]  # watched for ToolRuntimes and pods; empty: all
    bind: tuple[str, int]  # calls
    admin_bind: tuple[str, int]  # the operator's seal and in-flight calls
    admin_address: str  # host:port the operator dials (the Lease's annotation)
    metrics_bind: tuple[str, int]
    health_bind: tuple[str, int]
    allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    lease_seconds: int
    cluster_domain: str
    shutdown_grace_seconds: float
    log_level: str
    # Bounds: calls held per runtime, bytes of one held call's body, the upstream connect and
    # idle (no byte either way) timeouts.
    max_held_per_runtime: int = 1000
    max_held_body_bytes: int = 1024 * 1024
    connect_timeout_seconds: float = 3.0
    idle_timeout_seconds: float = 300.0
    # A connection's first request head (request line and headers) must arrive within this
    # (slowloris: a client dribbling its headers holds a connection no longer).
    header_timeout_seconds: float = 10.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "GatewaySettings":
        e = dict(os.environ if env is None else env)
        admin_bind = _bind(e.get("BATON_GATEWAY_ADMIN_BIND", "0.0.0.0:8082"))
        host = admin_bind[0]
        if host in ("0.0.0.0", "::", ""):
            host = e.get("POD_IP") or socket.gethostname()
        return cls(
            identity=e.get("BATON_INSTANCE_ID") or _default_identity(),
            system_namespace=e.get("BATON_SYSTEM_NAMESPACE") or "default",
            namespaces=tuple(n.strip() for n in e.get("BATON_NAMESPACES", "").split(",") if n.strip()),
            bind=_bind(e.get("BATON_GATEWAY_BIND", "0.0.0.0:8000")),
            admin_bind=admin_bind,
            admin_address=e.get("BATON_GATEWAY_ADMIN_ADDRESS") or f"{host}:{admin_bind[1]}",
            metrics_bind=_bind(e.get("BATON_METRICS_BIND", "0.0.0.0:8080")),
            health_bind=_bind(e.get("BATON_HEALTH_BIND", "0.0.0.0:8081")),
            allowed=_networks(e.get("BATON_GATEWAY_ALLOWED_CIDRS", GATEWAY_DEFAULT_CIDRS), "BATON_GATEWAY_ALLOWED_CIDRS"),
            lease_seconds=_bounded(e, "BATON_GATEWAY_LEASE_SECONDS", 15, 3, 300),
            cluster_domain=(e.get("BATON_CLUSTER_DOMAIN") or "cluster.local").strip("."),
            shutdown_grace_seconds=float(e.get("BATON_SHUTDOWN_GRACE_SECONDS", "25")),
            log_level=e.get("BATON_LOG_LEVEL", "INFO").upper(),
            max_held_per_runtime=_bounded(e, "BATON_GATEWAY_MAX_HELD", 1000, 1, 100000),
            max_held_body_bytes=_bounded(e, "BATON_GATEWAY_MAX_HELD_BODY_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024),
            idle_timeout_seconds=float(_bounded(e, "BATON_GATEWAY_IDLE_SECONDS", 300, 1, 86400)),
            header_timeout_seconds=float(_bounded(e, "BATON_GATEWAY_HEADER_SECONDS", 10, 1, 300)),
        )
