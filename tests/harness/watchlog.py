"""Watch logs, to prove ordering from what the API server said and in its order.

- ``PodWatch``: a namespace's pods (ADDED/MODIFIED/DELETED in API order, with the time each
  event was received): never two generations at once (``assert_one_at_a_time``).
- ``WatchLog``: ToolRuntime or Lease events of a namespace, as plain dicts.
- ``follow``: the list-then-watch loop both run on.
"""
from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from harness.runtimes import GROUP, PLURAL, VERSION


@dataclass
class PodEvent:
    type: str
    name: str
    uid: str
    generation: int | None
    resource_version: int
    received: float
    deleting: bool
    annotations: dict[str, str]
    created: Any
    node: str | None
    labels: dict[str, str] = field(default_factory=dict)
    # What a real kubelet reports (kind): state per container (running.startedAt,
    # terminated.finishedAt/exitCode), the pod IP, the deletion timestamp.
    container_states: dict[str, Any] = field(default_factory=dict)
    pod_ip: str | None = None
    deletion_timestamp: Any = None

    def of(self, runtime: str) -> bool:
        """A pod of `runtime`: its name (every generation's pod has it), an older version's
        `<runtime>-g<N>`, or the runtime's label."""
        return (self.name == runtime or self.name.startswith(runtime + "-g")
                or self.labels.get("baton.dev/runtime") == runtime)


class Stopper:
    """A watching thread's stop event and the watch stream it has open: `stop()` sets the event
    and shuts the stream's socket down, so a read blocked on a quiet watch ends at once instead of
    at the watch's timeout (seconds of every teardown otherwise). `opening(func)` is `func` (a
    list call `watch.Watch().stream` calls) recording the response it opens."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds)

    def opening(self, func: Callable[..., Any]) -> Callable[..., Any]:
        # wraps: the watch decodes objects by the return type named in func's docstring.
        @functools.wraps(func)
        def opened(*args: Any, **kwargs: Any) -> Any:
            response = func(*args, **kwargs)
            with self._lock:
                self._response = response
                stopped = self.event.is_set()
            if stopped:  # stop() came while this stream was being opened
                _shut(response)
            return response
        return opened

    def stop(self) -> None:
        with self._lock:
            self.event.set()
            response, self._response = self._response, None
        if response is not None:
            _shut(response)


def _shut(response: Any) -> None:
    """Shut the read side of a streaming response's socket (its reader sees the end of the stream)."""
    try:
        response.shutdown()  # urllib3 >= 2.3
    except AttributeError:
        pass  # an older urllib3: the read ends at the watch's timeout, as it always did
    except (ValueError, RuntimeError, OSError):
        pass  # already closed or released: nothing blocks on it


class Watching:
    """A watch log's thread: started by `_start`, running `_run` until `halt()` or `stop()`."""

    def _start(self, what: str) -> None:
        self._stop = Stopper()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError(f"{what} watch did not start")

    def _run(self) -> None:
        raise NotImplementedError

    def halt(self) -> None:
        """Ask the thread to end (at once: its open watch is shut); `stop()` waits for it."""
        self._stop.stop()

    def stop(self) -> None:
        self._stop.stop()
        self._thread.join(timeout=10)


