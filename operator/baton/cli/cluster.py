"""The plugin's adapter on the API server: connect as kubectl would (``baton.cli.kubeconfig``), read
and list ToolRuntimes (a list as the server's Table, so the CRD's printer columns are the one
source of `list`'s columns), write an annotation, spec.suspend or the finalizers, as the
kubeconfig's user or the one impersonated (--as, --as-group), and explain an API error or an
unreachable server in one line.

Does I/O (the API server, over the standard library's http.client: one connection per call of the
plugin, no retry). The only module of the plugin that talks to the API server; it imports neither
the official client nor urllib3 (their import alone took most of a call's time), and http.client
and ssl only when a verb needs the server.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from baton.cli import kubeconfig as kubeconfig_file
from baton.cli import requests
from baton.model import names

if TYPE_CHECKING:
    import http.client

# kubectl's own Accept for `kubectl get`: a Table (meta.k8s.io/v1), else the plain list.
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
PAGE = 500  # kubectl get's --chunk-size


class ApiException(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body


class Unreachable(Exception):
    """No answer from the API server (refused, timed out, TLS, a broken connection): its cause."""


# NamedTuples, not dataclasses: importing dataclasses (and inspect) is a tenth of a call's time.
class Impersonation(NamedTuple):
    """kubectl's --as and --as-group: the Impersonate-User header, one Impersonate-Group header per group."""

    user: str | None = None
    groups: tuple[str, ...] = ()


class Transport:
    """HTTP(S) to one API server with the kubeconfig's credentials; one request at a time."""

    def __init__(self, creds: kubeconfig_file.Credentials, *, timeout: float | None, impersonate: Impersonation) -> None:
        self.creds = creds
        self.timeout = timeout
        self.impersonate = impersonate
        url = urllib.parse.urlsplit(creds.server)
        self.https = url.scheme == "https"
        self.host = url.hostname or ""
        self.port = url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        import http.client

        if self._conn is not None:
            return self._conn
        proxy = self.creds.proxy or _env_proxy(self.host, https=self.https)
        target, port = self.host, self.port
        if proxy:
            p = urllib.parse.urlsplit(proxy)
            target, port = p.hostname or "", p.port or 80
        conn: http.client.HTTPConnection
        if self.https:
            conn = _https(target, port, context=_tls(self.creds), timeout=self.timeout,
                          server_name=self.creds.tls_server_name or self.host)
        else:
            conn = http.client.HTTPConnection(target, port, timeout=self.timeout)
        if proxy:
            conn.set_tunnel(self.host, self.port)
        self._conn = conn
        return conn

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None, body: Any = None,
                content_type: str = "application/merge-patch+json", accept: str = "application/json") -> Any:
        """The decoded JSON answer; ApiException for an error status, Unreachable for no answer."""
        import http.client

        url = self.prefix + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers: list[tuple[str, str]] = [("Accept", accept), ("User-Agent", "kubectl-baton")]
        payload = None if body is None else json.dumps(body).encode()
        if payload is not None:
            headers += [("Content-Type", content_type), ("Content-Length", str(len(payload)))]
        if self.creds.token:
            headers.append(("Authorization", f"Bearer {self.creds.token}"))
        elif self.creds.basic:
            import base64

            pair = base64.b64encode(":".join(self.creds.basic).encode()).decode()
            headers.append(("Authorization", f"Basic {pair}"))
        user = self.impersonate.user or self.creds.impersonate_user
        if user:
            groups = self.impersonate.groups if self.impersonate.user else self.creds.impersonate_groups
            # One header per group: the API server reads each Impersonate-Group header as one group.
            headers += [("Impersonate-User", user), *[("Impersonate-Group", g) for g in groups]]
        try:
            conn = self._connection()
            conn.putrequest(method, url, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            conn.endheaders(payload)
            answer = conn.getresponse()
            raw = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise Unreachable(_reason(exc)) from exc
        if answer.will_close:
            self.close()
        if answer.status >= 400:
            raise ApiException(answer.status, answer.reason, raw.decode(errors="replace"))
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise Unreachable(f"the answer to {method} {path} is not JSON ({len(raw)} bytes)") from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _https(host: str, port: int, *, context: Any, timeout: float | None,
           server_name: str) -> http.client.HTTPConnection:
    """HTTPS whose certificate is checked against `server_name` (the kubeconfig's tls-server-name,
    else the server's host), which is also the SNI sent, whatever address is dialled (a proxy)."""
    import http.client

    class Https(http.client.HTTPSConnection):
        def connect(self) -> None:
            http.client.HTTPConnection.connect(self)  # TCP, and the proxy's CONNECT tunnel if any
            self.sock = context.wrap_socket(self.sock, server_hostname=server_name)

    return Https(host, port, context=context, timeout=timeout)


def _tls(creds: kubeconfig_file.Credentials) -> Any:
    import ssl

    if creds.insecure:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cadata=creds.ca_pem) if creds.ca_pem else ssl.create_default_context()
    if creds.cert_pem and creds.key_pem:
        _load_cert_chain(ctx, cert=creds.cert_pem, key=creds.key_pem)
    return ctx


