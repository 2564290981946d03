"""Who may call, through the real call path (baton.gateway.proxy) over loopback sockets, with the
views filled by hand: the caller (127.0.0.1) is made a pod of one namespace or another in the
address view; refused 403 ClientNotAllowed before anything is dialled, or served; a bare Host
resolved in the caller's namespace."""

from __future__ import annotations

import json
from typing import Any

from baton.gateway import state, views
from unit.gateway import test_proxy as tp


def caller(namespace: str, rv: int = 1) -> dict[str, Any]:
    """The test's client (127.0.0.1) as a pod of `namespace` in the address view."""
    return {"metadata": {"name": "client", "namespace": namespace, "uid": f"c-{namespace}", "resourceVersion": str(rv)},
            "status": {"phase": "Running", "podIP": "127.0.0.1"}}


def runtime(**clients: Any) -> dict[str, Any]:
    rt = tp.runtime(gen=1, uid="u1")
    rt["spec"]["service"]["clients"] = clients  # no cidrs: the loopback caller counts only as a pod
    return rt


def test_a_pod_of_another_namespace_is_refused_and_one_of_the_runtimes_is_served() -> None:
    async def go() -> None:
        st = state.State()
        vw = views.GatewayViews(namespaces=(tp.NS,), state=st)
        seen: list[int] = []
        b1, p1 = await tp.backend(1, seen)
        vw.runtimes.apply(runtime(namespaces=["listed"]))
        vw.pods.apply(tp.pod("u1", p1))
        px, gw, port = await tp.gateway(vw, st)
        try:
            # No pod known at the caller's address, no cidrs: refused, nothing dialled.
            status, headers, body, _ = await tp.post(port)
            assert (status, headers["Baton-Reason"]) == (403, "ClientNotAllowed") and seen == []
            assert "no pod is known" in json.loads(body)["error"]["message"]
            assert "Retry-After" not in headers
            # A pod of another namespace: refused, with who may call and how to allow it.
            vw.addresses.apply(caller("intruder"))
            status, headers, body, _ = await tp.post(port)
            message = json.loads(body)["error"]["message"]
            assert (status, headers["Baton-Reason"]) == (403, "ClientNotAllowed") and seen == []
            assert "a pod of namespace intruder" in message and "add 'intruder' to spec.service.clients.namespaces" in message
            # ...and a short name from there names that namespace's runtime (none), never this one.
            status, headers, _, _ = await tp.post(port, host="tool")
            assert (status, headers["Baton-Reason"]) == (404, "UnknownRuntime") and seen == []
            # A listed namespace is served.
            vw.addresses.delete(caller("intruder"))
            vw.addresses.apply(caller("listed"))
            status, headers, _, _ = await tp.post(port)
            assert (status, headers["Baton-Generation"]) == (200, "1") and seen == [1]
            # The runtime's own namespace: served, also by its short name (with or without the port).
            vw.addresses.delete(caller("listed"))
            vw.addresses.apply(caller(tp.NS))
            for host in (f"tool.{tp.NS}", "tool", "tool:80"):
                status, headers, body, _ = await tp.post(port, host=host)
                assert (status, headers["Baton-Generation"]) == (200, "1"), host
            assert seen == [1, 1, 1, 1]
        finally:
            await gw.cleanup()
            await px.close()
            await b1.cleanup()
    tp.run(go)
