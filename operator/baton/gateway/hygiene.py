"""Which header fields of a call go on to the pod, and whether its framing is ambiguous: the
gateway's header hygiene. Pure: no I/O. Hop-by-hop fields (RFC 9110 7.6.1, and those Connection
names) are dropped on every forwarded call, answer and replay; a request whose framing could be
read two ways (RFC 9112 6.3: request smuggling) is refused with 400 before anything else.
"""

from __future__ import annotations

import functools
from typing import Iterable

# RFC 9110 7.6.1: connection-specific header fields a proxy never forwards (plus the fields
# Connection names). Proxy-* are the proxy's own; TE and Trailer are per hop.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
    "te", "trailer", "transfer-encoding", "upgrade",
})


NEVER_HOP_BY_HOP = frozenset({"host", "content-length", "transfer-encoding"})


def end_to_end(headers: Iterable[tuple[str, str]], *, keep_upgrade: bool = False,
               also_drop: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """`headers` without the hop-by-hop fields and those Connection names. `keep_upgrade`: a
    WebSocket handshake keeps Upgrade (and Connection: upgrade is set by the client library).
    `also_drop`: lower-case names the caller sets itself (one pass over the headers, on every call)."""
    lowered = [(k.lower(), k, v) for k, v in headers]
    named = {t.strip().lower() for lk, _, v in lowered if lk == "connection" for t in v.split(",") if t.strip()}
    # Connection may not name Host (the pod would get a call with none): RFC 9110 7.6.1 lets a
    # sender list only its own hop-by-hop fields.
    named -= NEVER_HOP_BY_HOP
    if keep_upgrade:
        named.discard("upgrade")
    drop = _dropped(also_drop, keep_upgrade) | named if named else _dropped(also_drop, keep_upgrade)
    return [(k, v) for lk, k, v in lowered if lk not in drop and not lk.startswith("proxy-")]


@functools.lru_cache(maxsize=64)
def _dropped(also_drop: frozenset[str], keep_upgrade: bool) -> frozenset[str]:
    """The names end_to_end drops whatever Connection says, once per call site (not per call)."""
    return (HOP_BY_HOP | also_drop) - ({"upgrade"} if keep_upgrade else frozenset())


def smuggling(headers: Iterable[tuple[str, str]]) -> str | None:
    """Why a request's framing is ambiguous (RFC 9112 6.3), or None. Refused with 400, never
    forwarded: Content-Length beside Transfer-Encoding, Content-Lengths that disagree or are not
    digits, a Transfer-Encoding other than exactly chunked."""
    lengths = [v for k, v in headers if k.lower() == "content-length"]
    codings = [v for k, v in headers if k.lower() == "transfer-encoding"]
    if lengths and codings:
        return "Content-Length and Transfer-Encoding together"
    values = {p.strip() for v in lengths for p in v.split(",")}
    if len(values) > 1:
        return "conflicting Content-Length values"
    if values and not all(v.isdigit() for v in values):
        return "a Content-Length that is not a number"
    if codings:
        parts = [p.strip().lower() for v in codings for p in v.split(",") if p.strip()]
        if parts != ["chunked"]:
            return f"Transfer-Encoding {', '.join(parts) or '(empty)'}: only chunked is accepted"
    return None
