"""Helpers for tests that run the Baton operator as a real process against a real API server.

- ``OperatorProcess``: ``python -m baton`` in a subprocess, its own ports, killed by pid.
- ``PodWatch``: a watch log of a namespace's pods (ADDED/MODIFIED/DELETED in API order, with
  the time each event was received), to prove ordering: never two generations at once.
- ``runtime_manifest`` and small readers for status, events and metrics.
"""
from __future__ import annotations

import atexit
import functools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from harness.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "baton.dev_toolruntimes.yaml"
GROUP, VERSION, PLURAL = "baton.dev", "v1alpha1", "toolruntimes"


# Ports handed out are never handed out again while their claimant lives: within this process
# (a set) and across processes on the machine (a claim file per port holding the claimant's pid:
# a chaos run and a test run side by side, a restarted operator binding its port again). They
# come from below the kernel's ephemeral range (32768-60999 here), where no outgoing connection
# takes them. Asking the kernel for port 0 and closing the socket let two lanes started at the
# same moment get the same port ("address already in use").
_PORT_RANGE = range(20000, 32768)
_PORT_CLAIMS = Path(os.environ.get("BATON_TEST_PORT_CLAIMS", "/tmp/baton-test-ports"))
_ports_handed: set[int] = set()
_ports_lock = threading.Lock()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(port: int) -> bool:
    """Take the machine-wide claim on `port` (a file created exclusively); a dead claimant's is
    taken over."""
    _PORT_CLAIMS.mkdir(parents=True, exist_ok=True)
    path = _PORT_CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner and _alive(owner):
                return False
            path.unlink(missing_ok=True)  # its claimant is gone (or never wrote its pid)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


@atexit.register
def _release_claims() -> None:
    for port in _ports_handed:
        path = _PORT_CLAIMS / str(port)
        try:
            if path.read_text() == str(os.getpid()):
                path.unlink()
        except OSError:
            pass


def free_port() -> int:
    """A loopback TCP port that is free now and that no live test process was handed before."""
    with _ports_lock:
        start = random.randrange(len(_PORT_RANGE))
        for i in range(len(_PORT_RANGE)):
            port = _PORT_RANGE[(start + i) % len(_PORT_RANGE)]
            if port in _ports_handed:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            if not _claim(port):
                continue
            _ports_handed.add(port)
            return port
    raise RuntimeError(f"no free loopback port left in {_PORT_RANGE}")


CLAIM_CRD = ROOT / "crds" / "baton.dev_toolruntimeclaims.yaml"


CRD_NAMES = ("toolruntimes.baton.dev", "toolruntimeclaims.baton.dev")


def install_crd(cluster: Any) -> None:
    """Both CRDs: ToolRuntime and ToolRuntimeClaim (the operator watches both)."""
    cluster.kubectl("apply", "-f", str(CRD), "-f", str(CLAIM_CRD))
    wait_established(cluster.api_client)


def wait_established(api: client.ApiClient, names: tuple[str, ...] = CRD_NAMES, timeout: float = 60) -> None:
    """Until each CRD reports Established=True. (`kubectl wait --for=condition=established` fails
    at once, "accessor error: <nil>", when it looks before the CRD has any status condition.)"""
    ext = client.ApiextensionsV1Api(api)

    def established(name: str) -> bool:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)
    for name in names:
        wait_for(lambda n=name: established(n), timeout=timeout, what=f"CRD {name} Established")  # type: ignore[misc]


