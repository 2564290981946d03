"""An async client of the Kubernetes API on aiohttp: plain JSON in and out, every request bounded.

Why not the official client here: it is synchronous (one thread per call in flight: the old
execution layer shared a 32-thread pool between reads, writes, renewals and probes, and 1000
runtimes livelocked), and it builds model objects Baton never uses. Why not
kubernetes_asyncio or lightkube: both would add a dependency for what is, for Baton, a dozen
paths; kopf already brings aiohttp. Credentials come from the official client's loaders
(kubeconfig, in-cluster account); a kubeconfig's `tls-server-name` and http(s) `proxy-url` are
honoured, and a setting this client cannot honour (a socks5 proxy) is refused at startup.

Two instances run side by side: one for the work, one (a connection pool of its own) for Lease
renewals, so no queue of other requests can delay a renewal.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import json
import ssl
import time
from typing import Any, AsyncIterator, Callable, Mapping
from urllib.parse import quote, urlencode

import aiohttp
import kubernetes

from baton import metrics

# (connect, read) seconds for ordinary requests: a half-open connection can block nothing for
# longer. The read bound stays well under the shortest Lease duration a holder acts within.
CONNECT_TIMEOUT_SECONDS = 3.0
READ_TIMEOUT_SECONDS = 10.0
# Re-read the bearer token (rotated service-account tokens, exec plugins) at most this often.
TOKEN_REFRESH_SECONDS = 60.0
# The longest watch line read. The API server refuses a request body over 3 MiB, so no stored
# object comes near this; a longer line is a broken stream, and the watcher lists again.
MAX_WATCH_LINE_BYTES = 16 * 1024 * 1024
# What a metadata-only list or watch asks for (as controller-runtime's metadata informers do):
# the API server answers with PartialObjectMetadata(List), so an object's data never crosses
# the wire. Plain JSON stays acceptable: a server that cannot convert sends whole objects, which
# the store reduces all the same.
ACCEPT_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
ACCEPT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}"[:500])
        self.status, self.reason, self.message = status, reason, message


class WatchStreamError(Exception):
    """A watch stream that cannot be read on from where it stands (an undecodable or oversized
    line): resuming from the same resourceVersion would replay it, so the watcher lists again."""


async def split_lines(chunks: AsyncIterator[bytes], *, limit: int = MAX_WATCH_LINE_BYTES) -> AsyncIterator[bytes]:
    """The newline-separated lines of a byte stream, however the chunks fall, each at most
    `limit` bytes (else WatchStreamError). aiohttp's own line reader refuses lines over twice
    its buffer (about 512 KiB), which one large object in the watched scope reaches."""
    pending = bytearray()
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if len(pending) + end - start > limit:
                raise WatchStreamError(f"a watch line over {limit} bytes")
            pending += chunk[start:end]
            yield bytes(pending)
            pending.clear()
            start = end + 1
        pending += chunk[start:]
        if len(pending) > limit:
            raise WatchStreamError(f"a watch line over {limit} bytes")
    if pending:
        yield bytes(pending)


def decode_watch_line(line: bytes) -> dict[str, Any] | None:
    """One watch event, None for a blank line; WatchStreamError for anything not a JSON object."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise WatchStreamError(f"undecodable watch line ({len(line)} bytes): {exc}") from exc
    if not isinstance(event, dict):
        raise WatchStreamError(f"a watch line that is not an object ({len(line)} bytes)")
    return event


def is_namespace_terminating(exc: BaseException) -> bool:
    """A create refused because its namespace is being deleted (the NamespaceLifecycle admission
    plugin: 403 "... because it is being terminated"). Nothing can be created there again, by
    anyone: no Lease, and no pod."""
    return isinstance(exc, ApiError) and exc.status == 403 and "because it is being terminated" in exc.message


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiError) and exc.status in codes


def is_uid_mismatch(exc: BaseException) -> bool:
    """A merge patch carrying metadata.uid sent to a name that now holds another object: the API
    server answers 422 Invalid ("metadata.uid: ... field is immutable"), not 409 (checked against
    kube-apiserver 1.36: tests/integration/test_k8s_adapters.py). Status subresources ignore
    metadata.uid altogether: there a JSON patch `test` of /metadata/uid is the guard."""
    return isinstance(exc, ApiError) and exc.status == 422 and "metadata.uid" in exc.message


