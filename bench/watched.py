"""A bench's view of one collection, fed by a list and then a watch in a thread of its own.

A bench that waits for N objects to be Ready by listing all N every poll loads the API server
(and its own interpreter) in proportion to N times the number of polls: at N=5000 one list of
ToolRuntimes is over 100 MiB of JSON. This keeps one small summary per object, updated from the
watch's events, so a wait costs what the objects' changes cost, the same for each side compared.
Loopback only; every request has a timeout and the thread ends at `stop()`.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from kubernetes.watch import watch as k8s_watch

Summary = Callable[[dict[str, Any]], Any]


class Watched:
    def __init__(self, api: Any, path: str, summary: Summary) -> None:
        """`api`: a kubernetes.client.ApiClient; `path`: the collection, e.g.
        /apis/apps/v1/namespaces/x/deployments; `summary`: what to keep of each object."""
        self.api, self.path, self.summary = api, path, summary
        self._by_name: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listed = threading.Event()
        self.events = 0
        self.last_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)

    def start(self, *, timeout: float = 60) -> Watched:
        self._thread.start()
        if not self._listed.wait(timeout):
            raise TimeoutError(f"{self.path}: not listed within {timeout}s (last error: {self.last_error!r})")
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=90)

    def count(self, accept: Callable[[str, Any], bool]) -> int:
        """How many objects' summaries `accept(name, summary)` takes."""
        with self._lock:
            return sum(1 for name, s in self._by_name.items() if accept(name, s))

    def summaries(self, names: set[str]) -> dict[str, Any]:
        """The summary kept of each of `names` (absent ones left out)."""
        with self._lock:
            return {name: self._by_name[name] for name in names if name in self._by_name}

    def _get(self, query: list[tuple[str, Any]], *, timeout: float) -> Any:
        """The raw response (urllib3, not read yet); an HTTP error raises."""
        method, url, headers, body, _ = self.api.param_serialize("GET", self.path, query_params=query,
                                                                  auth_settings=["BearerToken"])
        resp = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout).response
        if resp.status >= 400:
            text = resp.data[:300]
            resp.release_conn()
            raise RuntimeError(f"GET {self.path}: {resp.status} {text!r}")
        return resp

    def _list(self) -> str:
        seen: dict[str, Any] = {}
        cont = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", 500)] + ([("continue", cont)] if cont else [])
            body = json.loads(self._get(query, timeout=60).data)
            for obj in body.get("items") or []:
                seen[obj["metadata"]["name"]] = self.summary(obj)
            cont = (body.get("metadata") or {}).get("continue") or ""
            if not cont:
                break
        with self._lock:
            self._by_name = seen
        self._listed.set()
        return str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv: str | None = None
        while not self._stopping.is_set():
            try:
                if rv is None:
                    rv = self._list()
                resp = self._get([("watch", "true"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"),
                                  ("timeoutSeconds", 30)], timeout=45)
                try:
                    for line in k8s_watch.iter_resp_lines(resp):
                        if not line:
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            rv = None  # 410 Gone or the like: list again
                            break
                        rv = str(obj["metadata"]["resourceVersion"])
                        if kind == "BOOKMARK":
                            continue
                        name = obj["metadata"]["name"]
                        with self._lock:
                            self.events += 1
                            if kind == "DELETED":
                                self._by_name.pop(name, None)
                            else:
                                self._by_name[name] = self.summary(obj)
                        if self._stopping.is_set():
                            break
                finally:
                    resp.release_conn()
            except Exception as exc:  # noqa: BLE001 - a dropped stream: resume from rv (or list) after a pause
                self.last_error = exc
                time.sleep(1.0)


def runtime_summary(obj: dict[str, Any]) -> tuple[Any, bool, bool]:
    """A ToolRuntime: (serving generation, Ready, a transition under way)."""
    st = obj.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
    return (st.get("current") or {}).get("generation"), ready.get("status") == "True", bool(st.get("transition"))


def deployment_summary(obj: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """A Deployment: (generation, observedGeneration, available, updated, replicas)."""
    st = obj.get("status") or {}
    return (int(obj["metadata"].get("generation") or 0), int(st.get("observedGeneration") or 0),
            int(st.get("availableReplicas") or 0), int(st.get("updatedReplicas") or 0), int(st.get("replicas") or 0))
