"""The API proxy harness (tests/harness/apiproxy.py) against the real local plane.

What later tests of issue 8 rely on: plain-HTTP clients without credentials work through it
(the kubernetes client, watches, kopf and the operator), a held request reaches the API server
late and its refusal is recorded, and a blackhole makes requests time out until restore().
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dev.wait import wait_for
from harness import kwok
from harness.apiproxy import ApiProxy, matching
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest


@pytest.fixture
def proxy(cluster: Any, tmp_path: Path) -> Iterator[ApiProxy]:
    with ApiProxy(cluster.kubeconfig, tmp_path) as p:
        yield p


def test_kubernetes_client_lists_namespaces_through_the_proxy(
        proxy: ApiProxy, namespace: str) -> None:
    api = proxy.api_client()
    assert api.configuration.host.startswith("http://127.0.0.1:")
    assert not api.configuration.cert_file and not api.configuration.api_key
    names = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    assert namespace in names and "default" in names
    [entry] = proxy.requests(matching("GET", "/api/v1/namespaces"))
    assert entry.status == 200 and not entry.held and not entry.error
    # The client may have read the last byte a moment before the proxy's handler returned.
    wait_for(lambda: proxy.requests(matching("GET", "/api/v1/namespaces"))[0].finished,
             timeout=5, what="the proxy done with the request")


def test_watch_through_the_proxy_streams_events(
        proxy: ApiProxy, cluster: Any, namespace: str) -> None:
    core = client.CoreV1Api(proxy.api_client())
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[tuple[str, str]] = []
    started = threading.Event()

    def run() -> None:
        w = watch.Watch()
        started.set()
        # Bounded by the server-side timeout; stops at the first event about our ConfigMap.
        for ev in w.stream(core.list_namespaced_config_map, namespace, resource_version=rv,
                           timeout_seconds=20):
            seen.append((ev["type"], ev["object"].metadata.name))
            if ev["object"].metadata.name == "through-proxy":
                w.stop()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(5)
    # The watch is open (its response has begun) before the object is created.
    wait_for(lambda: [e for e in proxy.requests(matching("GET", f"/api/v1/namespaces/{namespace}/configmaps",
                                                         watch=True)) if e.status == 200],
             timeout=10, what="watch request answered 200 through the proxy")
    # Created directly: the event can only reach the watcher through the proxy's stream.
    client.CoreV1Api(cluster.api_client).create_namespaced_config_map(
        namespace, {"metadata": {"name": "through-proxy"}, "data": {"k": "v"}})
    wait_for(lambda: ("ADDED", "through-proxy") in seen, timeout=10, what="ADDED event via the proxy")
    t.join(10)
    assert not t.is_alive()


def test_held_create_is_sent_late_and_refused_by_the_api_server(
        proxy: ApiProxy, cluster: Any, namespace: str) -> None:
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    proxy.hold(matching("POST", pods_path))
    via_proxy = client.CoreV1Api(proxy.api_client())
    outcome: dict[str, Any] = {}

    def create() -> None:
        try:
            outcome["pod"] = via_proxy.create_namespaced_pod(namespace, kwok.pod_manifest("same-name"),
                                                             _request_timeout=30)
        except ApiException as e:
            outcome["status"] = e.status

    t = threading.Thread(target=create, daemon=True)
    t.start()
    wait_for(lambda: proxy.held_count() == 1, timeout=10, what="the POST held in the proxy")
    # Held means not sent: the API server has no such pod.
    direct = client.CoreV1Api(cluster.api_client)
    with pytest.raises(ApiException) as missing:
        direct.read_namespaced_pod("same-name", namespace)
    assert missing.value.status == 404
    winner = direct.create_namespaced_pod(namespace, kwok.pod_manifest("same-name"))

    [entry] = proxy.release()
    assert entry.held and entry.released is not None
    assert entry.method == "POST" and entry.path == pods_path
    assert entry.status == 409, entry
    t.join(10)
    assert outcome == {"status": 409}
    assert proxy.held_count() == 0
    assert direct.read_namespaced_pod("same-name", namespace).metadata.uid == winner.metadata.uid
    assert [e.status for e in proxy.requests(matching("POST", pods_path))] == [409]


def test_blackhole_times_requests_out_until_restore(proxy: ApiProxy, namespace: str) -> None:
    # No urllib3 retries: by default the client would send the GET four times (4 × 2 s).
    core = client.CoreV1Api(proxy.api_client(retries=False))
    core.read_namespace(namespace, _request_timeout=5)
    proxy.blackhole()
    t0 = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        core.read_namespace(namespace, _request_timeout=(5, 2))
    waited = time.monotonic() - t0
    assert 1.9 <= waited < 10, waited
    hole = [e for e in proxy.log() if e.blackholed]
    assert len(hole) == 1 and hole[0].status is None, hole  # never forwarded, never answered
    proxy.restore()
    assert core.read_namespace(namespace, _request_timeout=5).metadata.name == namespace
    assert [e.status for e in proxy.requests(matching("GET", f"/api/v1/namespaces/{namespace}"))] \
        == [200, None, 200]


def test_a_request_released_into_a_blackhole_is_swallowed(proxy: ApiProxy, namespace: str) -> None:
    core = client.CoreV1Api(proxy.api_client(retries=False))
    ns_path = f"/api/v1/namespaces/{namespace}"
    proxy.hold(matching("GET", ns_path))
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            core.read_namespace(namespace, _request_timeout=(5, 30))
        except BaseException as e:  # noqa: BLE001 - cut at the proxy's stop (teardown)
            outcome.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    wait_for(lambda: proxy.held_count() == 1, timeout=10, what="GET held")
    proxy.blackhole()
    [entry] = proxy.release()
    assert entry.held and entry.blackholed and entry.status is None and entry.answered is None
    proxy.restore()
    # Later requests are answered again; the swallowed one never is (its client still waits).
    assert core.read_namespace(namespace, _request_timeout=5).metadata.name == namespace
    assert t.is_alive() and not outcome
    assert [e.status for e in proxy.requests(matching("GET", ns_path))] == [None, 200]


def test_delay_forwards_matching_requests_late(proxy: ApiProxy, namespace: str) -> None:
    core = client.CoreV1Api(proxy.api_client())
    proxy.delay(matching("GET", f"/api/v1/namespaces/{namespace}"), 1.5)
    t0 = time.monotonic()
    assert core.read_namespace(namespace, _request_timeout=10).metadata.name == namespace
    assert time.monotonic() - t0 >= 1.5
    proxy.delay(None)
    core.read_namespace(namespace, _request_timeout=10)
    entries = proxy.requests(matching("GET", f"/api/v1/namespaces/{namespace}"))
    assert [(e.delayed, e.status) for e in entries] == [(1.5, 200), (0.0, 200)]
    assert entries[0].answered is not None and entries[0].answered - entries[0].started >= 1.5


def test_blackhole_silences_an_open_watch(proxy: ApiProxy, cluster: Any, namespace: str) -> None:
    core = client.CoreV1Api(proxy.api_client())
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[str] = []

    def run() -> None:
        w = watch.Watch()
        try:
            for ev in w.stream(core.list_namespaced_config_map, namespace, resource_version=rv,
                               timeout_seconds=15, _request_timeout=(5, 20)):
                # Only the test's own: the namespace is new, and kube-controller-manager's
                # root-CA publisher may add kube-root-ca.crt after the LIST above (seen in CI).
                if ev["object"].metadata.name in ("before", "after"):
                    seen.append(ev["object"].metadata.name)
        except Exception:  # noqa: BLE001 - the stream is cut at stop(); only `seen` matters
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    direct = client.CoreV1Api(cluster.api_client)
    wait_for(lambda: [e for e in proxy.requests(matching(watch=True)) if e.status == 200],
             timeout=10, what="watch open")
    direct.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}})
    wait_for(lambda: "before" in seen, timeout=10, what="event before the blackhole")
    proxy.blackhole()
    direct.create_namespaced_config_map(namespace, {"metadata": {"name": "after"}})
    # The API server has sent "after" on the stream; the proxy must not deliver it. The watch
    # is known to deliver within a second (above); give it 3 s to prove silence.
    time.sleep(3)
    assert seen == ["before"]
    [w] = [e for e in proxy.requests(matching(watch=True))]
    assert w.blackholed


def test_operator_through_the_proxy_brings_a_runtime_to_ready(
        proxy: ApiProxy, operators: Callable[..., OperatorProcess], rts: Runtimes,
        namespace: str) -> None:
    op = operators("op-proxied", kubeconfig=proxy.kubeconfig)
    assert op.healthy()
    rts.create(runtime_manifest("via-proxy"))
    st = rts.wait_ready("via-proxy", 1, timeout=60)
    assert st["current"]["uid"]
    log = proxy.log()
    # Everything the operator did went through the proxy, and the API server accepted it.
    assert any(e.method == "POST" and e.path == f"/api/v1/namespaces/{namespace}/pods"
               and e.status == 201 for e in log), [(e.method, e.path, e.status) for e in log]
    assert any(e.info.is_watch and e.status == 200 and "toolruntimes" in e.path for e in log)
    assert any(e.path.endswith("/status") and e.method in ("PATCH", "PUT") and e.status == 200
               for e in log)
    assert not [e for e in log if e.error], [e for e in log if e.error]
