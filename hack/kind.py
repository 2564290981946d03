#!/usr/bin/env python3
"""kind on these machines: podman as kind's provider, images built here, no registry (docs/kind.md).

    hack/kind.py up   [--dir DIR] [--name NAME]  build what is missing, create the cluster, load the
                                                operator and tool-server images into it, write
                                                DIR/kind-kubeconfig (printed on stdout)
    hack/kind.py down [--dir DIR]                delete it and undo every host change `up` made
    hack/kind.py build                           only the builds (tools, node image), cached
    hack/kind.py images                          build the operator and tool-server images
    hack/kind.py check                           exit 0 if kind can run here, else print why (3)
    hack/kind.py prebuild                        where kind can run: build, images; else say why
                                                (exit 0): `make test` runs it before pytest so
                                                that no test's timeout pays for a cold build

Needs root. Every build is cached outside the work tree under ~/.cache/baton (BATON_KIND_CACHE),
keyed by the content of its inputs: the Go tools by hack/build-tools.sh, the node image by
hack/kind/node/ and the versions, the Debian python base by KIND_PYTHON_SUITE, the wheelhouse by
requirements/image.lock and the base's Python version, the operator and tool-server images by their build contexts,
the nodejs base (the TypeScript MCP client's) by the suite, its node_modules by its package-lock.json.

What `up` changes on the host, recorded in DIR/kind/host.json before it is changed, and undone by
`down` (also after a failed `up`): podman's storage, network config and state live under
DIR/kind/ (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF: nothing in /var/lib/containers); the
network's bridge `baton-kind0` on 198.18.0.0/24 (RFC 2544 test range) with ipMasq false and no
default route in the node; the iptables chains podman's port mapping adds (127.0.0.1 -> the API
server in the node); net.ipv4.ip_forward (the bridge plugin turns it on); /lib/modules (kind
bind-mounts it; this kernel has none) and /var/lib/containers (a blob-info cache), if it made them. Traffic goes only to 127.0.0.0/8 and into those namespaces.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent
HACK = REPO / "hack"
KIND_DIR = HACK / "kind"
CLUSTER_CONFIG = KIND_DIR / "cluster.yaml"
CACHE = Path(os.environ.get("BATON_KIND_CACHE", Path.home() / ".cache" / "baton"))
NETWORK = "baton-kind"
BRIDGE = "baton-kind0"
NODE_SUBNET, NODE_GATEWAY = "198.18.0.0/24", "198.18.0.1"
DEFAULT_NAME = "baton"
# Debian packages the route needs on the host; --no-install-recommends keeps netavark out
# (podman runs with the CNI backend and a network config of this run, below).
# nftables: `nft` lists and removes the tables iptables-nft creates for CNI's chains (not pulled
# in by iptables; a fresh machine without it failed every e2e setup with "No such file: 'nft'").
APT_PACKAGES = ["podman", "buildah", "mmdebstrap", "containernetworking-plugins", "iptables",
                "nftables", "runc", "gcc", "libc6-dev", "golang-github-containers-common", "conmon",
                "fuse-overlayfs"]
COMMANDS = ["podman", "buildah", "mmdebstrap", "iptables", "nft", "runc", "gcc"]
IPTABLES_TABLES = ["filter", "nat", "mangle", "raw"]
# containers/image keeps a blob-info cache here whatever the storage configuration says.
VAR_CONTAINERS = Path("/var/lib/containers")


class KindError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[kind] {msg}", file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    out = {}
    for line in (HACK / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def run(*argv: str | Path, env: dict[str, str] | None = None, timeout: float = 600,
        check: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    # Uncaptured output goes to stderr: stdout of `hack/kind.py up` is the kubeconfig path only.
    proc = subprocess.run([str(a) for a in argv], env=env, text=True, timeout=timeout,
                          capture_output=capture, stdout=None if capture else sys.stderr)
    if check and proc.returncode != 0:
        raise KindError(f"{' '.join(map(str, argv))} exited {proc.returncode}:\n"
                        f"{(proc.stdout or '')[-2000:]}\n{(proc.stderr or '')[-2000:]}")
    return proc


def digest(*parts: str | bytes | Path) -> str:
    """sha256 (12 hex) of strings, bytes and files (a directory: every file in it, by path)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, Path):
            # What .dockerignore leaves out (bytecode, an editable install's egg-info) is no input.
            files = sorted(f for f in p.rglob("*") if f.is_file() and not any(
                part == "__pycache__" or part.endswith(".egg-info") for part in f.parts)
                           ) if p.is_dir() else [p]
            for f in files:
                h.update(str(f.relative_to(REPO) if f.is_relative_to(REPO) else f).encode())
                h.update(f.read_bytes())
        else:
            h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:12]


