"""The cluster the tests run against, chosen by BATON_TEST_BACKEND.

- `local` (default): hack/cluster.py starts a fresh control plane in a temporary directory for
  the test session and stops it at the end. It never reuses .baton/ from `make cluster-up`.
- `kind`: a kind cluster through pytest-kind (docs/kind.md). Where a Docker engine answers: kind's
  default node image. Elsewhere (these machines): podman as kind's provider, as root, with the
  node image hack/kind.py builds and its host changes undone at the end; skipped with the reason
  where that cannot run (not root, podman does not start).
- `existing`: the cluster of the kubeconfig named by BATON_TEST_KUBECONFIG (required: the ambient
  KUBECONFIG and ~/.kube/config are never used).

Whatever the backend, nothing here reads KUBECONFIG or ~/.kube: a cluster the session did not
create or was not explicitly given is never touched.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ("local", "kind", "existing")
# Variables that could point a tool at another cluster than the session's.
AMBIENT = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "HELM_KUBECONTEXT",
           "HELM_KUBEAPISERVER", "HELM_KUBETOKEN", "HELM_KUBECAFILE", "HELM_NAMESPACE")


class BackendUnavailable(Exception):
    """The backend cannot run here (becomes a pytest skip with this reason)."""


class BackendRefused(Exception):
    """The backend was asked for in a way the harness refuses (becomes a test error)."""


def load_plane_module() -> ModuleType:
    """hack/cluster.py (the local plane), as the module ``hack.cluster``."""
    from hack import cluster as plane

    return plane


def load_kind_module() -> ModuleType:
    """hack/kind.py (kind with podman), as the module ``hack.kind``."""
    from hack import kind

    return kind


@dataclass
class Cluster:
    backend: str
    kubeconfig: str           # admin kubeconfig (path)
    api_client: client.ApiClient
    bin_dir: str              # holds kubectl and helm
    env: dict[str, str]       # environment for subprocesses: KUBECONFIG, PATH, HELM_* set
    has_kwok_nodes: bool      # kwok-a and kwok-loop exist (the local plane)
    logs_dir: str | None = None
    kind: "KindRoute | None" = None   # the kind backend: how to load images into it
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    # -- tokens and clients

    def sa_token(self, namespace: str, name: str, expiration_seconds: int = 3600) -> str:
        """A token of ServiceAccount namespace/name, from the TokenRequest API."""
        core = client.CoreV1Api(self.api_client)
        req = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"audiences": [], "expirationSeconds": expiration_seconds}}
        )
        return str(req.status.token)

    def client_for_token(self, token: str) -> client.ApiClient:
        """An ApiClient that authenticates with a bearer token only (no admin certificate)."""
        admin = self.api_client.configuration
        cfg = client.Configuration(host=admin.host)
        cfg.ssl_ca_cert = admin.ssl_ca_cert
        cfg.verify_ssl = admin.verify_ssl
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(cfg)

    # -- command-line tools

    def run(self, *args: str, timeout: float = 120, check: bool = True,
            cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command (kubectl, helm, ...) with this cluster's environment, bounded in time."""
        proc = subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    # The cluster is named by KUBECONFIG in self.env, not by a leading --kubeconfig flag:
    # kubectl refuses flags before a plugin's name (`kubectl baton ...`).

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run(str(Path(self.bin_dir) / "kubectl"), *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run(str(Path(self.bin_dir) / "helm"), *args, **kw)

    def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


# ---------------------------------------------------------------------------------------------


def _tools_dir(work: Path, k8s_bin: Path | None) -> Path:
    """A directory with kubectl (from this venv) and helm (from the build cache)."""
    tools = work / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    venv_bin = Path(sys.executable).parent
    found = {
        "kubectl": venv_bin / "kubectl" if (venv_bin / "kubectl").exists() else None,
        "helm": k8s_bin / "helm" if k8s_bin and (k8s_bin / "helm").exists() else None,
    }
    for name, path in found.items():
        if path is None:
            which = shutil.which(name)
            path = Path(which) if which else None
        if path is not None and not (tools / name).exists():
            (tools / name).symlink_to(path)
    return tools


def _env(kubeconfig: str, tools: Path, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AMBIENT}
    env["KUBECONFIG"] = kubeconfig
    env["PATH"] = os.pathsep.join([str(tools), str(Path(sys.executable).parent),
                                   env.get("PATH", "/usr/bin:/bin")])
    for var, sub in (("HELM_CACHE_HOME", "helm/cache"), ("HELM_CONFIG_HOME", "helm/config"),
                     ("HELM_DATA_HOME", "helm/data")):
        (work / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(work / sub)
    return env


def _has_kwok_nodes(api: client.ApiClient) -> bool:
    names = {n.metadata.name for n in client.CoreV1Api(api).list_node().items}
    return {"kwok-a", "kwok-loop"} <= names


def _finish(backend: str, kubeconfig: str, work: Path, k8s_bin: Path | None,
            stop: Callable[[], None] | None, logs_dir: str | None = None) -> Cluster:
    api = config.new_client_from_config(config_file=kubeconfig, persist_config=False)
    tools = _tools_dir(work, k8s_bin)
    return Cluster(backend=backend, kubeconfig=kubeconfig, api_client=api, bin_dir=str(tools),
                   env=_env(kubeconfig, tools, work), has_kwok_nodes=_has_kwok_nodes(api),
                   logs_dir=logs_dir, _stop=stop)


def start_local(work: Path) -> Cluster:
    plane = load_plane_module()
    try:
        bin_dir = plane.find_bin_dir()
    except plane.PlaneError as e:
        raise BackendRefused(str(e)) from e
    d = work / "plane"
    state = plane.up(d, bin_dir, timeout=120.0, die_with_parent=True)

    def stop() -> None:
        plane.down(d, keep_logs=True)

    try:
        return _finish("local", state["kubeconfig"], work, bin_dir, stop, str(d / "logs"))
    except BaseException:
        stop()
        raise


def _docker_works() -> str | None:
    """None when a Docker engine answers, else why not."""
    docker = shutil.which("docker")
    if not docker:
        return "no docker command on PATH"
    try:
        proc = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 20s"
    if proc.returncode != 0:
        return f"`docker info` failed: {proc.stderr.strip()[:200]}"
    return None


@dataclass
class KindRoute:
    """How images reach the kind cluster: Docker (`kind load docker-image`) or podman (archives
    built by hack/kind.py, `kind load image-archive`)."""
    name: str
    kind: Path                # the kind binary
    env: dict[str, str]       # KIND_EXPERIMENTAL_PROVIDER, CONTAINERS_CONF, ... (podman)
    docker: bool


def start_kind(work: Path) -> Cluster:
    try:
        from pytest_kind import KindCluster  # type: ignore[import-not-found]
    except ImportError as e:
        raise BackendUnavailable(
            "BATON_TEST_BACKEND=kind needs pytest-kind (in the test extras: pip install -e '.[test]')") from e
    name = os.environ.get("BATON_TEST_KIND_NAME", "baton-test")
    kubeconfig = work / "kind-kubeconfig"
    k8s_bin = None
    try:
        k8s_bin = load_plane_module().find_bin_dir()
    except Exception:  # noqa: BLE001 - helm from PATH then
        pass
    if _docker_works() is None:
        # Docker: kind's default node image and CNI; pytest-kind fetches kind and kubectl.
        kind = KindCluster(name=name, kubeconfig=kubeconfig)
        kind.create()
        route = KindRoute(name, Path(kind.kind_path), dict(os.environ), docker=True)
        stop: Callable[[], None] = kind.delete
    else:
        kind, route, stop = _start_kind_podman(work, name, kubeconfig, KindCluster)
    try:
        c = _finish("kind", str(kind.kubeconfig_path), work, k8s_bin, stop)
        c.kind = route
        return c
    except BaseException:
        stop()
        raise


def _start_kind_podman(work: Path, name: str, kubeconfig: Path,
                       KindCluster: Any) -> tuple[Any, KindRoute, Callable[[], None]]:
    """podman as kind's provider (hack/kind.py): build (cached), prepare the host, create the
    cluster with the project's config and the built node image; stop undoes all of it."""
    plane = load_kind_module()
    why = plane.why_not()
    if why:
        raise BackendUnavailable(f"kind cannot run here: {why}")
    try:
        built = plane.build()
    except plane.KindError as e:
        raise BackendRefused(f"kind: the build failed: {e}") from e
    state = work / "kind"
    env = plane.prepare_host(state)
    # pytest-kind runs kind with this process's environment.
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    kubectl = Path(sys.executable).parent / "kubectl"
    kind = KindCluster(name=name, kubeconfig=kubeconfig, image=built.node_image,
                       kind_path=built.kind, kubectl_path=kubectl)

    def stop() -> None:
        try:
            subprocess.run([str(built.kind), "delete", "cluster", f"--name={name}"], env=env,
                           capture_output=True, timeout=180)
        finally:
            errors = plane.restore_host(state)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if errors:
                raise RuntimeError("kind: could not undo every host change:\n" + "\n".join(errors))

    try:
        plane.load_node_image(built, env)
        kind.create(config_file=plane.CLUSTER_CONFIG)
        plane.wait_node_ready(str(kubectl), kubeconfig)
    except BaseException:
        stop()
        raise
    return kind, KindRoute(name, built.kind, env, docker=False), stop


def start_existing(work: Path) -> Cluster:
    kc = os.environ.get("BATON_TEST_KUBECONFIG", "")
    if not kc:
        raise BackendRefused(
            "BATON_TEST_BACKEND=existing needs BATON_TEST_KUBECONFIG=<path of a kubeconfig>; "
            "the ambient KUBECONFIG and ~/.kube/config are never used")
    if not Path(kc).is_file():
        raise BackendRefused(f"BATON_TEST_KUBECONFIG={kc} is not a file")
    k8s_bin = None
    try:
        k8s_bin = load_plane_module().find_bin_dir()
    except Exception:  # noqa: BLE001 - helm from PATH then
        pass
    return _finish("existing", str(Path(kc).resolve()), work, k8s_bin, None)


def start(backend: str, work: Path) -> Cluster:
    if backend == "local":
        return start_local(work)
    if backend == "kind":
        return start_kind(work)
    if backend == "existing":
        return start_existing(work)
    raise BackendRefused(f"BATON_TEST_BACKEND={backend!r}: expected one of {', '.join(BACKENDS)}")
