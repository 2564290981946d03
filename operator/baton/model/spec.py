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


class Idle(base.Model):
    """spec.idle (needs spec.service.gateway): retire the generation after `after_seconds` without
    a call that counts (the gateway counts), start nothing; wake on a held call (wake_on_request)
    or on `kubectl baton wake`, Ready within `wake_seconds` or retired again with a back-off."""

    after_seconds: int = 900
    wake_on_request: bool = True
    wake_seconds: int = 45  # below the TypeScript SDK's 60 s request timeout


class HookFailurePolicy(str, enum.Enum):
    FAIL = "Fail"  # a failed hook holds the step (preRetire: CleanupFailed/HookFailed; postReady: Degraded)
    IGNORE = "Ignore"  # a failed hook is recorded and the step goes on


class HttpPost(base.Model):
    path: str = "/"
    port: int | str


class HookGate(base.Model):
    """preRetire only: the retire waits until the ToolRuntime's annotation `annotation` equals the
    retiring generation's number, at most `timeout_seconds` (then the failure policy applies)."""

    annotation: str
    timeout_seconds: int = 600


class Hook(base.Model):
    """One hook (docs/hooks.md): an HTTP POST to the generation's own pod, and (preRetire) a gate."""

    http_post: HttpPost | None = None
    timeout_seconds: int = 20
    failure_policy: HookFailurePolicy = HookFailurePolicy.FAIL
    gate: HookGate | None = None


class Hooks(base.Model):
    pre_retire: Hook | None = None  # after the drain, before the old pod's delete
    post_ready: Hook | None = None  # after the new pod is Ready, before it is labelled serving


# The bridge's endpoints beside spec.stdio.path (its contract, docs/stdio.md): reserved.
BRIDGE_READY_PATH = "/baton/ready"  # 200 once the child answered the bridge's initialize
BRIDGE_DRAIN_PATH = "/baton/drain"  # 200 when no call is in flight, else 503


class Stdio(base.Model):
    """spec.stdio: the container `container` runs an unmodified stdio MCP server (`command` +
    `args`) behind Baton's bridge, which serves it over streamable HTTP on `port` at `path`."""

    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    container: str | None = None  # None: the template's first container
    port: int = 8080
    path: str = "/mcp"
    eof_seconds: int = 5  # after closing the child's stdin, before SIGTERM
    term_seconds: int = 5  # after SIGTERM, before SIGKILL


class ToolRuntimeSpec(base.Model):
    # The pod template stays a plain dict: it is the user's PodTemplateSpec, copied verbatim.
    template: dict[str, Any]
    service: ServiceSpec | None = None
    budgets: Budgets = pydantic.Field(default_factory=Budgets)
    drain: Drain = pydantic.Field(default_factory=Drain)
    recovery: Recovery = pydantic.Field(default_factory=Recovery)
    handoff: Handoff = pydantic.Field(default_factory=Handoff)
    suspend: bool = False
    idle: Idle | None = None  # None: never idled
    stdio: Stdio | None = None
    hooks: Hooks = pydantic.Field(default_factory=Hooks)

    @pydantic.model_validator(mode="before")
    @classmethod
    def _stdio_drains_by_the_bridge(cls, data: Any) -> Any:
        # A stdio runtime's bridge counts the calls in flight: unless the user named a drain probe,
        # the drain (and WhenIdle) asks the bridge's GET /baton/drain on its port.
        if not isinstance(data, dict) or not isinstance(data.get("stdio"), dict):
            return data
        drain = data.get("drain")
        drain = dict(drain) if isinstance(drain, dict) else {}
        if drain.get("probe") is not None:
            return data
        port = data["stdio"].get("port", Stdio.model_fields["port"].default)
        drain["probe"] = {"httpGet": {"path": BRIDGE_DRAIN_PATH, "port": port}}
        return {**data, "drain": drain}

    @pydantic.model_validator(mode="after")
    def _stdio_fits_the_template(self) -> "ToolRuntimeSpec":
        # What the CRD cannot check in CEL within its cost budget (the template's lists have no
        # bound): refused here, so the runtime says it (Degraded InvalidSpec) and starts nothing.
        problem = stdio_problem(self.template, self.stdio) if self.stdio is not None else None
        if problem is not None:
            raise ValueError(problem)
        return self


# Names Baton gives its own parts of a stdio runtime's pod (baton.lifecycle.manifests).
BRIDGE_VOLUME = "baton-bridge"
BRIDGE_INIT_CONTAINER = "baton-bridge-install"
BRIDGE_MOUNT = "/baton"
BRIDGE_PORT_NAME = "mcp"


def stdio_problem(template: dict[str, Any], stdio: Stdio) -> str | None:
    """Why the pod template cannot take spec.stdio's bridge, naming the field; None if it can."""
    raw = template.get("spec")
    pod: dict[str, Any] = raw if isinstance(raw, dict) else {}
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    if not containers:
        return "spec.stdio needs a container in spec.template.spec.containers"
    if stdio.container is None:
        chosen = containers[0]
    else:
        found = [c for c in containers if c.get("name") == stdio.container]
        if not found:
            return f"spec.stdio.container {stdio.container!r} names no container of spec.template.spec.containers"
        chosen = found[0]
    where = f"spec.template.spec.containers[name={chosen.get('name')!r}]"
    if chosen.get("command") or chosen.get("args"):
        return f"spec.stdio.command replaces the stdio container's command and args: leave {where}.command and .args unset"
    if chosen.get("readinessProbe"):
        return (f"spec.stdio: {where}.readinessProbe must be unset: the bridge's (GET {BRIDGE_READY_PATH}) says Ready "
                "once the child answered initialize")
    for m in chosen.get("volumeMounts") or []:
        if isinstance(m, dict) and str(m.get("mountPath") or "").rstrip("/") == BRIDGE_MOUNT:
            return f"spec.stdio: {where}.volumeMounts mounts {m.get('mountPath')!r}, where the bridge is mounted"
    for c in containers:
        for p in c.get("ports") or []:
            if not isinstance(p, dict):
                continue
            if p.get("containerPort") == stdio.port:
                return (f"spec.stdio.port {stdio.port} is the bridge's: container {c.get('name')!r} declares it too "
                        "in spec.template.spec.containers; choose another spec.stdio.port")
            if p.get("name") == BRIDGE_PORT_NAME:
                return (f"spec.stdio: container {c.get('name')!r} declares a port named {BRIDGE_PORT_NAME!r}, the "
                        "bridge's port name; rename it in spec.template.spec.containers")
    if any(isinstance(v, dict) and v.get("name") == BRIDGE_VOLUME for v in pod.get("volumes") or []):
        return f"spec.stdio: the volume name {BRIDGE_VOLUME!r} is Baton's; rename yours in spec.template.spec.volumes"
    if any(isinstance(c, dict) and c.get("name") == BRIDGE_INIT_CONTAINER for c in pod.get("initContainers") or []):
        return (f"spec.stdio: the init container name {BRIDGE_INIT_CONTAINER!r} is Baton's; rename yours in "
                "spec.template.spec.initContainers")
    return None