class locked:
    """An exclusive flock on DIR/.lock: a second build of the same thing waits, then finds it."""

    def __init__(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        self.f = open(d / ".lock", "w")

    def __enter__(self) -> None:
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


# --- can it run here ------------------------------------------------------------------------


def why_not() -> str | None:
    """None when kind can run here (root; the packages installed if missing; podman answers)."""
    if os.geteuid() != 0:
        return "kind with podman needs root here (rootless podman cannot run kind's privileged node)"
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True,
                                                 timeout=20).returncode == 0:
        return None
    try:
        install_packages()
    except (KindError, subprocess.TimeoutExpired) as e:
        return f"could not install {' '.join(APT_PACKAGES)}: {e}"
    proc = subprocess.run(["podman", "--version"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        return f"podman does not start: {proc.stderr.strip()[:300]}"
    return None


def install_packages() -> None:
    """apt-get install what is missing (idempotent: nothing when every command is there)."""
    if all(shutil.which(c) for c in COMMANDS):
        return
    log(f"apt-get install {' '.join(APT_PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run("apt-get", "update", "-q", env=env, timeout=600)
    run("apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES, env=env,
        timeout=900)


# --- builds ---------------------------------------------------------------------------------


@dataclass
class Built:
    kind_bin: Path          # kind, kubectl, crictl, ... (hack/build-tools.sh --only kind)
    node_archive: Path      # docker-archive of node_image
    node_image: str

    @property
    def kind(self) -> Path:
        return self.kind_bin / "kind"


def build_tools() -> tuple[Path, Path]:
    """The control-plane and kind sets of hack/build-tools.sh: (control-plane bin, kind bin)."""
    tools = HACK / "build-tools.sh"
    run("bash", tools, "--only", "control-plane", "kind", timeout=3600, capture=False)
    cp = run("bash", tools, "--print-bin-dir").stdout.strip()
    kb = run("bash", tools, "--print-kind-dir").stdout.strip()
    return Path(cp), Path(kb)


def build() -> Built:
    cp_bin, kind_bin = build_tools()
    v = versions()
    key = digest(f"{cp_bin} {kind_bin} {v['KIND_DEBIAN_SUITE']}", KIND_DIR / "node",
                 os.environ.get("KIND_DEBIAN_MIRROR", ""))
    out = CACHE / f"kind-node-{v['KUBERNETES_VERSION']}-{key}"
    image = f"localhost/baton-kind-node:{v['KUBERNETES_VERSION']}-{key}"
    archive = out / "node.tar"
    with locked(out):
        if not archive.exists():
            log(f"building the node image into {out} (cold: a few minutes)")
            t0 = time.monotonic()
            with build_storage(out) as env:
                run("bash", KIND_DIR / "node" / "build.sh", out, cp_bin, kind_bin, image,
                    env=env, timeout=3600, capture=False)
            log(f"node image built in {time.monotonic() - t0:.0f}s")
            prune(CACHE.glob("kind-node-*"), out)
    return Built(kind_bin=kind_bin, node_archive=archive, node_image=image)


class build_storage:
    """Environment for buildah/podman with a storage of its own under DIR/storage, removed
    afterwards: builds leave nothing in /var/lib/containers."""

    def __init__(self, d: Path) -> None:
        self.d = d / "build-state"
        self.var_created = not VAR_CONTAINERS.exists()

    def __enter__(self) -> dict[str, str]:
        return podman_env(self.d)

    def __exit__(self, *exc: object) -> None:
        remove_storage(self.d)
        shutil.rmtree(self.d, ignore_errors=True)
        if self.var_created:
            shutil.rmtree(VAR_CONTAINERS, ignore_errors=True)


def podman_env(state: Path, network_dir: Path | None = None) -> dict[str, str]:
    """Write containers.conf and storage.conf under STATE; the environment that uses them."""
    state.mkdir(parents=True, exist_ok=True)
    storage = state / "storage"
    (state / "storage.conf").write_text(
        '[storage]\ndriver = "overlay"\n'
        f'graphroot = "{storage / "graph"}"\nrunroot = "{storage / "run"}"\n')
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = hard if hard != resource.RLIM_INFINITY else 1048576
    # Root here lacks CAP_SYS_RESOURCE: podman's default ulimits (above the hard limits) make
    # every container fail with "error setting rlimit type 7: operation not permitted".
    conf = ("[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]\n'
            "[engine]\n"
            # crun refuses this hybrid cgroup v1 layout; runc runs it. No systemd on the host.
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            f'tmp_dir = "{storage / "libpod-tmp"}"\n'
            f'volume_path = "{storage / "volumes"}"\n'
            "[network]\n"
            'network_backend = "cni"\n'
            f'network_config_dir = "{network_dir or state / "cni"}"\n')
    (state / "containers.conf").write_text(conf)
    return {**os.environ, "CONTAINERS_CONF": str(state / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(state / "storage.conf"),
            "KIND_EXPERIMENTAL_PROVIDER": "podman", "KIND_EXPERIMENTAL_PODMAN_NETWORK": NETWORK}


def remove_storage(state: Path) -> None:
    """Unmount what podman left mounted under STATE/storage, then remove it."""
    storage = state / "storage"
    if not storage.exists():
        return
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(storage))]
    for m in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
    shutil.rmtree(storage, ignore_errors=True)


# --- the host: prepare and restore ------------------------------------------------------------


def _chains() -> dict[str, list[str]]:
    out = {}
    for t in IPTABLES_TABLES:
        p = subprocess.run(["iptables", "-w", "5", "-t", t, "-S"], capture_output=True, text=True,
                           timeout=30)
        out[t] = [ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("-N ")] \
            if p.returncode == 0 else []
    return out


def _nft_tables() -> list[str]:
    p = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=30)
    return p.stdout.split("\n") if p.returncode == 0 else []


def prepare_host(state: Path) -> dict[str, str]:
    """Record, then make, the host changes a cluster needs; the environment for kind/podman."""
    state.mkdir(parents=True, exist_ok=True)
    host = state / "host.json"
    if host.exists():
        raise KindError(f"{host} exists: a cluster of this directory is up (hack/kind.py down)")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        raise KindError(f"bridge {BRIDGE} exists: another kind run is up on this machine "
                        "(make kind-down there first)")
    record = {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "lib_modules_created": not Path("/lib/modules").exists(),
        "var_containers_created": not VAR_CONTAINERS.exists(),
        "chains": _chains(),
        "nft_tables": _nft_tables(),
    }
    host.write_text(json.dumps(record, indent=1))
    if record["lib_modules_created"]:
        # kind always bind-mounts /lib/modules; this kernel has none.
        Path("/lib/modules").mkdir()
    cni = state / "cni"
    cni.mkdir(exist_ok=True)
    # The node network: created here, before kind would create its own with masquerading. The
    # host keeps 198.18.0.1 on the bridge (the API server's port mapping goes through it); the
    # node gets no default route (routes: []), so nothing in it can reach past the host.
    (cni / f"{NETWORK}.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(state / "cni-ipam"), "routes": [],
                      "ranges": [[{"subnet": NODE_SUBNET, "gateway": NODE_GATEWAY}]]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}, indent=1))
    return podman_env(state, cni)


