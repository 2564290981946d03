"""A stand-in for one gateway replica's control side, for proving the operator's seal and counted
drain on the real plane before (and apart from) the real gateway (`python -m baton gateway`).

It does what the contract (docs/architecture.md, "Sealed admission"; DESIGN.md "Gateway") asks
of a replica towards the operator, and nothing of the data path:
- a real coordination.k8s.io/v1 Lease in the given namespace, named
  names.gateway_lease_name(instance), labelled baton.dev/component=gateway, carrying its admin
  address in baton.dev/gateway-admin, renewed every duration/3 by a thread, deleted on close;
- a real HTTP admin listener on 127.0.0.1: POST /v1/seal and GET /v1/inflight, answered from
  what the test sets (`confirm`, `inflight`, `sessions`); every request is recorded with its time.

`StandinGateway(..., listen=False)` registers a Lease whose admin address nobody listens on: a
live replica the operator cannot reach. Threaded, bounded, loopback only.
"""
from __future__ import annotations

import datetime
import http.server
import json
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from baton.model import names
from dev.ports import free_port


class StandinGateway:
    def __init__(self, api_client: Any, namespace: str, instance: str, *, lease_seconds: int = 5,
                 listen: bool = True) -> None:
        self.coord = client.CoordinationV1Api(api_client)
        self.namespace, self.instance, self.lease_seconds = namespace, instance, lease_seconds
        self.lease_name = names.gateway_lease_name(instance)
        self.confirm = True  # answer seals with 200 {"sealed": true}; False: 503 (not confirmed)
        self.inflight = 0  # what /v1/inflight and /v1/seal report for any uid
        self.sessions: list[str] | None = None  # the session fingerprints /v1/inflight lists (None: no field)
        self.sealed: dict[str, float] = {}  # uid -> when it was first sealed (monotonic)
        self.requests: list[tuple[float, str, str]] = []  # (monotonic, method, path)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.port = free_port()
        self.server: http.server.ThreadingHTTPServer | None = None
        if listen:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
            self.server.daemon_threads = True
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self._register()
        self._renewer = threading.Thread(target=self._renew_forever, daemon=True)
        self._renewer.start()

    @property
    def admin(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)

    def _register(self) -> None:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.lease_name, namespace=self.namespace,
                labels={names.LABEL_COMPONENT: names.COMPONENT_GATEWAY},
                annotations={names.ANN_GATEWAY_ADMIN: self.admin}),
            spec=client.V1LeaseSpec(holder_identity=self.instance, lease_duration_seconds=self.lease_seconds,
                                    renew_time=self._now()))
        self.coord.create_namespaced_lease(self.namespace, body)

    def _renew_forever(self) -> None:
        # Bounded by close(): at most one renew every duration/3 while the stand-in lives.
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                self.coord.patch_namespaced_lease(self.lease_name, self.namespace,
                                                  {"spec": {"renewTime": self._now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")}})
            except ApiException:
                pass  # tried again at the next tick; a missed renew only makes it look dead sooner

    def close(self) -> None:
        self._stop.set()
        self._renewer.join(timeout=5)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        try:
            self.coord.delete_namespaced_lease(self.lease_name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:  # noqa: N802
                length = min(int(self.headers.get("Content-Length") or 0), 4096)
                raw = self.rfile.read(length)
                with outer._lock:
                    outer.requests.append((time.monotonic(), "POST", self.path))
                if self.path != "/v1/seal":
                    return self._answer(404, {"error": "not found"})
                try:
                    uid = json.loads(raw)["uid"]
                except (ValueError, KeyError, TypeError):
                    return self._answer(400, {"error": "uid"})
                if not outer.confirm:
                    return self._answer(503, {"error": "not now"})
                with outer._lock:
                    outer.sealed.setdefault(uid, time.monotonic())
                self._answer(200, {"sealed": True, "inflight": outer.inflight})

            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                with outer._lock:
                    outer.requests.append((time.monotonic(), "GET", url.path))
                if url.path != "/v1/inflight":
                    return self._answer(404, {"error": "not found"})
                uid = (parse_qs(url.query).get("uid") or [""])[0]
                answer: dict[str, Any] = {"uid": uid, "inflight": outer.inflight, "sealed": uid in outer.sealed}
                if outer.sessions is not None:
                    answer.update(sessions=outer.sessions, sessionsTruncated=False)
                self._answer(200, answer)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def count(self, method: str, path: str, *, since: float = 0.0) -> int:
        with self._lock:
            return sum(1 for t, m, p in self.requests if m == method and p == path and t >= since)
