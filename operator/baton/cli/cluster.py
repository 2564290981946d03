"""The plugin's adapter on the official kubernetes client: connect as kubectl would, read and list
ToolRuntimes, write an annotation, spec.suspend or the finalizers, as the kubeconfig's user or the one
impersonated (--as, --as-group), and explain an API error or an unreachable server in one line.

Does I/O (the API server, the kubeconfig). The only module of the plugin that imports kubernetes
or urllib3.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, cast

import kubernetes
import urllib3
import yaml
from kubernetes.client import exceptions as k8s_exceptions

from baton.cli import requests
from baton.model import names

# The errors main() reports in one line, named here so that only this module imports the client.
ApiException = k8s_exceptions.ApiException
HTTPError = urllib3.exceptions.HTTPError


@dataclasses.dataclass
class Cluster:
    api: kubernetes.client.CustomObjectsApi
    default_namespace: str
    server: str
    timeout: float | None  # None: no timeout (kubectl's --request-timeout=0)


@dataclasses.dataclass(frozen=True)
class Impersonation:
    """kubectl's --as and --as-group: the Impersonate-User header, one Impersonate-Group header per group."""

    user: str | None = None
    groups: tuple[str, ...] = ()


def connect(*, kubeconfig: str | None, context: str | None, timeout: float | None,
            impersonate: Impersonation = Impersonation()) -> Cluster:
    """Load the kubeconfig as kubectl would (--kubeconfig, else KUBECONFIG, else ~/.kube/config;
    in a pod without one, the in-cluster account)."""
    if impersonate.groups and not impersonate.user:
        # The API server refuses groups without a user; kubectl says so before sending anything.
        raise requests.Refused("requesting groups (--as-group) without impersonating a user (--as)")
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    paths = [p for p in path.split(os.pathsep) if p]
    config = kubernetes.client.Configuration()
    if not any(os.path.exists(p) for p in paths):
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
            namespace = _incluster_namespace()
            return _cluster(config, namespace=namespace, timeout=timeout, impersonate=impersonate)
        raise requests.Refused(f"no kubeconfig: {path} does not exist (pass --kubeconfig, or set KUBECONFIG)")
    try:
        # kubernetes.config is not annotated (unlike kubernetes.client).
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=config)
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException as exc:
        raise requests.Refused(f"invalid kubeconfig {path}: {exc}") from exc
    except (OSError, yaml.YAMLError) as exc:
        raise requests.Refused(f"cannot read kubeconfig {path}: {exc}") from exc
    if context:
        active = next((c for c in contexts if c["name"] == context), active)
    namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return _cluster(config, namespace=namespace, timeout=timeout, impersonate=impersonate)


def _incluster_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _cluster(config: kubernetes.client.Configuration, *, namespace: str, timeout: float | None,
             impersonate: Impersonation) -> Cluster:
    # One attempt: an unreachable server is reported at once, as kubectl does, not retried.
    config.retries = 0
    client = kubernetes.client.ApiClient(config)
    if impersonate.user:
        _impersonating(client, impersonate)
    api = kubernetes.client.CustomObjectsApi(client)
    return Cluster(api=api, default_namespace=namespace, server=config.host, timeout=timeout)


def _impersonating(client: kubernetes.client.ApiClient, impersonate: Impersonation) -> None:
    """Add the impersonation headers to every request this client sends. Not default_headers: that
    is a dict, one value per name, and the API server reads each Impersonate-Group header as one
    group (a comma-joined value would be one group named "a, b"); urllib3's HTTPHeaderDict sends a
    header once per value."""
    pool = client.rest_client.pool_manager
    send = pool.request

    def request(method: str, url: str, **kwargs: Any) -> Any:
        # The client passes everything after method and url by keyword (kubernetes.client.rest).
        h = urllib3.HTTPHeaderDict(dict(kwargs.pop("headers", None) or {}))
        h["Impersonate-User"] = str(impersonate.user)
        for group in impersonate.groups:
            h.add("Impersonate-Group", group)
        return send(method, url, headers=h, **kwargs)

    pool.request = request  # type: ignore[method-assign,assignment]  # same call, by keyword