def restore_host(state: Path) -> list[str]:
    """Undo what prepare_host recorded, every step tried even when one fails; the failures."""
    host = state / "host.json"
    if not host.exists():
        return []
    record = json.loads(host.read_text())
    errors: list[str] = []

    def step(what: str, fn: Any) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - keep undoing the rest
            errors.append(f"{what}: {e}")

    env = podman_env(state, state / "cni")
    step("containers", lambda: subprocess.run(["podman", "rm", "-af", "-t", "0"], env=env,
                                              capture_output=True, timeout=120))
    step("storage", lambda: remove_storage(state))
    step("bridge", lambda: Path(f"/sys/class/net/{BRIDGE}").exists() and run(
        "ip", "link", "del", BRIDGE))
    step("iptables", lambda: _remove_new_chains(record["chains"], record["nft_tables"]))
    step("ip_forward", lambda: Path("/proc/sys/net/ipv4/ip_forward").write_text(
        record["ip_forward"]))
    if record["lib_modules_created"]:
        step("/lib/modules", lambda: Path("/lib/modules").rmdir())
    if record.get("var_containers_created"):
        step(str(VAR_CONTAINERS), lambda: shutil.rmtree(VAR_CONTAINERS))
    for p in ("cni", "cni-ipam", "containers.conf", "storage.conf"):
        step(p, lambda p=p: shutil.rmtree(state / p) if (state / p).is_dir()
             else (state / p).unlink(missing_ok=True))
    if not errors:
        host.unlink()
    return errors


