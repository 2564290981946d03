"""The gateway's view of pod addresses (who a caller is): what it keeps of a pod, and the
address -> namespace index, kept by the store's own listener (real store, no informer)."""

from __future__ import annotations

from typing import Any

from baton.gateway import state, views


def pod(name: str, namespace: str, ip: str | None, *, rv: int = 1, uid: str | None = None, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": "Running", **status}
    if ip is not None:
        st["podIP"], st["podIPs"] = ip, [{"ip": ip}]
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"{namespace}-{name}",
                         "resourceVersion": str(rv), "labels": {"app": "x"}, "annotations": {"big": "x" * 1000}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": st}


def fresh() -> views.GatewayViews:
    return views.GatewayViews(namespaces=(), state=state.State())


def test_only_the_address_projection_is_kept() -> None:
    vw = fresh()
    vw.addresses.apply(pod("p", "a", "10.0.0.5"))
    [kept] = vw.addresses.items()
    assert kept == {"metadata": {"name": "p", "namespace": "a", "uid": "a-p", "resourceVersion": "1"},
                    "addresses": ["10.0.0.5"]}


def test_an_address_names_its_pods_namespace_and_follows_the_pod() -> None:
    vw = fresh()
    assert vw.namespace_of("10.0.0.5") is None
    vw.addresses.apply(pod("p", "a", None))  # scheduled, no IP yet
    assert vw.namespace_of("10.0.0.5") is None
    vw.addresses.apply(pod("p", "a", "10.0.0.5", rv=2))
    assert vw.namespace_of("10.0.0.5") == "a"
    vw.addresses.apply(pod("p", "a", "10.0.0.5", rv=3, phase="Succeeded"))  # ended: no longer a caller
    assert vw.namespace_of("10.0.0.5") is None
    vw.addresses.apply(pod("q", "b", "10.0.0.5"))  # the IP reused by another namespace's pod
    assert vw.namespace_of("10.0.0.5") == "b"
    vw.addresses.delete(pod("q", "b", "10.0.0.5", rv=2))
    assert vw.namespace_of("10.0.0.5") is None and vw._by_ip == {}


def test_an_address_two_namespaces_claim_names_none() -> None:
    """An IP reused before the old pod's deletion was seen: no guess."""
    vw = fresh()
    vw.addresses.apply(pod("old", "a", "10.0.0.5"))
    vw.addresses.apply(pod("new", "b", "10.0.0.5"))
    assert vw.namespace_of("10.0.0.5") is None
    vw.addresses.delete(pod("old", "a", "10.0.0.5", rv=2))
    assert vw.namespace_of("10.0.0.5") == "b"
    vw.addresses.apply(pod("other", "b", "10.0.0.5"))  # two pods of one namespace: still that namespace
    assert vw.namespace_of("10.0.0.5") == "b"


def test_a_relist_drops_pods_that_went() -> None:
    vw = fresh()
    vw.addresses.replace(None, [pod("p", "a", "10.0.0.5"), pod("q", "b", "10.0.0.6")])
    vw.addresses.replace(None, [pod("q", "b", "10.0.0.6")])
    assert (vw.namespace_of("10.0.0.5"), vw.namespace_of("10.0.0.6")) == (None, "b")


def test_the_address_view_has_its_own_informers_and_rbac_covers_them() -> None:
    assert fresh().informer_count() == 3  # runtimes, generation pods, every pod's address
    assert views.GatewayViews(namespaces=("a", "b"), state=state.State()).informer_count() == 6
    assert ("", "pods", ("list", "watch")) in views.RBAC
