"""The drain probe: HTTP GET against the retiring pod; 200 means it is idle. Does network I/O."""

from __future__ import annotations

import ipaddress
import logging
import urllib.error
import urllib.request
from typing import Any

from baton.model import spec as spec_model

log = logging.getLogger("baton.drainprobe")
_refused_ips: set[str] = set()


def resolve_port(pod: dict[str, Any], port: int | str) -> int | None:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
    return None


def probe_idle(
    pod: dict[str, Any],
    probe: spec_model.DrainProbe,
    allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
) -> bool:
    ip = (pod.get("status") or {}).get("podIP")
    port = resolve_port(pod, probe.http_get.port)
    if not ip or port is None:
        return False
    addr = ipaddress.ip_address(ip)
    if not any(addr in net for net in allowed):
        # Operators configured not to dial this range (tests: loopback only). Said once per IP.
        if ip not in _refused_ips:
            _refused_ips.add(ip)
            log.warning("drain probe not sent: pod IP %s is outside BATON_PROBE_ALLOWED_CIDRS", ip)
        return False
    host = f"[{ip}]" if addr.version == 6 else ip
    url = f"http://{host}:{port}{probe.http_get.path}"
    try:
        with urllib.request.urlopen(url, timeout=probe.timeout_seconds) as resp:  # noqa: S310 (http only)
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False