def _resource_of(path: str) -> str:
    """`/api/v1/namespaces/ns/pods/x/status` -> `pods/status` (a bounded label value)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        rest = parts[i + 2:]
    elif parts[:1] == ["api"]:
        rest = parts[2:]
    else:
        rest = parts[3:]
    if not rest:
        return "namespaces" if "namespaces" in parts else "unknown"
    return rest[0] + ("/" + rest[2] if len(rest) > 2 else "")


# asyncio gives every TLS connection a 256 KiB read buffer, filled with zeros when the connection
# opens, so resident at once. A replica holds a connection per watch (five per held range when
# sharded) and per pooled request: about 20 MiB of buffers for 8 ranges, measured (bench.scale,
# docs/performance.md). TLS records are at most 16 KiB, and aiohttp reads 64 KiB at a time, so a
# smaller buffer costs only more, cheaper reads. asyncio has no per-connection setting: this sets
# the class default, for every TLS connection in the process (the gateway's to the API server too).
TLS_READ_BUFFER_BYTES = 32 * 1024


def use_small_tls_read_buffers() -> None:
    """Lower asyncio's TLS read buffer to TLS_READ_BUFFER_BYTES (where it has one to lower)."""
    protocol = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol is not None and getattr(protocol, "max_size", 0) > TLS_READ_BUFFER_BYTES:
        protocol.max_size = TLS_READ_BUFFER_BYTES


class Api:
    """One connection pool to the API server. Create it inside the running event loop."""

    def __init__(self, cfg: kubernetes.client.Configuration, *, name: str, pool_size: int = 32) -> None:
        self._cfg = cfg
        self.name = name
        self.host = cfg.host.rstrip("/")
        ssl_ctx: ssl.SSLContext | bool = False
        if self.host.startswith("https"):
            use_small_tls_read_buffers()
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else ssl._create_unverified_context()
            if cfg.cert_file and cfg.key_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            ssl_ctx = ctx
        # kubeconfig `tls-server-name` and `proxy-url` (the official loader puts them here):
        # sent with every request, as kubectl would (check_connection_settings refuses the rest).
        self._extra: dict[str, Any] = {}
        if getattr(cfg, "tls_server_name", None) and self.host.startswith("https"):
            self._extra["server_hostname"] = cfg.tls_server_name
        if getattr(cfg, "proxy", None):
            self._extra["proxy"] = cfg.proxy
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool_size, ssl=ssl_ctx, keepalive_timeout=60),
            timeout=self._timeout(CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS),
            json_serialize=json.dumps,
        )
        self._auth: str | None = None
        self._auth_at = -1e9

    async def close(self) -> None:
        await self._session.close()

    @staticmethod
    def _timeout(total: float) -> aiohttp.ClientTimeout:
        # sock_connect, not connect: aiohttp's `connect` also counts waiting for a free pooled
        # connection, which under load is queueing, not a dead peer. `total` bounds both.
        return aiohttp.ClientTimeout(total=total, sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=READ_TIMEOUT_SECONDS)

    def _headers(self, content_type: str | None = None, accept: str = "application/json") -> dict[str, str]:
        now = time.monotonic()
        if now - self._auth_at > TOKEN_REFRESH_SECONDS:
            # Runs the official loaders' refresh hook (in-cluster token file, exec plugins).
            self._auth = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
            self._auth_at = now
        headers = {"Accept": accept, "User-Agent": "baton"}
        if self._auth:
            headers["Authorization"] = self._auth
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """The decoded JSON body; ApiError for any non-2xx answer."""
        url = self.host + path + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        resource = _resource_of(path)
        t0 = time.monotonic()
        code = "error"
        try:
            async with self._session.request(
                method, url, data=data, headers=self._headers(content_type if data is not None else None, accept),
                timeout=self._timeout(timeout or CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS), **self._extra,
            ) as resp:
                code = str(resp.status)
                raw = await resp.read()
                if resp.status >= 300:
                    raise _error(resp.status, resp.reason or "", raw)
                return json.loads(raw) if raw else None
        except asyncio.TimeoutError:
            code = "timeout"
            raise
        finally:
            metrics.API_REQUESTS.labels(client=self.name, verb=method, resource=resource, code=code).inc()
            metrics.API_LATENCY.labels(client=self.name, verb=method, resource=resource).observe(time.monotonic() - t0)

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self.request("GET", path)
            return obj
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                   limit: int = 500, each: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                   metadata_only: bool = False, shard_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """Every item (paged), and the list's resourceVersion to watch from. `each` maps every
        item as its page arrives, so only what it returns is held while later pages load.
        `metadata_only`: each item is a PartialObjectMetadata (kind, apiVersion, metadata)."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"limit": limit}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if shard_selector:
            query["shardSelector"] = shard_selector
        while True:
            page = await self.request("GET", path, query=query, timeout=60,
                                      accept=ACCEPT_METADATA_LIST if metadata_only else "application/json")
            meta = page.get("metadata") or {}
            page_items: list[dict[str, Any]] = page.get("items") or []
            items += page_items if each is None else [each(item) for item in page_items]
            del page, page_items
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")
            query["continue"] = cont

    async def watch(self, path: str, *, resource_version: str, label_selector: str | None = None,
                    field_selector: str | None = None, timeout_seconds: int = 300,
                    metadata_only: bool = False, shard_selector: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Watch events ({type, object}) from `resource_version`, with bookmarks; ends when the
        server closes the stream (timeout_seconds) or the client gives up on silence.
        `metadata_only`: each event's object is a PartialObjectMetadata."""
        query: dict[str, Any] = {"watch": "true", "resourceVersion": resource_version,
                                 "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if shard_selector:
            query["shardSelector"] = shard_selector
        url = self.host + path + "?" + urlencode(query)
        # Bookmarks arrive about once a minute: silence much longer than that is a dead stream.
        timeout = aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=90)
        headers = self._headers(accept=ACCEPT_METADATA if metadata_only else "application/json")
        async with self._session.get(url, headers=headers, timeout=timeout, **self._extra) as resp:
            metrics.API_REQUESTS.labels(client=self.name, verb="WATCH", resource=_resource_of(path),
                                        code=str(resp.status)).inc()
            if resp.status >= 300:
                raise _error(resp.status, resp.reason or "", await resp.read())
            received = metrics.WATCH_BYTES.labels(resource=_resource_of(path))
            async for line in split_lines(resp.content.iter_any()):
                received.inc(len(line) + 1)
                event = decode_watch_line(line)
                if event is not None:
                    yield event


