"""The plugin's kubeconfig loader: what kubectl reads to reach the API server, without the official
client (whose import alone took 0.73 s of each call; docs/performance.md, "The plugin").

kubectl's rules: --kubeconfig (one file), else KUBECONFIG (files merged, the first to set a name
or current-context wins), else ~/.kube/config; the context --context names, else current-context;
relative file paths are relative to the kubeconfig that names them; in a pod without a kubeconfig,
the pod's service account. Honoured: certificate-authority(-data), insecure-skip-tls-verify,
tls-server-name, proxy-url (http://, a CONNECT tunnel), client-certificate(-data) and
client-key(-data), token, tokenFile, username/password, an exec credential plugin
(client.authentication.k8s.io), an oidc auth-provider's id-token, and the user's as/as-groups.
Anything else it cannot honour is refused with the field named, never ignored.

Does I/O: reads the kubeconfig files and the files they name, runs an exec plugin.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, NamedTuple


class Invalid(Exception):
    """The kubeconfig cannot be used: one line naming the file and the field."""


# NamedTuples, not dataclasses: importing dataclasses (and inspect) is a tenth of a call's time.
class Credentials(NamedTuple):
    server: str
    namespace: str
    ca_pem: str | None = None  # PEM text of the CA bundle; None: the system's
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None  # http://host:port (a CONNECT tunnel)
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    basic: tuple[str, str] | None = None
    impersonate_user: str | None = None
    impersonate_groups: tuple[str, ...] = ()


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# An exec plugin that asks nothing answers at once; one that hangs is not waited for past this.
EXEC_TIMEOUT_SECONDS = 60.0


def paths(kubeconfig: str | None) -> list[str]:
    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    return [os.path.expanduser("~/.kube/config")]


def load(*, kubeconfig: str | None, context: str | None) -> Credentials:
    """The credentials of the chosen context; Invalid with one line otherwise. FileNotFoundError
    (naming the path) when no kubeconfig exists and no service account applies."""
    files = paths(kubeconfig)
    existing = [p for p in files if os.path.exists(p)]
    if not existing:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return in_cluster()
        raise FileNotFoundError(os.pathsep.join(files))
    merged = _merge(existing)
    return _resolve(merged, context=context, where=os.pathsep.join(existing))


def _read(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw = f.read()
    doc: Any
    try:
        # JSON is YAML too, and json is already loaded: PyYAML's import is skipped for it.
        doc = json.loads(raw) if raw.lstrip()[:1] == b"{" else None
    except ValueError:
        doc = None
    if doc is None:
        import yaml

        try:
            doc = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506  # a safe loader
        except yaml.YAMLError as exc:
            raise Invalid(f"{path}: not YAML: {exc}") from exc
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise Invalid(f"{path}: not a kubeconfig (a mapping at the top)")
    return doc


class _Merged:
    def __init__(self) -> None:
        self.current_context = ""
        # name -> (the entry's mapping, the directory of the file that defined it)
        self.contexts: dict[str, tuple[dict[str, Any], str]] = {}
        self.clusters: dict[str, tuple[dict[str, Any], str]] = {}
        self.users: dict[str, tuple[dict[str, Any], str]] = {}


def _merge(files: list[str]) -> _Merged:
    """client-go's merge: the first file to define a name (or current-context) wins."""
    merged = _Merged()
    for path in files:
        doc = _read(path)
        base = os.path.dirname(os.path.abspath(path))
        if not merged.current_context and doc.get("current-context"):
            merged.current_context = str(doc["current-context"])
        for key, field, into in (("contexts", "context", merged.contexts), ("clusters", "cluster", merged.clusters),
                                 ("users", "user", merged.users)):
            for entry in doc.get(key) or []:
                if not isinstance(entry, dict) or not entry.get("name"):
                    raise Invalid(f"{path}: an entry of {key} has no name")
                body = entry.get(field) or {}
                if not isinstance(body, dict):
                    raise Invalid(f"{path}: {key} {entry['name']!r}: {field} is not a mapping")
                into.setdefault(str(entry["name"]), (body, base))
    return merged


def _resolve(m: _Merged, *, context: str | None, where: str) -> Credentials:
    name = context or m.current_context
    if not name:
        raise Invalid(f"{where}: no current-context is set (pass --context)")
    if name not in m.contexts:
        raise Invalid(f"{where}: context {name!r} does not exist" + (
            f" (there are: {', '.join(sorted(m.contexts))})" if m.contexts else " (no contexts)"))
    ctx, _ = m.contexts[name]
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    if cluster_name not in m.clusters:
        raise Invalid(f"{where}: context {name!r}: cluster {cluster_name!r} does not exist")
    cluster, cbase = m.clusters[cluster_name]
    user, ubase = m.users.get(user_name, ({}, ""))
    if user_name and user_name not in m.users:
        raise Invalid(f"{where}: context {name!r}: user {user_name!r} does not exist")
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise Invalid(f"{where}: cluster {cluster_name!r}: server {server!r} is not an http(s):// URL")
    proxy = cluster.get("proxy-url") or None
    if proxy and not str(proxy).lower().startswith("http://"):
        raise Invalid(f"{where}: cluster {cluster_name!r}: proxy-url {proxy!r}: the plugin supports only "
                      "http:// proxies")
    what = f"{where}: cluster {cluster_name!r}"
    ca = _pem(cluster, "certificate-authority", base=cbase, what=what)
    creds: dict[str, Any] = {
        "server": server.rstrip("/"), "namespace": str(ctx.get("namespace") or "default"),
        "ca_pem": ca.decode() if ca is not None else None, "insecure": bool(cluster.get("insecure-skip-tls-verify")),
        "tls_server_name": cluster.get("tls-server-name") or None, "proxy": proxy,
        "impersonate_user": user.get("as") or None,
        "impersonate_groups": tuple(str(g) for g in user.get("as-groups") or ()),
    }
    creds.update(_user(user, base=ubase, what=f"{where}: user {user_name!r}", server=server, cluster=cluster))
    return Credentials(**creds)