@dataclass
class PodWatch(Watching):
    """Every pod event of a namespace, in the API server's order, received by one watch."""

    api: client.ApiClient
    namespace: str
    events: list[PodEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._start("pod")

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)

        def record(ev: dict[str, Any]) -> str:
            pod = ev["object"]
            rv = str(pod.metadata.resource_version)
            labels = pod.metadata.labels or {}
            gen = labels.get("baton.dev/generation")
            with self._lock:
                self.events.append(PodEvent(
                    type=ev["type"], name=pod.metadata.name, uid=pod.metadata.uid,
                    generation=int(gen) if gen and gen.isdigit() else None,
                    resource_version=int(rv), received=time.monotonic(),
                    deleting=pod.metadata.deletion_timestamp is not None,
                    annotations=dict(pod.metadata.annotations or {}),
                    created=pod.metadata.creation_timestamp,
                    node=pod.spec.node_name, labels=dict(labels),
                    container_states={c.name: c.state for c in (pod.status.container_statuses or [])}
                    if pod.status else {},
                    pod_ip=pod.status.pod_ip if pod.status else None,
                    deletion_timestamp=pod.metadata.deletion_timestamp))
            return rv

        # A partial keeps the method's return type, which the watch uses to decode objects.
        follow(functools.partial(core.list_namespaced_pod, self.namespace),
               lambda items: str(items.metadata.resource_version), record, self._stop, self._ready)

    def snapshot(self) -> list[PodEvent]:
        with self._lock:
            return list(self.events)

    def added(self, name: str | None = None) -> list[PodEvent]:
        return [e for e in self.snapshot() if e.type == "ADDED" and (name is None or e.name == name)]

    def deleted(self, name: str | None = None) -> list[PodEvent]:
        return [e for e in self.snapshot() if e.type == "DELETED" and (name is None or e.name == name)]

    def added_gen(self, runtime: str, generation: int) -> list[PodEvent]:
        """ADDED events of generation `generation`'s pod of `runtime` (by its label at creation)."""
        return [e for e in self.added() if e.of(runtime) and e.generation == generation]

    def deleted_gen(self, runtime: str, generation: int) -> list[PodEvent]:
        """DELETED events of the pod that was created as generation `generation` of `runtime`."""
        uids = {e.uid for e in self.added_gen(runtime, generation)}
        return [e for e in self.deleted() if e.uid in uids]

    def lifetimes(self, runtime: str) -> list[tuple[str, str, int | None, int, int | None]]:
        """(name, uid, generation at creation, index of ADDED, index of DELETED or None) of every
        pod of `runtime`, in the API server's order. A pod is followed by UID: a label edited
        away later does not hide it."""
        evs = self.snapshot()
        spans: dict[str, list[Any]] = {}
        for i, e in enumerate(evs):
            if e.type == "ADDED" and e.of(runtime):
                spans[e.uid] = [e.name, e.uid, e.generation, i, None]
            elif e.type == "DELETED" and e.uid in spans:
                spans[e.uid][4] = i
        return [tuple(v) for v in sorted(spans.values(), key=lambda v: v[3])]  # type: ignore[misc]

    def _one_at_a_time(self, runtime: str) -> list[tuple[str, str, int | None, int, int | None]]:
        """`lifetimes(runtime)`, asserting each pod's DELETED precedes the next pod's ADDED."""
        spans = self.lifetimes(runtime)
        for prev, nxt in zip(spans, spans[1:]):
            assert prev[4] is not None and prev[4] < nxt[3], (
                f"{nxt[0]} (uid {nxt[1]}, g{nxt[2]}) was ADDED while {prev[0]} (uid {prev[1]}, g{prev[2]}) "
                f"still existed: {spans}")
        return spans

    def assert_one_at_a_time(self, runtime: str) -> list[int | None]:
        """Invariant 1, from the watch log: each pod's DELETED precedes the next pod's ADDED.
        Returns the generations, in order of creation."""
        spans = self._one_at_a_time(runtime)
        gens = [s[2] for s in spans]
        known = [g for g in gens if g is not None]
        assert known == sorted(known) and len(set(known)) == len(known), f"generations not increasing: {gens}"
        return gens

    def served(self, runtime: str) -> set[str]:
        """UIDs of `runtime`'s pods that were labelled serving at some event."""
        return {e.uid for e in self.snapshot() if e.of(runtime) and e.labels.get("baton.dev/serving") == "true"}

    def late_strays(self, runtime: str) -> set[str]:
        """UIDs of pods that a fenced-out holder's late create made: created below a number already
        used, under a lower fencing token than a pod before it, and never serving. A holder that
        resumes another's Creating gives that number up, so such a pod can land after the next
        ones (chaos seed 11179); it is retired as a stray and must never serve."""
        served = self.served(runtime)
        tokens = {e.uid: int(e.annotations.get("baton.dev/fencing-token", "0")) for e in self.added() if e.of(runtime)}
        out: set[str] = set()
        top_gen, top_token = 0, 0
        for _name, uid, gen, _added, _deleted in self.lifetimes(runtime):
            if gen is not None and gen < top_gen and uid not in served and tokens.get(uid, 0) < top_token:
                out.add(uid)
                continue
            top_gen, top_token = max(top_gen, gen or 0), max(top_token, tokens.get(uid, 0))
        return out

    def assert_one_pod_per_generation(self, runtime: str) -> list[int | None]:
        """Invariants 1 and 2 as the chaos orderings judge them: one pod at a time; each
        generation number names one pod; numbers increase in order of creation, except a late
        stray (`late_strays`: a number given up, never serving). Returns the generations."""
        spans = self._one_at_a_time(runtime)
        gens = [s[2] for s in spans]
        known = [g for g in gens if g is not None]
        assert len(set(known)) == len(known), f"a generation number names two pods: {gens}"
        strays = self.late_strays(runtime)
        ordered = [s[2] for s in spans if s[2] is not None and s[1] not in strays]
        assert ordered == sorted(ordered), f"generations not increasing: {gens} (late strays: {sorted(strays)})"
        return gens