def _remove_new_chains(before: dict[str, list[str]], nft_before: list[str]) -> None:
    """Delete the iptables chains that were not there before (CNI's portmap chains), with the
    rules that jump to them; then the nft tables iptables-nft created for them, if empty."""
    now = _chains()
    for t in IPTABLES_TABLES:
        new = [c for c in now[t] if c not in before.get(t, [])]
        if not new:
            continue
        rules = subprocess.run(["iptables", "-w", "5", "-t", t, "-S"], capture_output=True,
                               text=True, timeout=30).stdout.splitlines()
        for rule in rules:
            words = shlex.split(rule)  # comments are quoted
            if words[:1] == ["-A"] and "-j" in words and words[words.index("-j") + 1] in new \
                    and words[1] not in new:
                run("iptables", "-w", "5", "-t", t, "-D", *words[1:])
        for c in new:
            run("iptables", "-w", "5", "-t", t, "-F", c)
        for c in new:
            run("iptables", "-w", "5", "-t", t, "-X", c)
    for table in _nft_tables():
        if table and table not in nft_before:
            family_name = table.split()[1:]
            listing = run("nft", "list", "table", *family_name).stdout
            if " jump " not in listing and not any(
                    ln.strip() and not ln.strip().startswith(("table", "chain", "type", "}"))
                    for ln in listing.splitlines()):
                run("nft", "delete", "table", *family_name)


# --- cluster up and down ---------------------------------------------------------------------


def load_node_image(built: Built, env: dict[str, str]) -> None:
    run("podman", "load", "-q", "-i", built.node_archive, env=env, timeout=600)


def wait_node_ready(kubectl: str, kubeconfig: Path, timeout: float = 180) -> None:
    """Bounded: the node Ready, kube-proxy rolled out (a Service's ClusterIP answers only once
    it has written its rules) and CoreDNS available (kind's own --wait covers the node only)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    run(kubectl, "wait", "--for=condition=Ready", "node", "--all", f"--timeout={int(timeout)}s",
        env=env, timeout=timeout + 30)
    run(kubectl, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy",
        f"--timeout={int(timeout)}s", env=env, timeout=timeout + 30)
    run(kubectl, "-n", "kube-system", "wait", "--for=condition=Available", "deployment/coredns",
        f"--timeout={int(timeout)}s", env=env, timeout=timeout + 30)


def up(d: Path, name: str) -> Path:
    why = why_not()
    if why:
        raise KindError(why)
    built = build()
    state = d / "kind"
    kubeconfig = d / "kind-kubeconfig"
    env = prepare_host(state)
    try:
        (state / "name").write_text(name)
        t0 = time.monotonic()
        load_node_image(built, env)
        run(built.kind, "create", "cluster", f"--name={name}", f"--config={CLUSTER_CONFIG}",
            f"--image={built.node_image}", f"--kubeconfig={kubeconfig}", "--wait=120s",
            env=env, timeout=400, capture=False)
        wait_node_ready(str(built.kind_bin / "kubectl"), kubeconfig)
        log(f"cluster {name} Ready in {time.monotonic() - t0:.0f}s (image load included)")
        # The operator and tool-server images in the node, so that the chart and examples/*.yaml
        # run as written (the images are never pulled: no registry holds them).
        imgs = app_images()
        for archive in (imgs.operator_archive, imgs.toolserver_archive):
            load_archive(built.kind, name, archive, env)
        repo, _, tag = imgs.operator.rpartition(":")
        log(f"loaded {imgs.operator} and {imgs.toolserver}; install the chart with: helm install baton "
            f"charts/baton -n baton-system --create-namespace --set image.repository={repo} "
            f"--set image.tag={tag} --set image.pullPolicy=Never")
    except BaseException:
        log("up failed: removing what it created")
        down(d)
        raise
    return kubeconfig


def down(d: Path) -> None:
    state = d / "kind"
    name = (state / "name").read_text().strip() if (state / "name").exists() else DEFAULT_NAME
    if (state / "host.json").exists():
        env = podman_env(state, state / "cni")
        kind = CACHE / "none"
        try:
            kind = Path(run("bash", HACK / "build-tools.sh", "--print-kind-dir").stdout.strip()) / "kind"
        except KindError:
            pass
        if kind.exists():
            subprocess.run([str(kind), "delete", "cluster", f"--name={name}"], env=env,
                           capture_output=True, timeout=180)
    errors = restore_host(state)
    (d / "kind-kubeconfig").unlink(missing_ok=True)
    (state / "name").unlink(missing_ok=True)
    if errors:
        raise KindError("could not undo everything:\n" + "\n".join(errors))


# --- the images the e2e tests run ---------------------------------------------------------


def dockerfile_python() -> str:
    """The Python minor version of the Dockerfile's PYTHON_IMAGE (python:3.13.14-slim-… -> 3.13)."""
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("ARG PYTHON_IMAGE=python:"):
            return ".".join(line.partition(":")[2].split(".")[:2])
    raise KindError("Dockerfile: no ARG PYTHON_IMAGE=python:<version>-… line")


