"""API client configuration and error helpers."""

from __future__ import annotations

import datetime
import json
import os
from typing import TYPE_CHECKING, Any, Callable, cast

import kubernetes
from kubernetes.client import exceptions as k8s_exceptions

if TYPE_CHECKING:
    import urllib3  # the client's transport; only named for typing here

ApiException = k8s_exceptions.ApiException

# Every request is bounded: (connect, read) seconds. Without a read timeout a half-open
# connection blocks a call forever while the Lease renewer keeps the Lease alive. The read
# timeout stays well under the shortest Lease duration (3 s minimum is refused; tests use 5).
CONNECT_TIMEOUT_SECONDS = 3.0
READ_TIMEOUT_SECONDS = 10.0


class _BoundedApiClient(kubernetes.client.ApiClient):
    """The official client, with a default (connect, read) timeout on every request."""

    def call_api(self, method: Any, url: Any, header_params: Any = None, body: Any = None,
                 post_params: Any = None, _request_timeout: Any = None) -> Any:
        return super().call_api(method, url, header_params, body, post_params,
                                _request_timeout or (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS))


_API: kubernetes.client.ApiClient | None = None
_LEASE_API: kubernetes.client.ApiClient | None = None


def api_client() -> kubernetes.client.ApiClient:
    """One shared client (one connection pool, reused: no TLS handshake per call)."""
    global _API
    if _API is None:
        _API = _BoundedApiClient(kubernetes.client.Configuration.get_default_copy())
    return _API


def lease_api_client() -> kubernetes.client.ApiClient:
    """Lease calls have a connection pool of their own: other work never queues ahead of them."""
    global _LEASE_API
    if _LEASE_API is None:
        _LEASE_API = _BoundedApiClient(kubernetes.client.Configuration.get_default_copy())
    return _LEASE_API


def load_config() -> None:
    """Kubeconfig when KUBECONFIG is set (tests, local runs), else the in-cluster account."""
    if os.environ.get("KUBECONFIG"):
        # kubernetes.config is not annotated (unlike kubernetes.client).
        kubernetes.config.load_kube_config(config_file=os.environ["KUBECONFIG"])  # type: ignore[no-untyped-call]
    else:
        try:
            kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    cfg = kubernetes.client.Configuration.get_default_copy()
    # Many runtimes act at once; the default pool of 4 connections would serialize them.
    cfg.connection_pool_maxsize = 32
    kubernetes.client.Configuration.set_default(cfg)
    global _API, _LEASE_API
    _API = _LEASE_API = None


def core() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client())


def custom() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client())


def coordination() -> kubernetes.client.CoordinationV1Api:
    return kubernetes.client.CoordinationV1Api(lease_api_client())


def discovery() -> kubernetes.client.DiscoveryV1Api:
    return kubernetes.client.DiscoveryV1Api(api_client())


def owned_by(obj: dict[str, Any], owner_uid: str) -> bool:
    """The object's controller ownerReference names `owner_uid`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner_uid and r.get("controller") for r in refs)


# Typing notes on the generated client (it ships py.typed):
# - write calls take manifests as plain dicts, which the client validates into its models at
#   call time (pydantic validate_call); its annotations name only the model, hence the
#   `# type: ignore[arg-type]` on those calls in this package;
# - reads made with _preload_content=False return the raw response: see json_of().


def read_or_none(read: Callable[..., object], *args: Any) -> dict[str, Any] | None:
    """GET an object as plain JSON; None when it does not exist (404)."""
    try:
        resp = read(*args, _preload_content=False)
    except ApiException as exc:
        if is_not_found(exc):
            return None
        raise
    data: dict[str, Any] = json_of(resp)
    return data


def json_of(resp: object) -> Any:
    """The decoded body of a call made with ``_preload_content=False``.

    The generated client annotates every call with its model type, but with
    ``_preload_content=False`` it returns the raw urllib3 response instead.
    """
    return json.loads(cast("urllib3.BaseHTTPResponse", resp).data)


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


def is_not_found(exc: BaseException) -> bool:
    return status_of(exc) == 404


def is_conflict(exc: BaseException) -> bool:
    return status_of(exc) == 409


def short(exc: BaseException) -> str:
    """A one-line description of an API error (reason and message, never a body dump)."""
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "{}")
            return f"{exc.status} {body.get('reason', exc.reason)}: {body.get('message', '')}"[:500]
        except ValueError:
            return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"[:500]


def micro_time(t: datetime.datetime) -> str:
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    text = str(value).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)