def follow(list_call: Callable[..., Any], list_rv: Callable[[Any], str],
           record: Callable[[dict[str, Any]], str], stop: Stopper,
           ready: threading.Event, max_seconds: float = 3600) -> None:
    """Watch what `list_call` lists, from the resourceVersion of a first list, handing each
    event to `record` (which returns the event's resourceVersion) in the API server's order,
    until `stop` is stopped (bounded: `max_seconds` at most). A 410 (too old) relists."""
    rv = list_rv(list_call())
    ready.set()
    deadline = time.monotonic() + max_seconds
    watched = stop.opening(list_call)
    while not stop.is_set() and time.monotonic() < deadline:
        w = watch.Watch()
        try:
            for ev in w.stream(watched, resource_version=rv, timeout_seconds=2,
                               allow_watch_bookmarks=False):
                rv = record(ev)
                if stop.is_set():
                    break
        except ApiException as e:
            if e.status == 410:  # too old: relist
                rv = list_rv(list_call())
            else:
                stop.wait(0.5)
        except Exception:
            stop.wait(0.5)


@dataclass
class WatchLog(Watching):
    """Every event of one kind of object in a namespace, in the API server's order, as plain
    dicts: ``(type, resourceVersion, object)``. `kind` is "toolruntimes" or "leases"."""

    api: client.ApiClient
    namespace: str
    kind: str
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._start(self.kind)

    def _run(self) -> None:
        if self.kind == "toolruntimes":
            custom = client.CustomObjectsApi(self.api)
            list_call: Callable[..., Any] = functools.partial(
                custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL)

            def list_rv(items: Any) -> str:
                return str(items["metadata"]["resourceVersion"])
        elif self.kind == "leases":
            coord = client.CoordinationV1Api(self.api)
            list_call = functools.partial(coord.list_namespaced_lease, self.namespace)

            def list_rv(items: Any) -> str:
                return str(items.metadata.resource_version)
        else:
            raise ValueError(self.kind)

        def record(ev: dict[str, Any]) -> str:
            obj = ev["object"]
            if not isinstance(obj, dict):
                obj = self.api.sanitize_for_serialization(obj)
            rv = str(obj["metadata"]["resourceVersion"])
            with self._lock:
                self.events.append((ev["type"], int(rv), obj))
            return rv

        follow(list_call, list_rv, record, self._stop, self._ready)

    def snapshot(self) -> list[tuple[str, int, dict[str, Any]]]:
        with self._lock:
            return list(self.events)