# The proxy schemes aiohttp speaks (a CONNECT tunnel for https); kubectl also takes socks5.
PROXY_SCHEMES = ("http", "https")


def check_connection_settings(cfg: kubernetes.client.Configuration) -> None:
    """Refuse, naming the kubeconfig field, a connection setting this client cannot honour
    (ValueError), rather than connect some other way than kubectl would."""
    proxy = getattr(cfg, "proxy", None)
    if proxy:
        scheme = str(proxy).split("://", 1)[0].lower() if "://" in str(proxy) else ""
        if scheme not in PROXY_SCHEMES:
            raise ValueError(f"kubeconfig cluster field proxy-url {proxy!r}: Baton supports only "
                             f"{' and '.join(s + '://' for s in PROXY_SCHEMES)} proxies")


def _error(status: int, reason: str, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw)
        return ApiError(status, str(body.get("reason") or reason), str(body.get("message") or ""))
    except ValueError:
        return ApiError(status, reason, raw[:200].decode(errors="replace"))


def path(group_version: str, plural: str, namespace: str | None = None, name: str | None = None,
         sub: str | None = None) -> str:
    """`v1` -> /api/v1/..., `coordination.k8s.io/v1` -> /apis/coordination.k8s.io/v1/..."""
    base = "/api/" + group_version if "/" not in group_version else "/apis/" + group_version
    if namespace is not None:
        base += "/namespaces/" + quote(namespace, safe="")
    base += "/" + plural
    if name is not None:
        base += "/" + quote(name, safe="")
    if sub is not None:
        base += "/" + sub
    return base