def _load_cert_chain(ctx: Any, *, cert: bytes, key: bytes) -> None:
    """ssl loads a client certificate from files only: anonymous in-memory files where Linux has
    them (nothing on disk), else files 0600 in a private directory, removed once read."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds = [os.memfd_create("kubectl-baton-cert"), os.memfd_create("kubectl-baton-key")]
        try:
            for fd, data in zip(fds, (cert, key)):
                os.write(fd, data)
            ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kubectl-baton-") as d:
        paths = [os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")]
        for path, data in zip(paths, (cert, key)):
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
        ctx.load_cert_chain(paths[0], paths[1])


def _env_proxy(host: str, *, https: bool) -> str | None:
    """HTTPS_PROXY/HTTP_PROXY as Go's ProxyFromEnvironment reads them: never for localhost or a
    loopback address, nor a host NO_PROXY names."""
    names_ = ("HTTPS_PROXY", "https_proxy") if https else ("HTTP_PROXY", "http_proxy")
    proxy = next((os.environ[n] for n in names_ if os.environ.get(n)), None)
    if not proxy or host == "localhost" or host.startswith("127.") or host == "::1":
        return None
    import urllib.request

    if urllib.request.proxy_bypass(host):  # NO_PROXY (and, on macOS, the system settings)
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    if not proxy.lower().startswith("http://"):
        raise requests.Refused(f"{'HTTPS' if https else 'HTTP'}_PROXY {proxy!r}: the plugin supports only http:// proxies")
    return proxy


def _reason(exc: BaseException) -> str:
    """The root cause of a failed request, in a few words."""
    import ssl

    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}" if not isinstance(exc, ssl.SSLCertVerificationError) \
            else f"TLS: {exc.verify_message or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class Cluster(NamedTuple):
    transport: Transport
    default_namespace: str
    server: str


def connect(*, kubeconfig: str | None, context: str | None, timeout: float | None,
            impersonate: Impersonation = Impersonation()) -> Cluster:
    """Load the kubeconfig as kubectl would (--kubeconfig, else KUBECONFIG, else ~/.kube/config;
    in a pod without one, the in-cluster account). Nothing is sent yet."""
    if impersonate.groups and not impersonate.user:
        # The API server refuses groups without a user; kubectl says so before sending anything.
        raise requests.Refused("requesting groups (--as-group) without impersonating a user (--as)")
    try:
        creds = kubeconfig_file.load(kubeconfig=kubeconfig, context=context)
    except FileNotFoundError as exc:
        raise requests.Refused(f"no kubeconfig: {exc.args[0]} does not exist (pass --kubeconfig, or set KUBECONFIG)") from exc
    except kubeconfig_file.Invalid as exc:
        raise requests.Refused(f"invalid kubeconfig {exc}") from exc
    except OSError as exc:
        raise requests.Refused(f"cannot read kubeconfig {exc.filename}: {exc.strerror or exc}") from exc
    return Cluster(transport=Transport(creds, timeout=timeout, impersonate=impersonate),
                   default_namespace=creds.namespace, server=creds.server)


def _path(namespace: str | None, name: str | None = None) -> str:
    base = f"/apis/{names.GROUP}/{names.VERSION}"
    if namespace is not None:
        base += "/namespaces/" + urllib.parse.quote(namespace, safe="")
    base += "/" + names.PLURAL
    return base + ("" if name is None else "/" + urllib.parse.quote(name, safe=""))


def get_runtime(cluster: Cluster, *, namespace: str, name: str) -> dict[str, Any]:
    try:
        return dict(cluster.transport.request("GET", _path(namespace, name)))
    except ApiException as exc:
        if exc.status != 404:
            raise
        if _crd_missing(exc):
            raise
        hint = ""
        try:
            found = cluster.transport.request("GET", _path(None), query={"fieldSelector": f"metadata.name={name}"})
            spaces = sorted({i["metadata"]["namespace"] for i in found.get("items", [])})
            if spaces:
                hint = f"; it exists in namespace(s) {', '.join(spaces)} (use -n)"
        except ApiException:
            pass  # not allowed to list cluster-wide: no hint
        raise requests.Refused(f"toolruntime {name!r} not found in namespace {namespace!r}{hint}") from exc


def _pages(cluster: Cluster, *, namespace: str | None, accept: str) -> list[dict[str, Any]]:
    """Every page of a list (kubectl's chunks of 500), in order."""
    pages: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {"limit": str(PAGE), **({"continue": token} if token else {})}
        page = cluster.transport.request("GET", _path(namespace), query=query, accept=accept)
        pages.append(page)
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return pages


def list_runtimes(cluster: Cluster, *, namespace: str | None) -> list[dict[str, Any]]:
    return [dict(i) for page in _pages(cluster, namespace=namespace, accept="application/json")
            for i in page.get("items") or []]


def list_table(cluster: Cluster, *, namespace: str | None) -> dict[str, Any]:
    """The ToolRuntimes as the API server's Table (meta.k8s.io/v1): the CRD's printer columns,
    its cells, and each row's object metadata (the namespace, for -A)."""
    pages = _pages(cluster, namespace=namespace, accept=TABLE)
    if pages[0].get("kind") != "Table":
        raise requests.Refused(f"the API server at {cluster.server} did not answer with a Table "
                               f"(kind {pages[0].get('kind')!r})")
    table = dict(pages[0])
    table["rows"] = [r for p in pages for r in p.get("rows") or []]
    return table


def list_range_leases(cluster: Cluster, *, namespace: str | None) -> list[dict[str, Any]]:
    """The sharding's range Leases (baton.dev/component=shard-range) in the operator's namespace,
    or in every namespace when it is not given (one LIST: a few dozen small objects)."""
    path = "/apis/coordination.k8s.io/v1"
    if namespace is not None:
        path += "/namespaces/" + urllib.parse.quote(namespace, safe="")
    query = {"labelSelector": f"{names.LABEL_COMPONENT}={names.COMPONENT_SHARD_RANGE}"}
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        page = cluster.transport.request("GET", path + "/leases",
                                         query={**query, "limit": str(PAGE), **({"continue": token} if token else {})})
        items += [dict(i) for i in page.get("items") or []]
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def annotate(cluster: Cluster, *, rt: Mapping[str, Any], key: str, value: str) -> None:
    meta = rt["metadata"]
    # resourceVersion: the check above was made on this version; a change since is a 409.
    cluster.transport.request("PATCH", _path(meta["namespace"], meta["name"]), body={
        "metadata": {"annotations": {key: value}, "resourceVersion": meta["resourceVersion"]}})


def set_suspend(cluster: Cluster, *, rt: Mapping[str, Any], suspend: bool) -> None:
    meta = rt["metadata"]
    # A merge patch of one field: setting it twice is the same, so no resourceVersion.
    cluster.transport.request("PATCH", _path(meta["namespace"], meta["name"]), body={"spec": {"suspend": suspend}})


def set_finalizers(cluster: Cluster, *, rt: Mapping[str, Any], finalizers: list[str]) -> None:
    meta = rt["metadata"]
    # resourceVersion: the finalizers were read on this version; a change since is a 409.
    cluster.transport.request("PATCH", _path(meta["namespace"], meta["name"]), body={
        "metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}})


def _crd_missing(exc: ApiException) -> bool:
    # A 404 for one object is a Status naming it (details.name); a 404 for the resource type has
    # no name, or is not a Status at all ("404 page not found").
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return True
    return not (isinstance(body, dict) and (body.get("details") or {}).get("name"))


def explain_api_error(exc: ApiException) -> str:
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
