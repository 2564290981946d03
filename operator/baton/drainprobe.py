"""The drain probe: one HTTP GET against the retiring pod's own IP; 200 means idle. Does network I/O.

The rules (docs/design.md, "Pods and Service"), each because a tool may misbehave:
- it dials only the pod's own IP, and only inside the allowed CIDRs;
- it follows no redirect (a 3xx is "not idle"; nothing else is ever dialled);
- one total deadline (timeoutSeconds) covers connect, send and read, so a pod that trickles
  bytes holds nothing longer than that;
- it reads at most MAX_RESPONSE_BYTES (the status line is all it needs);
- any error counts as "not idle" and is returned as text for the transition's message;
- it runs on the event loop (no thread per probe), apart from the Lease renewals and outside
  the controller's workers: baton.probing's Probes runner calls it, at most
  BATON_PROBE_CONCURRENCY at once and one per runtime, and only for the Lease holder.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import re
from typing import Any

from baton import metrics
from baton.model import names
from baton.model import spec as spec_model

log = logging.getLogger("baton.drainprobe")

MAX_RESPONSE_BYTES = 4096
# Answers that say the path or method does not exist on the tool: the probe is misconfigured.
MISCONFIGURED_CODES = (404, 405, 501)
# Pod IPs whose refusal (outside the allowed CIDRs) was already logged; a bound, not a history.
REFUSED_IPS_REMEMBERED = 1024
_STATUS_LINE = re.compile(rb"^HTTP/1\.[01] (\d{3})(?: .*)?\r?\n$")
# The CRD admits only paths that start with "/" and hold no whitespace; checked again here,
# because a request line is built from it.
_PATH = re.compile(r"^/[\x21-\x7e]*$")


@dataclasses.dataclass(frozen=True)
class Result:
    idle: bool
    error: str | None = None  # why it does not count as idle, when not a plain non-200 answer
    # The tool has no such endpoint (404, 405, 501): a misconfigured probe, not a busy tool.
    misconfigured: bool = False


def _valid_port(value: object) -> int | None:
    # bool is an int subclass; a container port from the pod is untrusted input too.
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
        return value
    return None


def resolve_port(pod: dict[str, Any], port: int | str) -> int | None:
    """The TCP port the probe dials, or None when `port` names no usable port of the pod.

    An integer (or an ASCII-digit string, as older objects may hold) must lie in 1..65535; a
    name is looked up in the pod's container ports. The CRD refuses the rest at admission;
    objects stored before that rule existed still reach here.
    """
    if isinstance(port, int) and not isinstance(port, bool):
        return _valid_port(port)
    if isinstance(port, str) and port.isascii() and port.isdigit():
        return _valid_port(int(port))
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == port:
                return _valid_port(p.get("containerPort"))
    return None


class Prober:
    def __init__(
        self,
        *,
        allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
    ) -> None:
        self.allowed = allowed
        self._refused_ips: set[str] = set()

    async def probe(self, *, pod: dict[str, Any], probe: spec_model.DrainProbe, timeout: float | None = None) -> Result:
        """One GET, over within `timeout` seconds (timeoutSeconds when None; the runner passes less
        when the drain or pending budget ends sooner)."""
        # Whatever a tenant wrote or a tool answers, a probe ends as "not idle" with a reason:
        # an exception here would escape before decide() and wedge the transition.
        try:
            return await self._probe(pod=pod, probe=probe, timeout=probe.timeout_seconds if timeout is None else timeout)
        except Exception as exc:  # noqa: BLE001 - every failure is a reported "not idle"
            log.warning("drain probe failed unexpectedly: %s: %s", type(exc).__name__, exc, extra=_where(pod))
            return self._error("error", f"{type(exc).__name__}: {exc}"[:200])

    async def _probe(self, *, pod: dict[str, Any], probe: spec_model.DrainProbe, timeout: float) -> Result:
        ip = (pod.get("status") or {}).get("podIP")
        port = resolve_port(pod, probe.http_get.port)
        path = probe.http_get.path
        if not ip:
            return self._error("no-ip", "the pod has no IP")
        if port is None:
            return self._error("bad-port", f"port {probe.http_get.port!r} is not a container port of the pod")
        if not _PATH.match(path):
            return self._error("bad-path", f"path {path!r} must start with / and hold no whitespace")
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return self._error("no-ip", f"pod IP {ip!r} is not an address")
        if not any(addr in net for net in self.allowed):
            if ip not in self._refused_ips:  # said once per IP (forgotten past a bound: pod IPs churn)
                if len(self._refused_ips) >= REFUSED_IPS_REMEMBERED:
                    self._refused_ips.clear()
                self._refused_ips.add(ip)
                log.warning("drain probe not sent: pod IP %s is outside BATON_PROBE_ALLOWED_CIDRS", ip,
                            extra=_where(pod))
            return self._error("outside-cidrs", f"pod IP {ip} is outside the allowed CIDRs")
        try:
            async with asyncio.timeout(timeout):
                return await self._get(addr, port, path)
        except TimeoutError:
            if timeout < probe.timeout_seconds:
                return self._error("timeout", f"no status line within {timeout:.1f}s (the rest of the budget; "
                                              f"timeoutSeconds={probe.timeout_seconds})")
            return self._error("timeout", f"no status line within timeoutSeconds={probe.timeout_seconds}")
        except (OSError, ValueError, OverflowError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            return self._error("connection", f"{type(exc).__name__}: {exc}"[:200])

    async def _get(self, addr: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, path: str) -> Result:
        host = f"[{addr}]" if addr.version == 6 else str(addr)
        reader, writer = await asyncio.open_connection(str(addr), port, limit=MAX_RESPONSE_BYTES)
        try:
            request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: baton-drain-probe\r\n"
                       "Accept: */*\r\nConnection: close\r\n\r\n")
            writer.write(request.encode("ascii"))
            await writer.drain()
            line = await reader.readuntil(b"\n")  # at most MAX_RESPONSE_BYTES, else LimitOverrunError
        finally:
            writer.close()
        match = _STATUS_LINE.match(line)
        if match is None:
            return self._error("not-http", "the answer is not an HTTP/1.x status line")
        code = int(match.group(1))
        if code == 200:
            return Result(idle=True)
        if 300 <= code < 400:
            return self._error("redirect", f"answered {code} (redirects are not followed; not idle)")
        if code in MISCONFIGURED_CODES:
            metrics.DRAIN_PROBE_ERRORS.labels(kind="misconfigured").inc()
            return Result(idle=False, error=f"answered {code}: the tool has no such endpoint", misconfigured=True)
        return Result(idle=False, error=f"answered {code}")

    @staticmethod
    def _error(kind: str, text: str) -> Result:
        metrics.DRAIN_PROBE_ERRORS.labels(kind=kind).inc()
        return Result(idle=False, error=text)


def _where(pod: dict[str, Any]) -> dict[str, str]:
    """The log records' `runtime` (namespace/name) of the runtime that owns `pod`."""
    meta = pod.get("metadata") or {}
    return {"runtime": f"{meta.get('namespace', '')}/{(meta.get('labels') or {}).get(names.LABEL_RUNTIME, '')}"}
