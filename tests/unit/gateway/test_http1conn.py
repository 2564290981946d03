"""baton.gateway.http1conn's pure part: the Keep-Alive hint of an answer. The connection itself
(framings, a broken answer, the head's bound) is driven through its pool over real loopback
sockets in test_http1.py."""

from __future__ import annotations

from baton.gateway import http1conn


def test_the_keep_alive_hint() -> None:
    assert http1conn.keepalive_hint("timeout=5, max=100") == 5.0
    assert http1conn.keepalive_hint("max=100, Timeout = 2") == 2.0
    assert http1conn.keepalive_hint("max=100") is None and http1conn.keepalive_hint("timeout=soon") is None
    assert http1conn.keepalive_hint("timeout=-1") is None and http1conn.keepalive_hint("timeout=nan") is None
