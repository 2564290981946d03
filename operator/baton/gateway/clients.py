"""Who may call a runtime through the gateway (tenant isolation; docs/gateway.md, "Who may
call"): the caller's address from the TCP peer, the addresses a pod is known by, a bare Host in
the caller's namespace, and the rule of spec.service.clients. Pure: no I/O.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any, Mapping

from baton.gateway import route

# The caller is judged by the TCP peer's address, never by a header: the gateway's view maps
# pod IPs to namespaces (`client_addresses` is what it keeps of each pod).
ANY_NAMESPACE = "*"


def client_addresses(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The addresses that identify `pod` as a caller: its pod IPs, unless it shares its node's
    network (hostNetwork: the node's IP, shared by every such pod and the node itself, so it
    names no namespace) or has ended (Succeeded/Failed: its IP may already be another pod's)."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return ()
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return ()
    ips = [str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")]
    if not ips and status.get("podIP"):
        ips = [str(status["podIP"])]
    return tuple(dict.fromkeys(ips))


def peer_ip(peername: Any) -> str:
    """The caller's address from the transport's peername ((host, port, ...) tuple): an
    IPv4-mapped IPv6 address (a dual-stack listener) as the IPv4 address pods are listed by;
    "" when there is none (a Unix socket, a closed transport)."""
    if not isinstance(peername, (tuple, list)) or not peername or not isinstance(peername[0], str):
        return ""
    return _peer_text(peername[0])


@functools.lru_cache(maxsize=4096)
def _peer_text(host: str) -> str:
    """peer_ip's text for one transport host, once per address (not on every call)."""
    addr = route.address_of(host.split("%", 1)[0])
    if addr is None:
        return ""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


@functools.lru_cache(maxsize=1024)
def _networks(cidrs: tuple[str, ...]) -> tuple[route.Network, ...]:
    """Parsed once per distinct list (admission validated them; one that does not parse here
    admits nothing)."""
    out: list[route.Network] = []
    for text in cidrs:
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return tuple(out)


def short_host(host: str, *, client_namespace: str | None) -> route.Target | None:
    """A bare `<runtime>[:port]` Host (an in-namespace client dialling the Service's short name)
    resolved against the caller's namespace, as the caller's DNS search path resolved it. None:
    not a bare name, or the caller is no pod the gateway knows (it has no namespace)."""
    if client_namespace is None or not host:
        return None
    name, colon, port_text = host.strip().lower().partition(":")
    name = name.rstrip(".")
    if not name or "." in name:
        return None  # a qualified name (route.parse_host's), an IP literal
    return route.parse_host(f"{name}.{client_namespace}" + (f":{port_text}" if colon else ""), cluster_domain="")


def client_allowed(runtime: Mapping[str, Any] | None, *, client_namespace: str | None,
                   client_ip: str) -> route.Refuse | None:
    """Whether a caller may call `runtime` through the gateway: None if it may, else the
    refusal (403 ClientNotAllowed). Admitted: a pod of the runtime's own namespace, a pod of a
    namespace in spec.service.clients.namespaces ("*": any namespace), and an address at which
    no pod is known (`client_namespace` None: a node, an ingress on the host network, a caller
    outside the cluster) inside spec.service.clients.cidrs. A pod's address is judged by its
    namespace only: `cidrs` never admits pods, so a range written for the nodes cannot admit
    every pod of an overlapping pod network. A runtime the gateway does not serve (absent,
    gateway off): None, decide() refuses it as UnknownRuntime."""
    if runtime is None:
        return None
    service = (runtime.get("spec") or {}).get("service") or {}
    if not service.get("gateway"):
        return None
    meta = runtime.get("metadata") or {}
    own = str(meta.get("namespace") or "")
    if client_namespace is not None and client_namespace == own:
        return None  # the common case, decided before anything is built
    clients = service.get("clients") or {}
    namespaces = [str(n) for n in clients.get("namespaces") or [] if isinstance(n, str)]
    cidrs = tuple(str(c) for c in clients.get("cidrs") or [] if isinstance(c, str))
    if client_namespace is not None:
        if client_namespace == own or client_namespace in namespaces or ANY_NAMESPACE in namespaces:
            return None
        who = f"a pod of namespace {client_namespace}"
        how = f"add {client_namespace!r} to spec.service.clients.namespaces"
    else:
        if client_ip and _in_cidrs(client_ip, cidrs):
            return None
        who = "an address at which no pod is known"
        how = "add its range to spec.service.clients.cidrs (callers that are not pods)"
    allowed = ", ".join([f"pods of namespace {own}"] + [
        "pods of any namespace" if n == ANY_NAMESPACE else f"pods of namespace {n}" for n in namespaces if n != own]
        + [f"non-pod addresses in {c}" for c in cidrs])
    return route.Refuse(route.Reason.CLIENT_NOT_ALLOWED, 0,
                  f"the caller at {client_ip or '(unknown address)'} is {who}; {own}/{meta.get('name')} admits "
                  f"{allowed} (spec.service.clients): {how} to allow it")


@functools.lru_cache(maxsize=4096)
def _in_cidrs(ip: str, cidrs: tuple[str, ...]) -> bool:
    """Whether `ip` lies in one of `cidrs`, once per (address, list): asked on every call of a
    caller that is no pod."""
    return route.in_networks(ip, _networks(cidrs))


