"""The premise of tests/harness/badprobe.py on the real local plane: a pod on kwok-loop gets an
IP in 127.0.100.0/24, a misbehaving server can listen on that IP and the pod's port, and a
redirect from it to a canary on another pod's IP is observable (the canary counts connections).
"""
from __future__ import annotations

import http.client
from typing import Any

import pytest
from kubernetes import client

from dev.wait import wait_for
from harness import badprobe, kwok


def _pod_ip(core: client.CoreV1Api, name: str, namespace: str) -> str:
    def ip() -> str | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod.status.pod_ip if pod.status and kwok.is_ready(pod) else None
    return str(wait_for(ip, timeout=30, what=f"pod {name} Ready with an IP"))


def test_bad_servers_listen_on_loopback_pod_ips(cluster: Any, namespace: str,
                                                kwok_nodes: None) -> None:
    core = client.CoreV1Api(cluster.api_client)
    for name in ("tool", "elsewhere"):
        core.create_namespaced_pod(namespace, kwok.pod_manifest(name, loopback=True, port=8080))
    tool_ip, other_ip = _pod_ip(core, "tool", namespace), _pod_ip(core, "elsewhere", namespace)
    for ip in (tool_ip, other_ip):
        assert kwok.assert_loopback(ip) and ip.startswith("127.0.100.")
    assert tool_ip != other_ip
    with badprobe.canary(other_ip, 8080) as canary, \
            badprobe.redirect(tool_ip, 8080, to=canary.address) as redirect:
        conn = http.client.HTTPConnection(tool_ip, 8080, timeout=5)
        conn.request("GET", "/idle")
        resp = conn.getresponse()
        conn.close()
        assert resp.status == 302 and resp.getheader("Location") == f"http://{other_ip}:8080/idle"
        assert [c.request_line for c in redirect.connections()] == ["GET /idle HTTP/1.1"]
        assert canary.connections() == []
    with badprobe.garbage(tool_ip, 8080) as junk:
        conn = http.client.HTTPConnection(tool_ip, 8080, timeout=5)
        with pytest.raises(http.client.HTTPException):
            conn.request("GET", "/idle")
            conn.getresponse()
        conn.close()
        assert len(junk.connections()) == 1