class OperatorProcess:
    """One operator replica. Every test stops what it starts (fixture teardown kills by pid)."""

    def __init__(self, cluster: Any, log_dir: Path, *, identity: str, namespaces: list[str],
                 env: dict[str, str] | None = None, kubeconfig: str | None = None) -> None:
        self.identity = identity
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_dir / f"operator-{identity}.log"
        self.env = dict(cluster.env)
        self.env.update({
            "KUBECONFIG": kubeconfig or cluster.kubeconfig,
            "BATON_INSTANCE_ID": identity,
            "BATON_NAMESPACES": ",".join(namespaces),
            "BATON_METRICS_BIND": f"127.0.0.1:{self.metrics_port}",
            "BATON_HEALTH_BIND": f"127.0.0.1:{self.health_port}",
            "BATON_LEASE_SECONDS": "5",
            "BATON_BACKOFF_BASE_SECONDS": "2",
            # Tests never dial pod IPs outside loopback (kwok-a's 192.0.2.0/24 is not ours).
            "BATON_PROBE_ALLOWED_CIDRS": "127.0.0.0/8",
            "PYTHONUNBUFFERED": "1",
        })
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "OperatorProcess":
        return self.launch().wait_healthy()

    def launch(self) -> "OperatorProcess":
        """Start the process without waiting for it (several replicas start side by side)."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "baton"], env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def wait_healthy(self, timeout: float = 30) -> "OperatorProcess":
        wait_for(self.healthy, timeout=timeout, what=f"operator {self.identity} /healthz",
                 ignore=(OSError,))
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"operator {self.identity} exited with {self.proc.returncode}:\n"
                                 + self.log_tail())
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
            return r.status == 200

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric_name = head.split("{", 1)[0]
            if metric_name != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


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


class Watching:
    """A watch log's thread: started by `_start`, running `_run` until `halt()` or `stop()`."""

    def _start(self, what: str) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError(f"{what} watch did not start")

    def _run(self) -> None:
        raise NotImplementedError

    def halt(self) -> None:
        """Ask the thread to end (it does within one watch timeout); `stop()` waits for it."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
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

    def assert_one_at_a_time(self, runtime: str) -> list[int | None]:
        """Invariant 1, from the watch log: each pod's DELETED precedes the next pod's ADDED.
        Returns the generations, in order of creation."""
        spans = self.lifetimes(runtime)
        for prev, nxt in zip(spans, spans[1:]):
            assert prev[4] is not None and prev[4] < nxt[3], (
                f"{nxt[0]} (uid {nxt[1]}, g{nxt[2]}) was ADDED while {prev[0]} (uid {prev[1]}, g{prev[2]}) "
                f"still existed: {spans}")
        gens = [s[2] for s in spans]
        known = [g for g in gens if g is not None]
        assert known == sorted(known) and len(set(known)) == len(known), f"generations not increasing: {gens}"
        return gens



def follow(list_call: Callable[..., Any], list_rv: Callable[[Any], str],
           record: Callable[[dict[str, Any]], str], stop: threading.Event,
           ready: threading.Event, max_seconds: float = 3600) -> None:
    """Watch what `list_call` lists, from the resourceVersion of a first list, handing each
    event to `record` (which returns the event's resourceVersion) in the API server's order,
    until `stop` is set (bounded: `max_seconds` at most). A 410 (too old) relists."""
    rv = list_rv(list_call())
    ready.set()
    deadline = time.monotonic() + max_seconds
    while not stop.is_set() and time.monotonic() < deadline:
        w = watch.Watch()
        try:
            for ev in w.stream(list_call, resource_version=rv, timeout_seconds=2,
                               allow_watch_bookmarks=False):
                rv = record(ev)
                if stop.is_set():
                    break
        except ApiException as e:
            if e.status == 410:  # too old: relist
                rv = list_rv(list_call())
            else:
                time.sleep(0.5)
        except Exception:
            time.sleep(0.5)


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


def runtime_manifest(name: str, *, image: str = "example/tool:1", budgets: dict[str, int] | None = None,
                     service: bool = False, annotations: dict[str, str] | None = None,
                     pod_annotations: dict[str, str] | None = None, loopback: bool = False,
                     drain_probe: dict[str, Any] | None = None, recovery: str | None = None,
                     suspend: bool | None = None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "server", "image": image,
                                                "ports": [{"name": "http", "containerPort": 8080}]}]}
    if loopback:
        pod_spec["nodeSelector"] = {"baton.dev/loopback": "true"}
        pod_spec["tolerations"] = [{"key": "baton.dev/loopback", "operator": "Exists", "effect": "NoSchedule"}]
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": {"app": name}, "annotations": dict(pod_annotations or {})},
                     "spec": pod_spec},
        "budgets": {"lockSeconds": 10, "connectSeconds": 20, "drainSeconds": 5,
                    "terminationGraceSeconds": 1, "cleanupSeconds": 10, **(budgets or {})},
    }
    if service:
        spec["service"] = {"ports": [{"port": 80, "targetPort": 8080}]}
    if drain_probe is not None:
        spec["drain"] = {"probe": drain_probe}
    if recovery:
        spec["recovery"] = {"onCleanupFailure": recovery}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolRuntime",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": spec}


class Runtimes:
    """Small typed-ish accessors for ToolRuntimes in one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, manifest))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name))

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, body)

    def set_image(self, name: str, image: str) -> None:
        rt = self.get(name)
        containers = rt["spec"]["template"]["spec"]["containers"]
        containers[0]["image"] = image
        self.patch(name, {"spec": {"template": {"spec": {"containers": containers}}}})

    def annotate(self, name: str, key: str, value: str | None) -> None:
        self.patch(name, {"metadata": {"annotations": {key: value}}})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        for c in self.status(name).get("conditions") or []:
            if c["type"] == kind:
                return dict(c)
        return None

    def wait_ready(self, name: str, generation: int, timeout: float = 60) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            st = self.status(name)
            cur = st.get("current") or {}
            ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
            if cur.get("generation") == generation and ready.get("status") == "True" and not st.get("transition"):
                return st
            return None
        return wait_for(check, timeout=timeout, what=f"{self.ns}/{name} generation {generation} Ready",
                        interval=0.25)

    def events(self, name: str, reason: str | None = None) -> list[Any]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [e for e in evs if e.involved_object.kind == "ToolRuntime" and (reason is None or e.reason == reason)]

    def events_posted(self, name: str, reason: str, timeout: float = 10.0) -> list[Any]:
        """The runtime's events of `reason`, once there is at least one: an event is posted after
        the status write of the same plan lands, so a test that saw the status may be first."""
        found: list[Any] = wait_for(lambda: self.events(name, reason), timeout=timeout, what=f"a {reason} event of {name}")
        return found

    def pods(self, name: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.ns, label_selector=f"baton.dev/runtime={name}").items)

    def gen_pod(self, runtime: str, generation: int) -> Any | None:
        """The runtime's pod (named like the runtime) if it is generation `generation`'s."""
        pod = self.pod(runtime)
        if pod is None or (pod.metadata.labels or {}).get("baton.dev/generation") != str(generation):
            return None
        return pod

    def pod(self, pod_name: str) -> Any | None:
        try:
            return self.core.read_namespaced_pod(pod_name, self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
