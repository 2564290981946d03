"""Pure builders of the objects Baton owns: generation pods, the runtime's Service and, with
spec.service.gateway, the EndpointSlice that routes that Service to the gateway pods."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from baton.model import names, observed as obs, shardhash, spec as spec_model


def template_hash(template: dict[str, Any], config_digest: str = "") -> str:
    """Hash of the pod template plus the digest of the config data it references."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((canonical + "\n" + config_digest).encode()).hexdigest()[:16]


def owner_reference(*, name: str, uid: str, block_owner_deletion: bool = True) -> dict[str, Any]:
    """The controller reference to ToolRuntime `name`. Pods and the Service block the owner's
    deletion; the Lease's reference (baton.k8s.leases) has always been sent with False."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


def pod_definition(spec: spec_model.ToolRuntimeSpec) -> dict[str, Any]:
    """What a generation's pod is built from, as template_hash hashes it: the template, and with
    spec.stdio the stdio command too (changing it hands off). Without stdio, the template alone:
    the hashes of existing runtimes stay what they were."""
    if spec.stdio is None:
        return spec.template
    return {"template": spec.template, "stdio": spec.stdio.wire()}


# The bridge (docs/stdio.md): copied from Baton's image by an init container into an emptyDir
# that the tool container mounts read-only.
BRIDGE_VOLUME = spec_model.BRIDGE_VOLUME
BRIDGE_INIT_CONTAINER = spec_model.BRIDGE_INIT_CONTAINER
BRIDGE_MOUNT = spec_model.BRIDGE_MOUNT
BRIDGE_SOURCE = "/opt/baton/bin/baton-bridge"  # where Baton's image holds it
BRIDGE_BINARY = f"{BRIDGE_MOUNT}/baton-bridge"
BRIDGE_PORT_NAME = spec_model.BRIDGE_PORT_NAME
TERMINATION_LOG = "/dev/termination-log"
# Seconds of the grace kept back after the bridge's last step (SIGKILL of the child, its own exit).
BRIDGE_GRACE_MARGIN_SECONDS = 1
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def bridge_seconds(*, stdio: spec_model.Stdio, budgets: spec_model.Budgets) -> tuple[int, int, int]:
    """(drain, eof, term) seconds of the bridge's shutdown on SIGTERM. The pod's grace is
    budgets.terminationGraceSeconds (Baton's delete sends it too): drain + eof + term must end
    before the kubelet's SIGKILL, so the child gets EOF before any signal. The drain takes what
    the grace leaves after eof, term and a margin, at most budgets.drainSeconds (Baton's own drain
    already waited for the calls before the delete; this one serves deletes Baton did not drain:
    an eviction, a node drain, `kubectl delete`). The CRD keeps it at least 1."""
    left = budgets.termination_grace_seconds - stdio.eof_seconds - stdio.term_seconds - BRIDGE_GRACE_MARGIN_SECONDS
    return max(1, min(budgets.drain_seconds, left)), stdio.eof_seconds, stdio.term_seconds


def stdio_container_index(template: dict[str, Any], stdio: spec_model.Stdio) -> int:
    """Index of the container the stdio server runs in: spec.stdio.container, else the first."""
    containers = (template.get("spec") or {}).get("containers") or []
    if stdio.container is None:
        return 0
    for i, c in enumerate(containers):
        if c.get("name") == stdio.container:
            return i
    raise ValueError(f"spec.stdio.container {stdio.container!r} names no container of spec.template.spec.containers")


def _with_bridge(pod_spec: dict[str, Any], *, stdio: spec_model.Stdio, budgets: spec_model.Budgets,
                 bridge_image: str, index: int) -> dict[str, Any]:
    """`pod_spec` (a copy, changed) with the bridge installed in front of container `index`."""
    drain, eof, term = bridge_seconds(stdio=stdio, budgets=budgets)
    pod_spec["initContainers"] = [{
        "name": BRIDGE_INIT_CONTAINER,
        "image": bridge_image,
        "command": ["cp", BRIDGE_SOURCE, f"{BRIDGE_MOUNT}/"],
        "volumeMounts": [{"name": BRIDGE_VOLUME, "mountPath": BRIDGE_MOUNT}],
        "securityContext": copy.deepcopy(RESTRICTED),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }, *(pod_spec.get("initContainers") or [])]
    pod_spec["volumes"] = [*(pod_spec.get("volumes") or []),
                           {"name": BRIDGE_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}]
    # A stdio child's state lives in its process: restarted in place it would come back empty
    # under the same generation. Never: the pod fails and the generation is replaced (POD_LOST).
    pod_spec["restartPolicy"] = "Never"
    pod_spec["terminationGracePeriodSeconds"] = budgets.termination_grace_seconds
    c = pod_spec["containers"][index]
    c["command"] = [BRIDGE_BINARY, "--listen", f"0.0.0.0:{stdio.port}", "--path", stdio.path,
                    "--drain-seconds", str(drain), "--eof-seconds", str(eof), "--term-seconds", str(term),
                    "--init-seconds", str(budgets.connect_seconds), "--termination-log", TERMINATION_LOG,
                    "--", *stdio.command]
    c["args"] = list(stdio.args)
    c["ports"] = [*(c.get("ports") or []), {"name": BRIDGE_PORT_NAME, "containerPort": stdio.port, "protocol": "TCP"}]
    c["volumeMounts"] = [*(c.get("volumeMounts") or []),
                         {"name": BRIDGE_VOLUME, "mountPath": BRIDGE_MOUNT, "readOnly": True}]
    c["readinessProbe"] = {"httpGet": {"path": spec_model.BRIDGE_READY_PATH, "port": BRIDGE_PORT_NAME},
                           "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}
    # The bridge writes why the child ended (exit status, its last stderr lines) there; the
    # kubelet puts it in the container's terminated state, which the POD_LOST handoff quotes.
    c["terminationMessagePath"] = TERMINATION_LOG
    c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return pod_spec


# The fence handed to the tool (docs/hooks.md, "The fence in the tool's pod"): every container of
# the pod gets these, the generation and the token through the downward API from the pod's own
# annotations, so the value the container reads is the one the API server stored on the pod.
ENV_RUNTIME = "BATON_RUNTIME"  # "<namespace>/<name>", as the Baton-Runtime header of a hook call
ENV_GENERATION = "BATON_GENERATION"
ENV_FENCING_TOKEN = "BATON_FENCING_TOKEN"  # the Lease's token when the pod was created
ENV_POD_NAME = "BATON_POD_NAME"


def fence_env(*, namespace: str, runtime: str) -> list[dict[str, Any]]:
    """The env entries that hand the fence to a container."""
    def field(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}
    return [
        {"name": ENV_RUNTIME, "value": f"{namespace}/{runtime}"},
        {"name": ENV_GENERATION, **field(f"metadata.annotations['{names.ANN_GENERATION}']")},
        {"name": ENV_FENCING_TOKEN, **field(f"metadata.annotations['{names.ANN_FENCING_TOKEN}']")},
        {"name": ENV_POD_NAME, **field("metadata.name")},
    ]


def _with_fence_env(pod_spec: dict[str, Any], *, namespace: str, runtime: str) -> dict[str, Any]:
    """`pod_spec` (a copy, changed) with the fence's env added to every container. An `env` entry
    of the template with one of these names wins: Baton adds none of that name to that container
    (docs/hooks.md: a value the user set is never replaced under them)."""
    fence = fence_env(namespace=namespace, runtime=runtime)
    for c in pod_spec.get("containers") or []:
        own = {e.get("name") for e in c.get("env") or [] if isinstance(e, dict)}
        c["env"] = [*(c.get("env") or []), *(copy.deepcopy(e) for e in fence if e["name"] not in own)]
    return pod_spec


def build_pod(
    *,
    namespace: str,
    runtime: str,
    runtime_uid: str,
    template: dict[str, Any],
    generation: int,
    fencing_token: int,
    template_hash: str,
    stdio: spec_model.Stdio | None = None,
    budgets: spec_model.Budgets | None = None,
    bridge_image: str = "",
) -> dict[str, Any]:
    """Generation N's pod. Created not serving: it joins the Service only once Ready. With
    `stdio`, the bridge runs the stdio server (docs/stdio.md); `bridge_image` (BATON_IMAGE) holds it."""
    if stdio is not None and not bridge_image:
        raise ValueError("BATON_IMAGE is not set: a stdio runtime's pod needs Baton's image for its bridge")
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(
        {names.LABEL_RUNTIME: runtime, names.LABEL_GENERATION: str(generation), names.LABEL_SERVING: "false",
         names.LABEL_HASH_BUCKET: shardhash.hash_bucket(runtime_uid)}
    )
    annotations = dict(meta.get("annotations") or {})
    annotations.update(
        {
            names.ANN_GENERATION: str(generation),
            names.ANN_FENCING_TOKEN: str(fencing_token),
            names.ANN_TEMPLATE_HASH: template_hash,
        }
    )
    pod_spec = copy.deepcopy(template.get("spec") or {})
    if stdio is not None:
        pod_spec = _with_bridge(pod_spec, stdio=stdio, budgets=budgets or spec_model.Budgets(), bridge_image=bridge_image,
                                index=stdio_container_index(template, stdio))
    pod_spec = _with_fence_env(pod_spec, namespace=namespace, runtime=runtime)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(runtime),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(name=runtime, uid=runtime_uid)],
        },
        "spec": pod_spec,
    }


def service_selector(runtime: str) -> dict[str, str]:
    return {names.LABEL_RUNTIME: runtime, names.LABEL_SERVING: "true"}


def build_service(
    *, namespace: str, runtime: str, runtime_uid: str, service: spec_model.ServiceSpec,
    gateway_port: int | None = None,
) -> dict[str, Any]:
    """The runtime's Service. Routed through the gateway (spec.service.gateway) it has no selector:
    its endpoints are the EndpointSlice Baton keeps (build_gateway_slice), and each port maps to
    the gateway's calls port (`gateway_port`; None: not known yet, the spec's targetPort stands)."""
    ports = []
    for p in service.ports:
        port: dict[str, Any] = {"port": p.port, "protocol": p.protocol}
        if p.name:
            port["name"] = p.name
        if service.gateway and gateway_port is not None:
            port["targetPort"] = gateway_port
        else:
            port["targetPort"] = p.target_port if p.target_port is not None else p.port
        ports.append(port)
    spec: dict[str, Any] = {"ports": ports, "sessionAffinity": service.session_affinity}
    if not service.gateway:
        spec["selector"] = service_selector(runtime)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": runtime,
            "namespace": namespace,
            "labels": {names.LABEL_RUNTIME: runtime, names.LABEL_HASH_BUCKET: shardhash.hash_bucket(runtime_uid)},
            "ownerReferences": [owner_reference(name=runtime, uid=runtime_uid)],
        },
        "spec": spec,
    }


def gateway_endpoints(endpoints: tuple[obs.GatewayEndpoint, ...]) -> tuple[str, int | None, list[obs.GatewayEndpoint]]:
    """(addressType, port, endpoints) the slice lists. One slice has one address family and one
    port per Service port: IPv4 if any gateway pod has an IPv4 address, else IPv6; the calls
    port most of them use (the lowest on a tie: pods of two chart versions during an upgrade);
    only the pods of that family and port."""
    v4 = [e for e in endpoints if ":" not in e.ip]
    family, chosen = ("IPv4", v4) if v4 or not endpoints else ("IPv6", list(endpoints))
    if not chosen:
        return family, None, []
    counts: dict[int, int] = {}
    for e in chosen:
        counts[e.port] = counts.get(e.port, 0) + 1
    port = min(counts, key=lambda n: (-counts[n], n))
    return family, port, sorted((e for e in chosen if e.port == port), key=lambda e: (e.ip, e.uid))


def build_gateway_slice(
    *, namespace: str, runtime: str, runtime_uid: str, service: spec_model.ServiceSpec,
    endpoints: tuple[obs.GatewayEndpoint, ...],
) -> dict[str, Any]:
    """The EndpointSlice that routes the runtime's selector-less Service to the gateway pods:
    labelled with the Service's name (kube-proxy and DNS read it) and Baton as its manager (the
    EndpointSlice controller leaves it alone), owned by the runtime (garbage-collected with it)."""
    family, port, listed = gateway_endpoints(endpoints)
    items = []
    for e in listed:
        item: dict[str, Any] = {
            "addresses": [e.ip],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "targetRef": {"kind": "Pod", "namespace": e.namespace, "name": e.pod, "uid": e.uid},
        }
        if e.node:
            item["nodeName"] = e.node
        items.append(item)
    # kube-proxy pairs a Service port with the slice port of the same name ("" when unnamed).
    ports = [{"name": p.name or "", "port": port, "protocol": p.protocol} for p in service.ports] if port is not None else []
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": names.gateway_slice_name(runtime),
            "namespace": namespace,
            "labels": {names.LABEL_RUNTIME: runtime, names.LABEL_SERVICE_NAME: runtime,
                       names.LABEL_SLICE_MANAGED_BY: names.SLICE_MANAGER,
                       names.LABEL_HASH_BUCKET: shardhash.hash_bucket(runtime_uid)},
            "ownerReferences": [owner_reference(name=runtime, uid=runtime_uid)],
        },
        "addressType": family,
        "endpoints": items,
        "ports": ports,
    }


def slice_shape(eps: dict[str, Any]) -> str:
    """What Baton writes of an EndpointSlice, canonical: equal shapes need no write."""
    endpoints = []
    for e in eps.get("endpoints") or []:
        cond = e.get("conditions") or {}
        ref = e.get("targetRef") or {}
        endpoints.append({"addresses": list(e.get("addresses") or []), "nodeName": e.get("nodeName"),
                          "ready": cond.get("ready"), "serving": cond.get("serving"), "terminating": cond.get("terminating"),
                          "ref": [ref.get("kind"), ref.get("namespace"), ref.get("name"), ref.get("uid")]})
    ports = [{"name": pt.get("name") or "", "port": pt.get("port"), "protocol": pt.get("protocol") or "TCP"}
             for pt in eps.get("ports") or []]
    return json.dumps({"addressType": eps.get("addressType"), "endpoints": endpoints, "ports": ports}, sort_keys=True)


# The label every namespace carries (the API server sets it to the namespace's name).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def build_tool_pod_policy(
    *, namespace: str, runtime: str, runtime_uid: str, isolation: obs.ToolPodIsolation,
) -> dict[str, Any]:
    """The NetworkPolicy that closes the direct path to a gateway-routed runtime's pods (every
    generation's: LABEL_RUNTIME): ingress on any port from the gateway's pods, which forward the
    calls, and from the operator's, which send the drain probe, both in the system namespace;
    from nowhere else. Owned by the runtime (garbage-collected with it)."""
    def peer(pod_labels: dict[str, str]) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: isolation.system_namespace}},
                "podSelector": {"matchLabels": pod_labels}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.tool_pod_policy_name(runtime),
            "namespace": namespace,
            "labels": {names.LABEL_RUNTIME: runtime, names.LABEL_HASH_BUCKET: shardhash.hash_bucket(runtime_uid)},
            "ownerReferences": [owner_reference(name=runtime, uid=runtime_uid)],
        },
        "spec": {
            "podSelector": {"matchLabels": {names.LABEL_RUNTIME: runtime}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [peer({names.LABEL_COMPONENT: names.COMPONENT_GATEWAY}),
                                  peer(dict(isolation.operator_pod_labels))]}],
        },
    }


def policy_shape(policy: dict[str, Any]) -> str:
    """What Baton writes of the NetworkPolicy (its spec), canonical: equal shapes need no write."""
    return json.dumps(policy.get("spec") or {}, sort_keys=True)


def config_refs(template: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(kind, name, optional) of every ConfigMap and Secret the pod template references."""
    spec = template.get("spec") or {}
    refs: set[tuple[str, str, bool]] = set()

    def add(kind: str, ref: dict[str, Any] | None, name_key: str = "name") -> None:
        if ref and ref.get(name_key):
            refs.add((kind, str(ref[name_key]), bool(ref.get("optional", False))))

    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            for env in c.get("env") or []:
                source = env.get("valueFrom") or {}
                add("ConfigMap", source.get("configMapKeyRef"))
                add("Secret", source.get("secretKeyRef"))
            for env_from in c.get("envFrom") or []:
                add("ConfigMap", env_from.get("configMapRef"))
                add("Secret", env_from.get("secretRef"))
    for vol in spec.get("volumes") or []:
        add("ConfigMap", vol.get("configMap"))
        add("Secret", vol.get("secret"), "secretName")
        for source in (vol.get("projected") or {}).get("sources") or []:
            add("ConfigMap", source.get("configMap"))
            add("Secret", source.get("secret"))
    # One entry per object; a reference that is required anywhere is required.
    merged: dict[tuple[str, str], bool] = {}
    for kind, name, optional in refs:
        merged[(kind, name)] = merged.get((kind, name), True) and optional
    return sorted((k, n, o) for (k, n), o in merged.items())
