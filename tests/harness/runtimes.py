"""ToolRuntimes in tests: ``install_crd`` (the CRD files and the wait are dev.crds'),
``runtime_manifest`` and ``Runtimes``, small readers and writers of a namespace's runtimes, their status, events and
pods."""
from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dev.crds import CLAIM_CRD, CRD, wait_established
from dev.wait import wait_for

GROUP, VERSION, PLURAL = "baton.dev", "v1alpha1", "toolruntimes"
# Tests call the gateway from loopback sockets (127.0.0.1), which are no pod: `Runtimes.create`
# admits them as callers that are not pods (spec.service.clients.cidrs) on every runtime with a
# Service that names no clients itself. kwok-loop pods (127.0.100.x) are pods: still judged by
# their namespace, never by this range (docs/gateway.md, "Who may call").
LOOPBACK_CLIENTS = {"cidrs": ["127.0.0.0/8"]}


def install_crd(cluster: Any) -> None:
    """Both CRDs: ToolRuntime and ToolRuntimeClaim (the operator watches both)."""
    cluster.kubectl("apply", "-f", str(CRD), "-f", str(CLAIM_CRD))
    wait_established(cluster.api_client)


def runtime_manifest(name: str, *, image: str = "example/tool:1", budgets: dict[str, int] | None = None,
                     service: bool = False, annotations: dict[str, str] | None = None,
                     pod_annotations: dict[str, str] | None = None, loopback: bool = False,
                     drain_probe: dict[str, Any] | None = None, recovery: str | None = None,
                     suspend: bool | None = None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "server", "image": image,
                                                "ports": [{"name": "http", "containerPort": 8080}]}]}
    if loopback:
        pod_spec["nodeSelector"] = {"baton.dev/loopback": "true"}
        pod_spec["tolerations"] = [{"key": "baton.dev/loopback", "operator": "Exists", "effect": "NoSchedule"}]
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": {"app": name}, "annotations": dict(pod_annotations or {})},
                     "spec": pod_spec},
        "budgets": {"lockSeconds": 10, "connectSeconds": 20, "drainSeconds": 5,
                    "terminationGraceSeconds": 1, "cleanupSeconds": 10, **(budgets or {})},
    }
    if service:
        spec["service"] = {"ports": [{"port": 80, "targetPort": 8080}]}
    if drain_probe is not None:
        spec["drain"] = {"probe": drain_probe}
    if recovery:
        spec["recovery"] = {"onCleanupFailure": recovery}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntime",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": spec}


def with_loopback_clients(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` (not changed) with LOOPBACK_CLIENTS as spec.service.clients when it has a
    Service and names no clients."""
    service = (manifest.get("spec") or {}).get("service")
    if not isinstance(service, dict) or "clients" in service:
        return manifest
    return {**manifest, "spec": {**manifest["spec"], "service": {**service, "clients": LOOPBACK_CLIENTS}}}


class Runtimes:
    """Small typed-ish accessors for ToolRuntimes in one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL,
                                                                with_loopback_clients(manifest)))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name))

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, body)

    def set_image(self, name: str, image: str) -> None:
        rt = self.get(name)
        containers = rt["spec"]["template"]["spec"]["containers"]
        containers[0]["image"] = image
        self.patch(name, {"spec": {"template": {"spec": {"containers": containers}}}})

    def annotate(self, name: str, key: str, value: str | None) -> None:
        self.patch(name, {"metadata": {"annotations": {key: value}}})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        for c in self.status(name).get("conditions") or []:
            if c["type"] == kind:
                return dict(c)
        return None

    def wait_ready(self, name: str, generation: int, timeout: float = 60) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            st = self.status(name)
            cur = st.get("current") or {}
            ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
            if cur.get("generation") == generation and ready.get("status") == "True" and not st.get("transition"):
                return st
            return None
        return wait_for(check, timeout=timeout, what=f"{self.ns}/{name} generation {generation} Ready",
                        interval=0.25)

    def wait_serving(self, name: str, timeout: float = 60, *, above: int = 0) -> dict[str, Any]:
        """The status once some generation above `above` serves (Ready, no transition), whichever
        number it has: a number may be given up on the way (a create that may still land)."""
        def check() -> dict[str, Any] | None:
            st = self.status(name)
            ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
            serving = st.get("current") and ready.get("status") == "True" and not st.get("transition")
            return st if serving and int(st["current"]["generation"]) > above else None
        what = f"{self.ns}/{name} serving" + (f" a generation above {above}" if above else "")
        return wait_for(check, timeout=timeout, what=what, interval=0.25)

    def events(self, name: str, reason: str | None = None) -> list[Any]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [e for e in evs if e.involved_object.kind == "ToolRuntime" and (reason is None or e.reason == reason)]

    def events_posted(self, name: str, reason: str, timeout: float = 10.0) -> list[Any]:
        """The runtime's events of `reason`, once there is at least one: an event is posted after
        the status write of the same plan lands, so a test that saw the status may be first."""
        found: list[Any] = wait_for(lambda: self.events(name, reason), timeout=timeout, what=f"a {reason} event of {name}")
        return found

    def pods(self, name: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.ns, label_selector=f"baton.dev/runtime={name}").items)

    def gen_pod(self, runtime: str, generation: int) -> Any | None:
        """The runtime's pod (named like the runtime) if it is generation `generation`'s."""
        pod = self.pod(runtime)
        if pod is None or (pod.metadata.labels or {}).get("baton.dev/generation") != str(generation):
            return None
        return pod

    def pod(self, pod_name: str) -> Any | None:
        try:
            return self.core.read_namespaced_pod(pod_name, self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
