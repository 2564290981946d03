"""A hook's call (spec.hooks.*.httpPost): one HTTP POST to the generation's own pod IP. Does
network I/O, under the drain probe's rules (baton.drainprobe), each because a tool may misbehave:
- it dials only the pod's own IP, and only inside the allowed CIDRs (BATON_PROBE_ALLOWED_CIDRS);
- it follows no redirect (a 3xx is a failure; nothing else is ever dialled);
- one total deadline (the hook's timeoutSeconds, or less) covers connect, send and read;
- it reads at most MAX_HEADER_BYTES of status line and headers and MAX_BODY_BYTES of body (the
  answer kept in status is bounded again there);
- any error is a failed call, returned as text; it never raises.
The fence goes with it: headers Baton-Runtime, Baton-Generation, Baton-Fencing-Token (the
calling holder's current token), Baton-Hook, and the same in a JSON body (docs/hooks.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import re
from typing import Any

from baton import drainprobe
from baton.model import names
from baton.model import spec as spec_model

log = logging.getLogger("baton.hooks")

MAX_HEADER_BYTES = 8192
MAX_BODY_BYTES = 512
_STATUS_LINE = re.compile(rb"^HTTP/1\.[01] (\d{3})(?: .*)?\r?\n")
_PATH = re.compile(r"^/[\x21-\x7e]*$")


@dataclasses.dataclass(frozen=True)
class Fence:
    """What a hook call carries: who calls, about which generation, under which token."""

    namespace: str
    runtime: str
    generation: int
    fencing_token: int
    hook: str  # preRetire | postReady
    pod: str


@dataclasses.dataclass(frozen=True)
class Result:
    ok: bool  # answered 2xx
    message: str  # what it answered (status and the start of its body), or why it failed


def request_bytes(*, host: str, port: int, path: str, fence: Fence) -> bytes:
    """The whole request: headers carry the fence, and so does the JSON body."""
    body = json.dumps({"runtime": fence.runtime, "namespace": fence.namespace, "generation": fence.generation,
                       "fencingToken": fence.fencing_token, "hook": fence.hook, "pod": fence.pod},
                      separators=(",", ":")).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: baton-hook\r\n"
            "Content-Type: application/json\r\nAccept: */*\r\nConnection: close\r\n"
            f"{names.HEADER_RUNTIME}: {fence.namespace}/{fence.runtime}\r\n"
            f"{names.HEADER_GENERATION}: {fence.generation}\r\n"
            f"{names.HEADER_FENCING_TOKEN}: {fence.fencing_token}\r\n"
            f"{names.HEADER_HOOK}: {fence.hook}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("ascii") + body


class Caller:
    def __init__(self, *, allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> None:
        self.allowed = allowed

    async def call(self, *, pod: dict[str, Any], post: spec_model.HttpPost, fence: Fence, timeout: float,
                   timeout_seconds: int) -> Result:
        """One POST, over within `timeout` seconds (what is left of the hook's `timeout_seconds`);
        never raises."""
        try:
            return await self._call(pod=pod, post=post, fence=fence, timeout=timeout, timeout_seconds=timeout_seconds)
        except Exception as exc:  # noqa: BLE001 - every failure is a failed call, said
            log.warning("hook call failed unexpectedly: %s: %s", type(exc).__name__, exc,
                        extra={"runtime": f"{fence.namespace}/{fence.runtime}"})
            return Result(False, f"{type(exc).__name__}: {exc}"[:200])

    async def _call(self, *, pod: dict[str, Any], post: spec_model.HttpPost, fence: Fence, timeout: float,
                    timeout_seconds: int) -> Result:
        ip = (pod.get("status") or {}).get("podIP")
        port = drainprobe.resolve_port(pod, post.port)
        if not ip:
            return Result(False, "the pod has no IP")
        if port is None:
            return Result(False, f"httpPost.port {post.port!r} is not a container port of the pod")
        if not _PATH.match(post.path):
            return Result(False, f"httpPost.path {post.path!r} must start with / and hold no whitespace")
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return Result(False, f"pod IP {ip!r} is not an address")
        if not any(addr.version == net.version and addr in net for net in self.allowed):
            return Result(False, f"pod IP {ip} is outside the allowed CIDRs (BATON_PROBE_ALLOWED_CIDRS)")
        host = f"[{addr}]" if addr.version == 6 else str(addr)
        try:
            async with asyncio.timeout(max(0.001, timeout)):
                return await self._post(str(addr), port, request_bytes(host=host, port=port, path=post.path, fence=fence))
        except TimeoutError:
            return Result(False, f"no answer within timeoutSeconds={timeout_seconds}")
        except (OSError, ValueError, OverflowError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            return Result(False, f"{type(exc).__name__}: {exc}"[:200])

    @staticmethod
    async def _post(addr: str, port: int, request: bytes) -> Result:
        reader, writer = await asyncio.open_connection(addr, port, limit=MAX_HEADER_BYTES)
        try:
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")  # at most MAX_HEADER_BYTES, else LimitOverrunError
            match = _STATUS_LINE.match(head)
            if match is None:
                return Result(False, "the answer is not an HTTP/1.x status line")
            code = int(match.group(1))
            length = None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length" and value.strip().isdigit():
                    length = int(value.strip())
            want = MAX_BODY_BYTES if length is None else min(length, MAX_BODY_BYTES)
            body = b""
            while len(body) < want:
                chunk = await reader.read(want - len(body))
                if not chunk:
                    break
                body += chunk
        finally:
            writer.close()
        text = body.decode("utf-8", "replace").strip()
        said = f"answered {code}" + (f": {text}" if text else "")
        if 200 <= code < 300:
            return Result(True, said)
        if 300 <= code < 400:
            return Result(False, f"{said} (redirects are not followed)")
        return Result(False, said)