def get_runtime(cluster: Cluster, *, namespace: str, name: str) -> dict[str, Any]:
    try:
        # Custom objects come back as decoded JSON; the client annotates them as `object`.
        return dict(cast("dict[str, Any]", cluster.api.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, name, _request_timeout=cluster.timeout)))
    except k8s_exceptions.ApiException as exc:
        if exc.status != 404:
            raise
        if _crd_missing(exc):
            raise
        hint = ""
        try:
            found = cast("dict[str, Any]", cluster.api.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.PLURAL, field_selector=f"metadata.name={name}",
                _request_timeout=cluster.timeout))
            spaces = sorted({i["metadata"]["namespace"] for i in found.get("items", [])})
            if spaces:
                hint = f"; it exists in namespace(s) {', '.join(spaces)} (use -n)"
        except k8s_exceptions.ApiException:
            pass  # not allowed to list cluster-wide: no hint
        raise requests.Refused(f"toolruntime {name!r} not found in namespace {namespace!r}{hint}") from exc


def list_runtimes(cluster: Cluster, *, namespace: str | None) -> list[dict[str, Any]]:
    if namespace is None:
        found = cluster.api.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL,
                                                       _request_timeout=cluster.timeout)
    else:
        found = cluster.api.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.PLURAL,
                                                          _request_timeout=cluster.timeout)
    return [dict(i) for i in cast("dict[str, Any]", found).get("items", [])]


def annotate(cluster: Cluster, *, rt: Mapping[str, Any], key: str, value: str) -> None:
    meta = rt["metadata"]
    # resourceVersion: the check above was made on this version; a change since is a 409.
    cluster.api.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, meta["namespace"], names.PLURAL, meta["name"],
        {"metadata": {"annotations": {key: value}, "resourceVersion": meta["resourceVersion"]}},
        _request_timeout=cluster.timeout,
    )


def set_suspend(cluster: Cluster, *, rt: Mapping[str, Any], suspend: bool) -> None:
    meta = rt["metadata"]
    # A merge patch of one field: setting it twice is the same, so no resourceVersion.
    cluster.api.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, meta["namespace"], names.PLURAL, meta["name"], {"spec": {"suspend": suspend}},
        _request_timeout=cluster.timeout, _content_type="application/merge-patch+json",
    )


def set_finalizers(cluster: Cluster, *, rt: Mapping[str, Any], finalizers: list[str]) -> None:
    meta = rt["metadata"]
    # resourceVersion: the finalizers were read on this version; a change since is a 409.
    cluster.api.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, meta["namespace"], names.PLURAL, meta["name"],
        {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}},
        _request_timeout=cluster.timeout,
    )


def _crd_missing(exc: k8s_exceptions.ApiException) -> bool:
    # A 404 for one object is a Status naming it (details.name); a 404 for the resource type has
    # no name, or is not a Status at all ("404 page not found").
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return True
    return not (isinstance(body, dict) and (body.get("details") or {}).get("name"))


def explain_api_error(exc: k8s_exceptions.ApiException) -> str:
    message = ""
    try:
        body = json.loads(exc.body or "{}")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except ValueError:
        pass
    if exc.status == 404 and _crd_missing(exc):
        return (f"the server does not serve {names.PLURAL}.{names.GROUP}/{names.VERSION}: is Baton's CRD installed? "
                "(kubectl apply -f crds/, or the Helm chart)")
    if exc.status == 409:
        return "the toolruntime changed while this ran; try again"
    if exc.status in (401, 403):
        return f"{exc.reason}: {message}" if message else f"{exc.status} {exc.reason}"
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


def unreachable_reason(exc: BaseException) -> str:
    """The root cause of a failed connection, without urllib3's object reprs."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        # NewConnectionError subclasses ConnectTimeoutError (urllib3's compatibility): not a timeout.
        timeout = (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError)
        if isinstance(cur, timeout) and not isinstance(cur, urllib3.exceptions.NewConnectionError):
            return "timed out"
        if isinstance(cur, OSError) and cur.strerror:
            return cur.strerror
        if isinstance(cur, urllib3.exceptions.SSLError):
            return f"TLS: {cur}"
        nxt = getattr(cur, "reason", None)
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
    text = str(exc)
    # urllib3's NewConnectionError starts with the connection object's repr: keep the message.
    return text.split("): ", 1)[-1] if "): " in text else text
