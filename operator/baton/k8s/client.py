"""API client setup and error helpers.

Credentials come from the official client's loaders (kubeconfig when KUBECONFIG is set, else the
in-cluster account); requests go through three async connection pools (``baton.k8s.api``): one for
the work, one for Lease calls only, so that nothing queues ahead of a renewal, and one for the
informers' lists and long watches, sized by their number, so that watches never hold the
connections writes need (each watch keeps its connection for minutes).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import kubernetes

from baton.k8s import api

ApiError = api.ApiError

_WORK: api.Api | None = None
_LEASES: api.Api | None = None
_WATCHES: api.Api | None = None
# Connections of the watch pool beyond one per informer: a watch being reopened, a relist.
WATCH_POOL_SPARE = 4


def load_config() -> None:
    """Kubeconfig when KUBECONFIG is set (tests, local runs), else the in-cluster account.
    ValueError, naming the kubeconfig field, for a setting Baton cannot honour."""
    if os.environ.get("KUBECONFIG"):
        # kubernetes.config is not annotated (unlike kubernetes.client).
        kubernetes.config.load_kube_config(config_file=os.environ["KUBECONFIG"])  # type: ignore[no-untyped-call]
    else:
        try:
            kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    # ValueError naming the field for what the async client cannot honour (a socks5 proxy-url).
    api.check_connection_settings(kubernetes.client.Configuration.get_default_copy())


async def start(*, pool_size: int = 64) -> None:
    """Open the connection pools (inside the running event loop)."""
    global _WORK, _LEASES
    cfg = kubernetes.client.Configuration.get_default_copy()
    _WORK = api.Api(cfg, name="work", pool_size=pool_size)
    _LEASES = api.Api(cfg, name="leases", pool_size=16)


def open_watches(*, informers: int) -> api.Api:
    """The informers' own pool: one connection per long watch plus a few spare (inside the loop)."""
    global _WATCHES
    assert _WORK is not None, "baton.k8s.client.start() was not awaited"
    cfg = kubernetes.client.Configuration.get_default_copy()
    _WATCHES = api.Api(cfg, name="watch", pool_size=informers + WATCH_POOL_SPARE)
    return _WATCHES


async def stop() -> None:
    global _WORK, _LEASES, _WATCHES
    for a in (_WORK, _LEASES, _WATCHES):
        if a is not None:
            await a.close()
    _WORK = _LEASES = _WATCHES = None


def work() -> api.Api:
    assert _WORK is not None, "baton.k8s.client.start() was not awaited"
    return _WORK


def leases() -> api.Api:
    assert _LEASES is not None, "baton.k8s.client.start() was not awaited"
    return _LEASES


def status_of(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiError) else None


def is_not_found(exc: BaseException) -> bool:
    return status_of(exc) == 404


def is_conflict(exc: BaseException) -> bool:
    return status_of(exc) == 409


def short(exc: BaseException) -> str:
    """A one-line description of an error (reason and message, never a body dump)."""
    if isinstance(exc, ApiError):
        return f"{exc.status} {exc.reason}: {exc.message}"[:500]
    return f"{type(exc).__name__}: {exc}"[:500]


def owned_by(obj: dict[str, Any], owner_uid: str) -> bool:
    """The object's controller ownerReference names `owner_uid`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner_uid and r.get("controller") for r in refs)


def micro_time(t: datetime.datetime) -> str:
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    text = str(value).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)