def python_rootfs() -> tuple[Path, str]:
    """Debian KIND_PYTHON_SUITE's python3 with venv as a root filesystem directory, cached:
    (the directory, its Python minor version). The Dockerfile's PYTHON_IMAGE where no registry
    is: its Python minor version must be the Dockerfile's (the lock's markers, the wheels' ABI)."""
    v = versions()
    suite = v["KIND_PYTHON_SUITE"]
    mirror = os.environ.get("KIND_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    out = CACHE / f"kind-python-{suite}-{digest(suite, mirror, 'python3,python3-venv')}"
    rootfs = out / "rootfs"
    with locked(out):
        if not rootfs.exists():
            log(f"mmdebstrap {suite} with python3 into {out}")
            t0 = time.monotonic()
            security = os.environ.get("KIND_DEBIAN_SECURITY", "http://deb.debian.org/debian-security")
            part = out / "rootfs.part"
            shutil.rmtree(part, ignore_errors=True)
            run("mmdebstrap", "--quiet", "--variant=apt", "--format=directory",
                "--include=python3,python3-venv", suite,
                part, f"deb {mirror} {suite} main", f"deb {mirror} {suite}-updates main",
                f"deb {security} {suite}-security main", timeout=900)
            os.replace(part, rootfs)
            log(f"python base rootfs ({suite}) built in {time.monotonic() - t0:.0f}s")
    # /usr/bin/python3 -> python3.13: the interpreter the images run.
    have = os.readlink(rootfs / "usr" / "bin" / "python3").removeprefix("python")
    want = dockerfile_python()
    if have != want:
        raise KindError(f"Debian {suite} has Python {have}, the Dockerfile's PYTHON_IMAGE {want}: "
                        "set KIND_PYTHON_SUITE in hack/versions.env to a suite with Python " + want)
    return rootfs, have


def python_base(env: dict[str, str], rootfs: Path) -> str:
    """localhost/baton-python:<suite> in the storage of ENV, from python_rootfs()."""
    return os_base(env, rootfs, f"localhost/baton-python:{versions()['KIND_PYTHON_SUITE']}")


def nodejs_rootfs() -> tuple[Path, str]:
    """Debian KIND_PYTHON_SUITE's nodejs as a root filesystem directory, cached: the Node runtime
    of the TypeScript MCP client image, from the same suite as the python base (trixie: Node 20).
    Its major version must be the one tests/e2e/mcptool-ts/package.json's engines name."""
    suite = versions()["KIND_PYTHON_SUITE"]
    mirror = os.environ.get("KIND_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    # Not "kind-node-*": build() prunes those (the kind node image).
    out = CACHE / f"nodejs-rootfs-{suite}-{digest(suite, mirror, 'nodejs')}"
    rootfs = out / "rootfs"
    with locked(out):
        if not rootfs.exists():
            log(f"mmdebstrap {suite} with nodejs into {out}")
            t0 = time.monotonic()
            security = os.environ.get("KIND_DEBIAN_SECURITY", "http://deb.debian.org/debian-security")
            part = out / "rootfs.part"
            shutil.rmtree(part, ignore_errors=True)
            run("mmdebstrap", "--quiet", "--variant=apt", "--format=directory", "--include=nodejs",
                suite, part, f"deb {mirror} {suite} main", f"deb {mirror} {suite}-updates main",
                f"deb {security} {suite}-security main", timeout=900)
            os.replace(part, rootfs)
            log(f"nodejs base rootfs ({suite}) built in {time.monotonic() - t0:.0f}s")
    # The package's version, from dpkg's status file (running the rootfs' node needs a chroot).
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text()
    entry = next((e for e in status.split("\n\n") if e.startswith("Package: nodejs\n")), "")
    have = next((ln.split()[1] for ln in entry.splitlines() if ln.startswith("Version: ")), "?")
    engines = json.loads((MCPTOOL_TS / "package.json").read_text())["engines"]["node"]
    want = engines.removeprefix(">=").split(".")[0].split()[0]
    if have.split(".")[0] != want:
        raise KindError(f"Debian {suite} has nodejs {have}; {MCPTOOL_TS}/package.json wants node {engines}")
    return rootfs, have


def os_base(env: dict[str, str], rootfs: Path, image: str) -> str:
    """IMAGE in the storage of ENV, from a root filesystem directory."""
    c = run("buildah", "from", "scratch", env=env).stdout.strip()
    run("buildah", "add", "--quiet", c, rootfs, "/", env=env)
    # A scratch image has no PATH: the Containerfiles' ENV extends it.
    run("buildah", "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        c, env=env)
    run("buildah", "commit", "--quiet", "--rm", c, image, env=env)
    return image


def go_base(env: dict[str, str], base: str) -> str:
    """The Dockerfile's GO_IMAGE where no registry is: BASE with the host's Go toolchain at
    /usr/local/go, as localhost/baton-go:<go version>. The bridge (bridge/) is the standard
    library only, built with GOTOOLCHAIN=local: nothing is downloaded in the build."""
    goroot = run("go", "env", "GOROOT").stdout.strip()
    version = run("go", "env", "GOVERSION").stdout.strip()
    image = f"localhost/baton-go:{version}"
    c = run("buildah", "from", "--pull-never", base, env=env).stdout.strip()
    run("buildah", "copy", "--quiet", c, goroot, "/usr/local/go", env=env)
    run("buildah", "config", "--env", "PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env", "GOCACHE=/tmp/go-build", "--env", "GOPATH=/tmp/go", c, env=env)
    run("buildah", "commit", "--quiet", "--rm", c, image, env=env)
    return image


def go_version() -> str:
    """The host's Go (its version keys the operator image: the bridge is built with it)."""
    return run("go", "env", "GOVERSION").stdout.strip()


def node_modules(context: Path) -> Path:
    """`npm ci` of CONTEXT's package-lock.json (every package by version and integrity hash) on the
    host, cached by the lock: the build mounts it (the build itself runs with --network none)."""
    out = CACHE / f"npm-{digest(context / 'package.json', context / 'package-lock.json')}"
    with locked(out):
        if not (out / ".ok").exists():
            if not shutil.which("npm"):
                raise KindError(f"npm is not on PATH: {context.name}'s image needs the host's npm "
                                "(Node.js 20) to install its package-lock.json")
            shutil.rmtree(out / "node_modules", ignore_errors=True)
            for f in ("package.json", "package-lock.json"):
                shutil.copy(context / f, out / f)
            log(f"npm ci of {context / 'package-lock.json'} into {out}")
            t0 = time.monotonic()
            # --ignore-scripts: no package's install script runs on the host.
            run("bash", "-c", 'cd "$1" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund '
                '--loglevel=error --cache "$1/.npm"', "npm-ci", out, timeout=900)
            log(f"node_modules installed in {time.monotonic() - t0:.0f}s")
            shutil.rmtree(out / ".npm", ignore_errors=True)
            (out / ".ok").touch()
    return out


def wheelhouse(python: str, lock: Path = REPO / "requirements" / "image.lock") -> Path:
    """LOCK's wheels (default requirements/image.lock) for Python PYTHON (the base's, not the
    host's), downloaded on the host (pip inside a build cannot check TLS certificates here),
    checked against the lock's hashes."""
    out = CACHE / f"wheels-{digest(lock, python)}"
    with locked(out):
        if not (out / ".ok").exists():
            run(sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--no-deps", "--only-binary=:all:", "--python-version", python, "--require-hashes",
                "-r", lock, "-d", out, timeout=900)
            (out / ".ok").touch()
    return out


# What the Dockerfile copies (.dockerignore) and the tool server's context: their content keys
# the cached image archives.
OPERATOR_CONTEXT = [REPO / p for p in ("Dockerfile", ".dockerignore", "hack/image-install.sh",
                                       "requirements/image.lock", "pyproject.toml", "README.md",
                                       "operator", "bridge")]
TOOLSERVER = REPO / "tests" / "e2e" / "toolserver"
# The tool server's name is fixed (the archive is keyed by content): examples/*.yaml name it, so
# they run as written on a cluster of this route (tests/e2e/test_incluster.py applies one).
TOOLSERVER_IMAGE = "localhost/baton-toolserver:e2e"
# The MCP tool and client of tests/e2e/test_gateway_mcp.py: the official MCP SDK from PyPI
# (its lock, hash-checked wheels downloaded on the host), server.py and client.py.
MCPTOOL = REPO / "tests" / "e2e" / "mcptool"
# Its TypeScript client: the official @modelcontextprotocol/sdk from npm (package-lock.json) on
# Debian's nodejs, client.mjs.
MCPTOOL_TS = REPO / "tests" / "e2e" / "mcptool-ts"
# The stdio MCP servers of tests/e2e/test_gateway_mcp.py, unmodified from their registries (no
# bridge in them: it comes from the operator image): mcp-server-time from PyPI on the python
# base (requirements.lock), server-memory and server-everything from npm on the nodejs base
# (package-lock.json).
STDIO_TIME = REPO / "tests" / "e2e" / "stdio-time"
STDIO_NODE = REPO / "tests" / "e2e" / "stdio-node"


@dataclass
class AppImages:
    operator: str
    operator_archive: Path
    toolserver: str
    toolserver_archive: Path
    mcptool: str
    mcptool_archive: Path
    mcptool_ts: str
    mcptool_ts_archive: Path
    stdio_time: str
    stdio_time_archive: Path
    stdio_node: str
    stdio_node_archive: Path


def app_images() -> AppImages:
    """The operator image from the project's Dockerfile and the tool-server image, built with
    buildah on the Debian python base, offline (--network none, --pull-never), cached."""
    rootfs, python = python_rootfs()
    wheels = wheelhouse(python)
    mcp_wheels = wheelhouse(python, MCPTOOL / "requirements.lock")
    base_key = digest(rootfs.parent.name, wheels.name)
    op_key = digest(base_key, go_version(), *OPERATOR_CONTEXT)
    ts_key = digest(base_key, TOOLSERVER)
    mcp_key = digest(rootfs.parent.name, mcp_wheels.name, MCPTOOL)
    node_rootfs, node_version = nodejs_rootfs()
    modules = node_modules(MCPTOOL_TS)
    ts_client_key = digest(node_rootfs.parent.name, node_version, modules.name, MCPTOOL_TS)
    time_wheels = wheelhouse(python, STDIO_TIME / "requirements.lock")
    time_key = digest(rootfs.parent.name, time_wheels.name, STDIO_TIME)
    node_servers = node_modules(STDIO_NODE)
    node_key = digest(node_rootfs.parent.name, node_version, node_servers.name, STDIO_NODE)
    out = CACHE / "kind-app-images"
    result = AppImages(operator=f"localhost/baton:e2e-{op_key}",
                       operator_archive=out / f"baton-{op_key}.tar",
                       toolserver=TOOLSERVER_IMAGE,
                       toolserver_archive=out / f"toolserver-{ts_key}.tar",
                       mcptool=f"localhost/baton-mcptool:e2e-{mcp_key}",
                       mcptool_archive=out / f"mcptool-{mcp_key}.tar",
                       mcptool_ts=f"localhost/baton-mcptool-ts:e2e-{ts_client_key}",
                       mcptool_ts_archive=out / f"mcptool-ts-{ts_client_key}.tar",
                       stdio_time=f"localhost/baton-stdio-time:e2e-{time_key}",
                       stdio_time_archive=out / f"stdio-time-{time_key}.tar",
                       stdio_node=f"localhost/baton-stdio-node:e2e-{node_key}",
                       stdio_node_archive=out / f"stdio-node-{node_key}.tar")
    archives = (result.operator_archive, result.toolserver_archive, result.mcptool_archive,
                result.mcptool_ts_archive, result.stdio_time_archive, result.stdio_node_archive)
    with locked(out):
        if all(a.exists() for a in archives):
            return result
        with build_storage(out) as env:
            base = python_base(env, rootfs)
            common = ["buildah", "build", "--quiet", "--pull-never", "--network", "none",
                      "--layers=false", "--build-arg", f"PYTHON_IMAGE={base}"]
            if not result.operator_archive.exists():
                log(f"building {result.operator}")
                run(*common, "--build-arg", f"GO_IMAGE={go_base(env, base)}",
                    "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
                    "-v", f"{wheels}:/wheels:ro", "-f", REPO / "Dockerfile", "-t", result.operator,
                    REPO, env=env, timeout=900)
                _save(result.operator, result.operator_archive, env)
            if not result.toolserver_archive.exists():
                log(f"building {result.toolserver}")
                run(*common, "-f", TOOLSERVER / "Containerfile", "-t", result.toolserver,
                    TOOLSERVER, env=env, timeout=600)
                _save(result.toolserver, result.toolserver_archive, env)
            if not result.mcptool_archive.exists():
                log(f"building {result.mcptool}")
                t0 = time.monotonic()
                run(*common, "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
                    "-v", f"{mcp_wheels}:/wheels:ro", "-f", MCPTOOL / "Containerfile",
                    "-t", result.mcptool, MCPTOOL, env=env, timeout=900)
                _save(result.mcptool, result.mcptool_archive, env)
                log(f"{result.mcptool} built in {time.monotonic() - t0:.0f}s "
                    f"({result.mcptool_archive.stat().st_size / 2**20:.0f} MiB archive)")
            node_base = ""
            if not result.mcptool_ts_archive.exists() or not result.stdio_node_archive.exists():
                node_base = os_base(env, node_rootfs, f"localhost/baton-nodejs:{versions()['KIND_PYTHON_SUITE']}")
            if not result.mcptool_ts_archive.exists():
                log(f"building {result.mcptool_ts} (nodejs {node_version})")
                t0 = time.monotonic()
                run("buildah", "build", "--quiet", "--pull-never", "--network", "none", "--layers=false",
                    "--build-arg", f"NODE_IMAGE={node_base}", "-v", f"{modules}:/deps:ro",
                    "-f", MCPTOOL_TS / "Containerfile", "-t", result.mcptool_ts, MCPTOOL_TS,
                    env=env, timeout=900)
                _save(result.mcptool_ts, result.mcptool_ts_archive, env)
                log(f"{result.mcptool_ts} built in {time.monotonic() - t0:.0f}s "
                    f"({result.mcptool_ts_archive.stat().st_size / 2**20:.0f} MiB archive)")
            if not result.stdio_time_archive.exists():
                log(f"building {result.stdio_time}")
                t0 = time.monotonic()
                run(*common, "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
                    "-v", f"{time_wheels}:/wheels:ro", "-f", STDIO_TIME / "Containerfile",
                    "-t", result.stdio_time, STDIO_TIME, env=env, timeout=900)
                _save(result.stdio_time, result.stdio_time_archive, env)
                log(f"{result.stdio_time} built in {time.monotonic() - t0:.0f}s "
                    f"({result.stdio_time_archive.stat().st_size / 2**20:.0f} MiB archive)")
            if not result.stdio_node_archive.exists():
                log(f"building {result.stdio_node} (nodejs {node_version})")
                t0 = time.monotonic()
                run("buildah", "build", "--quiet", "--pull-never", "--network", "none", "--layers=false",
                    "--build-arg", f"NODE_IMAGE={node_base}", "-v", f"{node_servers}:/deps:ro",
                    "-f", STDIO_NODE / "Containerfile", "-t", result.stdio_node, STDIO_NODE,
                    env=env, timeout=900)
                _save(result.stdio_node, result.stdio_node_archive, env)
                log(f"{result.stdio_node} built in {time.monotonic() - t0:.0f}s "
                    f"({result.stdio_node_archive.stat().st_size / 2**20:.0f} MiB archive)")
            # The size docs/kind.md quotes: podman's figure (uncompressed layers) of each image.
            sizes = run("podman", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}",
                        env=env).stdout.strip()
            log("image sizes (podman image ls): " + "; ".join(sizes.splitlines()))
        prune(out.glob("*.tar"), *archives)
    return result


def prune(paths: Iterator[Path], *keep: Path) -> None:
    """Remove the cached builds of older inputs (each is hundreds of MB): the cache holds the
    current key of each build only."""
    for p in paths:
        if p not in keep:
            log(f"removing the outdated {p}")
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _save(image: str, archive: Path, env: dict[str, str]) -> None:
    part = archive.with_suffix(".part")
    part.unlink(missing_ok=True)
    run("buildah", "push", "--quiet", image, f"docker-archive:{part}:{image}", env=env)
    os.replace(part, archive)


def load_archive(kind: Path, name: str, archive: Path, env: dict[str, str]) -> None:
    """`kind load image-archive` (kind load docker-image calls the docker CLI)."""
    run(kind, "load", "image-archive", f"--name={name}", archive, env=env, timeout=300)


# --- command line ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["up", "down", "build", "images", "check", "prebuild"])
    ap.add_argument("--dir", type=Path, default=REPO / ".baton")
    ap.add_argument("--name", default=DEFAULT_NAME)
    a = ap.parse_args(argv)
    try:
        if a.command == "check":
            why = why_not()
            if why:
                print(why)
                return 3
            return 0
        if a.command == "prebuild":
            why = why_not()
            if why:
                log(f"not building the kind route: {why} (tests/e2e will be skipped, saying so)")
                return 0
            t0 = time.monotonic()
            build()
            app_images()
            log(f"kind route built in {time.monotonic() - t0:.0f}s (cached: ~/.cache/baton)")
        elif a.command == "build":
            print(build().node_archive)
        elif a.command == "images":
            imgs = app_images()
            print(imgs.operator_archive)
            print(imgs.toolserver_archive)
            print(imgs.mcptool_archive)
            print(imgs.mcptool_ts_archive)
            print(imgs.stdio_time_archive)
            print(imgs.stdio_node_archive)
        elif a.command == "up":
            print(up(a.dir.resolve(), a.name))
        elif a.command == "down":
            down(a.dir.resolve())
    except KindError as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
