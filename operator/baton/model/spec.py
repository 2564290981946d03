"""ToolRuntime spec, as admitted by the CRD (defaults already applied by the API server)."""

from __future__ import annotations

import enum
from typing import Any

import pydantic

from baton.model import base


class OnCleanupFailure(str, enum.Enum):
    HOLD = "Hold"
    FORCE = "Force"


class HandoffPolicy(str, enum.Enum):
    """When a change of the template (or of its referenced config) hands off."""

    IMMEDIATE = "Immediate"  # at once (the default)
    WHEN_IDLE = "WhenIdle"  # when the drain probe says idle, at most budgets.pendingSeconds later
    MANUAL = "Manual"  # only on a reset naming the current generation


class Budgets(base.Model):
    lock_seconds: int = 10
    connect_seconds: int = 60
    drain_seconds: int = 30
    termination_grace_seconds: int = 30
    cleanup_seconds: int = 60
    pending_seconds: int = 600  # WhenIdle: longest wait for idle before handing off anyway
    pin_seconds: int = 600  # longest wait for pins to resolve before RetirementBlocked
    admission_seconds: int = 60  # gateway only: longest wait of one held call for a serving generation


class ServicePort(base.Model):
    name: str | None = None
    port: int
    target_port: int | str | None = None
    protocol: str = "TCP"


class ServiceClients(base.Model):
    """Who may call through the gateway besides pods of the runtime's own namespace (the gateway
    reads it from the raw object: baton.gateway.clients.client_allowed; docs/gateway.md)."""

    namespaces: tuple[str, ...] = ()  # "*" alone: pods of any namespace
    cidrs: tuple[str, ...] = ()  # callers that are not pods (nodes, host-network ingress, outside)


class ServiceSpec(base.Model):
    ports: tuple[ServicePort, ...]
    session_affinity: str = "ClientIP"
    gateway: bool = False  # routed through the Baton gateway (DESIGN.md, "Gateway")
    clients: ServiceClients = pydantic.Field(default_factory=ServiceClients)
    # Handshake-era MCP sessions at a handoff: Rebind (replayed on the serving generation by the
    # gateway) or Expire (404); the gateway reads it from the raw object (baton.gateway.sessions).
    sessions: str = "Rebind"


class HttpGet(base.Model):
    path: str = "/"
    port: int | str
    scheme: str = "HTTP"


class DrainProbe(base.Model):
    http_get: HttpGet
    period_seconds: int = 1
    timeout_seconds: int = 1


class Drain(base.Model):
    probe: DrainProbe | None = None


class Recovery(base.Model):
    on_cleanup_failure: OnCleanupFailure = OnCleanupFailure.HOLD


class Handoff(base.Model):
    policy: HandoffPolicy = HandoffPolicy.IMMEDIATE


class ToolRuntimeSpec(base.Model):
    # The pod template stays a plain dict: it is the user's PodTemplateSpec, copied verbatim.
    template: dict[str, Any]
    service: ServiceSpec | None = None
    budgets: Budgets = pydantic.Field(default_factory=Budgets)
    drain: Drain = pydantic.Field(default_factory=Drain)
    recovery: Recovery = pydantic.Field(default_factory=Recovery)
    handoff: Handoff = pydantic.Field(default_factory=Handoff)
    suspend: bool = False