def _pem(section: dict[str, Any], field: str, *, base: str, what: str) -> bytes | None:
    """`field-data` (base64 PEM) or `field` (a file path, relative to the kubeconfig's directory)."""
    data = section.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError as exc:
            raise Invalid(f"{what}: {field}-data is not base64: {exc}") from exc
    path = section.get(field)
    if path:
        full = os.path.join(base, os.path.expanduser(str(path)))
        try:
            with open(full, "rb") as f:
                return f.read()
        except OSError as exc:
            raise Invalid(f"{what}: {field} {full}: {exc.strerror or exc}") from exc
    return None


def _user(user: dict[str, Any], *, base: str, what: str, server: str, cluster: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cert = _pem(user, "client-certificate", base=base, what=what)
    key = _pem(user, "client-key", base=base, what=what)
    if (cert is None) != (key is None):
        raise Invalid(f"{what}: client-certificate and client-key go together (one is missing)")
    out["cert_pem"], out["key_pem"] = cert, key
    if user.get("token"):
        out["token"] = str(user["token"])
    elif user.get("tokenFile"):
        full = os.path.join(base, str(user["tokenFile"]))
        try:
            with open(full) as f:
                out["token"] = f.read().strip()
        except OSError as exc:
            raise Invalid(f"{what}: tokenFile {full}: {exc.strerror or exc}") from exc
    if user.get("username"):
        out["basic"] = (str(user["username"]), str(user.get("password") or ""))
    if user.get("exec"):
        out.update(_exec(user["exec"], what=f"{what}: exec", server=server, cluster=cluster))
    provider = user.get("auth-provider")
    if provider:
        cfg = provider.get("config") or {}
        if provider.get("name") != "oidc" or not cfg.get("id-token"):
            # gcp and azure left kubectl in 1.26 (exec plugins replaced them); a refresh is the IdP's.
            raise Invalid(f"{what}: auth-provider {provider.get('name')!r}: the plugin honours only an oidc "
                          "id-token; use an exec credential plugin (kubelogin, gke-gcloud-auth-plugin)")
        out["token"] = str(cfg["id-token"])
    return out


def _exec(spec: dict[str, Any], *, what: str, server: str, cluster: dict[str, Any]) -> dict[str, Any]:
    """Run a client.authentication.k8s.io exec plugin once (kubectl runs it once per call too)."""
    import subprocess

    command = spec.get("command")
    if not command:
        raise Invalid(f"{what}: command is missing")
    api_version = str(spec.get("apiVersion") or "client.authentication.k8s.io/v1")
    env = dict(os.environ)
    for e in spec.get("env") or []:
        env[str(e.get("name"))] = str(e.get("value", ""))
    info: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if spec.get("provideClusterInfo"):
        info["spec"]["cluster"] = {
            "server": server, "tls-server-name": cluster.get("tls-server-name"),
            "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
            "certificate-authority-data": cluster.get("certificate-authority-data"),
            "proxy-url": cluster.get("proxy-url"), "config": cluster.get("extensions")}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        res = subprocess.run([str(command), *[str(a) for a in spec.get("args") or []]], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=EXEC_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Invalid(f"{what}: {command}: {getattr(exc, 'strerror', None) or exc}") from exc
    if res.returncode != 0:
        last = res.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise Invalid(f"{what}: {command} exited {res.returncode}: {last[0]}")
    try:
        status = json.loads(res.stdout).get("status") or {}
    except (ValueError, AttributeError) as exc:
        raise Invalid(f"{what}: {command} did not print an ExecCredential: {exc}") from exc
    out: dict[str, Any] = {}
    if status.get("token"):
        out["token"] = str(status["token"])
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        out["cert_pem"] = str(status["clientCertificateData"]).encode()
        out["key_pem"] = str(status["clientKeyData"]).encode()
    if not out:
        raise Invalid(f"{what}: {command}'s ExecCredential has neither a token nor a client certificate")
    return out


def in_cluster() -> Credentials:
    """The pod's service account, as client-go's rest.InClusterConfig reads it."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    try:
        with open(f"{SERVICE_ACCOUNT}/token") as f:
            token = f.read().strip()
        with open(f"{SERVICE_ACCOUNT}/ca.crt") as f:
            ca = f.read()
    except OSError as exc:
        raise Invalid(f"in-cluster service account: {exc.strerror or exc} ({exc.filename})") from exc
    try:
        with open(f"{SERVICE_ACCOUNT}/namespace") as f:
            namespace = f.read().strip() or "default"
    except OSError:
        namespace = "default"
    return Credentials(server=f"https://{host}:{port}", namespace=namespace, ca_pem=ca, token=token)
