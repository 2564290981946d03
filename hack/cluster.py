#!/usr/bin/env python3
"""A real Kubernetes control plane on 127.0.0.1, as plain processes, for tests, demo and CI.

    hack/cluster.py up   --dir DIR    start it; prints DIR/kubeconfig (admin) on stdout
    hack/cluster.py down --dir DIR    stop exactly the processes `up` started, remove its files
    hack/cluster.py status --dir DIR  say whether it runs

What `up` starts, each listening only on 127.0.0.1 on a port chosen free at start:
etcd, kube-apiserver (TLS from a CA generated here, RBAC, ServiceAccount admission,
--endpoint-reconciler-type=none), kube-controller-manager (an explicit list of controllers),
kube-scheduler and kwok, which plays the kubelet of two fake nodes:

- kwok-a: spec.podCIDR 192.0.2.0/24 (a documentation range: never dialled), no taints, so
  ordinary pods land there and Services get EndpointSlices (EndpointSlice validation rejects
  loopback addresses).
- kwok-loop: spec.podCIDR 127.0.100.0/24 and the taint baton.dev/loopback=true:NoSchedule, so
  only pods that tolerate it and select it (label baton.dev/loopback: "true") land there; a test
  can bind a TCP listener on such a pod's IP, which is on the loopback interface.

Pod behaviour comes from the kwok Stage files in hack/kwok/ (see tests/README.md).

Layout of DIR: kubeconfig, pids ("<component> <pid>" a line), plane.json (ports, versions,
process start times), pki/, etcd/, logs/<component>.log, run/ (HOME and cert dirs of the
processes). Only the standard library and the `openssl` command are used.

Binaries come from --bin-dir, else $BATON_K8S_BIN_DIR, else `hack/build-tools.sh --print-bin-dir`
(which never builds: run `make tools` first).
"""
from __future__ import annotations

import argparse
import base64
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
KWOK_STAGES = REPO / "hack" / "kwok"
LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "198.18.0.0/16"  # RFC 2544 benchmarking range: not routed, and nothing dials it
FIRST_SERVICE_IP = "198.18.0.1"
KWOK_FALLBACK_CIDR = "192.0.2.0/24"  # only used for a node without spec.podCIDR (none here)
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]

# The controllers kube-controller-manager runs, and why each one is needed:
CONTROLLERS = [
    "serviceaccount-controller",        # the `default` ServiceAccount pods need to be admitted
    "serviceaccount-token-controller",  # token Secrets of ServiceAccounts (uses the SA key)
    "root-ca-certificate-publisher-controller",  # kube-root-ca.crt, used by projected SA volumes
    "namespace-controller",             # deleting a namespace deletes what is in it
    "garbage-collector-controller",     # ownerReferences: deleting an owner deletes dependents
    "endpointslice-controller",         # Services get EndpointSlices of their ready pods
    "deployment-controller",            # Helm charts ship Deployments (the operator's chart too)
    "replicaset-controller",            # ... which need ReplicaSets to get pods
]

NODES: list[dict[str, Any]] = [
    {
        "name": "kwok-a",
        "podCIDR": "192.0.2.0/24",
        "labels": {},
        "taints": [],
    },
    {
        "name": "kwok-loop",
        "podCIDR": "127.0.100.0/24",
        "labels": {"baton.dev/loopback": "true"},
        "taints": [{"key": "baton.dev/loopback", "value": "true", "effect": "NoSchedule"}],
    },
]


class PlaneError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# binaries


def find_bin_dir(explicit: str | None = None) -> Path:
    """Where etcd, kube-*, kwok and helm were built. Never starts a build."""
    cand = explicit or os.environ.get("BATON_K8S_BIN_DIR")
    if not cand:
        proc = subprocess.run(
            ["bash", str(REPO / "hack" / "build-tools.sh"), "--print-bin-dir"],
            capture_output=True, text=True, timeout=60,
        )
        if proc.returncode != 0:
            raise PlaneError(
                "the control-plane binaries are not built (run `make tools`): "
                + (proc.stderr.strip() or f"build-tools.sh exited {proc.returncode}")
            )
        cand = proc.stdout.strip().splitlines()[-1]
    path = Path(cand).resolve()
    missing = [c for c in COMPONENTS if not os.access(path / c, os.X_OK)]
    if missing:
        raise PlaneError(f"{path}: missing {', '.join(missing)} (run `make tools`)")
    return path


# ---------------------------------------------------------------------------------------------
# certificates (openssl CLI)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise PlaneError(f"openssl {' '.join(args)}: {proc.stderr.strip()}")


def make_pki(pki: Path) -> None:
    """CA, API server serving cert, admin client cert (O=system:masters), SA signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=baton-local-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", cwd=pki)
    leaves = {
        "apiserver": ("/CN=kube-apiserver", "serverAuth",
                      f"subjectAltName=IP:{LOOPBACK},DNS:localhost,IP:{FIRST_SERVICE_IP},"
                      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                      "DNS:kubernetes.default.svc.cluster.local"),
        "admin": ("/O=system:masters/CN=baton-admin", "clientAuth", ""),
        # kwok's own identity, so that the admission policy below can tell its requests apart.
        "kwok": ("/O=system:masters/CN=kwok", "clientAuth", ""),
        # The API server's identity towards aggregated servers; declaring it (requestheader
        # flags) also fills the CA bundle controller-manager and scheduler look up at start.
        "front-proxy-client": ("/CN=front-proxy-client", "clientAuth", ""),
    }
    for name, (subj, eku, san) in leaves.items():
        _openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=pki)
        ext = pki / f"{name}.ext"
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={eku}\n" + (san + "\n" if san else "")
        )
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "3650", "-sha256",
                 "-extfile", ext.name, cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for p in pki.iterdir():
        p.chmod(0o600)


def write_kubeconfig(path: Path, server: str, pki: Path, user: str = "admin") -> None:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "baton-local", "cluster": {
            "server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": "baton-admin", "user": {
            "client-certificate-data": b64(f"{user}.crt"), "client-key-data": b64(f"{user}.key")}}],
        "contexts": [{"name": "baton-local", "context": {
            "cluster": "baton-local", "user": "baton-admin", "namespace": "default"}}],
        "current-context": "baton-local",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cfg, indent=2) + "\n")  # JSON is YAML: kubectl and clients read it
    tmp.chmod(0o600)
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# small HTTP helpers (loopback only)


def _assert_loopback(host: str) -> None:
    if not host.startswith("127."):
        raise PlaneError(f"refusing to send traffic to {host}: only 127.0.0.0/8 is allowed")


def http_get(host: str, port: int, path: str, ctx: ssl.SSLContext | None,
             timeout: float = 3.0) -> tuple[int, bytes]:
    _assert_loopback(host)
    conn: http.client.HTTPConnection
    if ctx is None:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class AdminApi:
    """The API server, as the admin, over TLS verified against the generated CA."""

    def __init__(self, port: int, pki: Path) -> None:
        self.port = port
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        conn = http.client.HTTPSConnection(LOOPBACK, self.port, timeout=5, context=self.ctx)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": content_type, "Accept": "application/json"}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw) if raw else None
            except ValueError:
                return resp.status, raw.decode(errors="replace")
        finally:
            conn.close()


def insecure_ctx() -> ssl.SSLContext:
    """For the self-signed /healthz of controller-manager and scheduler, on 127.0.0.1 only."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# ---------------------------------------------------------------------------------------------
# processes


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if fields[0] == "Z":
        return None  # a zombie has exited already
    return fields[19]  # field 22 of stat: start time in clock ticks since boot


def _proc_exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def read_pids(d: Path) -> list[tuple[str, int]]:
    f = d / "pids"
    if not f.exists():
        return []
    out = []
    for line in f.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out.append((parts[0], int(parts[1])))
    return out


def read_state(d: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((d / "plane.json").read_text()))
    except (OSError, ValueError):
        return {}


def _ours(d: Path, name: str, pid: int, state: dict[str, Any]) -> bool:
    """Is pid still the process `up` started as `name` (not a recycled pid)?"""
    started = _proc_start_time(pid)
    if started is None:
        return False
    want = state.get("processes", {}).get(name, {})
    if want.get("pid") == pid and want.get("start_time") not in (None, started):
        return False
    exe = _proc_exe(pid)
    return Path(exe).name == name or exe.endswith(f"/{name} (deleted)")


# ---------------------------------------------------------------------------------------------
# the plane


class Plane:
    def __init__(self, d: Path, bin_dir: Path, audit_log: Path | None = None) -> None:
        self.dir = d.resolve()
        self.bin = bin_dir
        self.audit_log = audit_log
        self.pki = self.dir / "pki"
        self.logs = self.dir / "logs"
        self.run = self.dir / "run"
        self.kubeconfig = self.dir / "kubeconfig"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.state: dict[str, Any] = {"processes": {}, "bin_dir": str(bin_dir)}

    # -- launching

    def _spawn(self, name: str, args: list[str], env_extra: dict[str, str] | None,
               die_with_parent: bool) -> None:
        home = self.run / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),  # no ambient ~/.kube or ~/.kwok for the plane
            "LANG": "C.UTF-8",
        }
        env.update(env_extra or {})
        logf = open(self.logs / f"{name}.log", "ab")
        try:
            proc = subprocess.Popen(
                [str(self.bin / name), *args], stdin=subprocess.DEVNULL, stdout=logf,
                stderr=subprocess.STDOUT, env=env, cwd=self.run, start_new_session=True,
                preexec_fn=_set_pdeathsig if die_with_parent else None,
            )
        finally:
            logf.close()
        self.procs[name] = proc
        self.state["processes"][name] = {"pid": proc.pid,
                                         "start_time": _proc_start_time(proc.pid)}
        with open(self.dir / "pids", "a") as f:
            f.write(f"{name} {proc.pid}\n")
        self._save_state()

    def _save_state(self) -> None:
        tmp = self.dir / "plane.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.dir / "plane.json")

    def _log_tail(self, name: str, lines: int = 25) -> str:
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise PlaneError(f"{name} exited with {proc.returncode}; last log lines:\n"
                                 f"{self._log_tail(name)}")

    def _wait(self, what: str, check: Callable[[], bool], deadline: float,
              interval: float = 0.25) -> None:
        attempts = int((deadline - time.monotonic()) / interval) + 2
        last_err: Exception | None = None
        for _ in range(max(attempts, 1)):
            self._check_alive()
            try:
                if check():
                    return
                last_err = None
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                last_err = e
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
        raise PlaneError(f"timed out waiting for {what}" + (f": {last_err}" if last_err else ""))

    def _audit_args(self) -> list[str]:
        """With an audit log (benchmarks' traces): every request's metadata and timestamps."""
        if self.audit_log is None:
            return []
        policy = self.run / "audit-policy.yaml"
        policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                          "rules:\n- level: Metadata\n")
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-maxbackup=1"]

    def up(self, timeout: float = 120.0, die_with_parent: bool = False) -> dict[str, Any]:
        t0 = time.monotonic()
        deadline = t0 + timeout
        self.dir.mkdir(parents=True, exist_ok=True)
        for sub in ("pki", "etcd", "run"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        for f in ("pids", "plane.json", "kubeconfig"):
            (self.dir / f).unlink(missing_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        for c in COMPONENTS:
            (self.logs / f"{c}.log").unlink(missing_ok=True)
        self.run.mkdir(parents=True)

        make_pki(self.pki)
        etcd_port, peer_port, api_port, kcm_port, sched_port, kwok_port = free_ports(6)
        server = f"https://{LOOPBACK}:{api_port}"
        write_kubeconfig(self.kubeconfig, server, self.pki)
        kwok_kc = self.run / "kwok.kubeconfig"
        write_kubeconfig(kwok_kc, server, self.pki, user="kwok")
        kc = str(self.kubeconfig)
        pki = self.pki
        self.state.update({
            "server": server, "kubeconfig": kc,
            "ports": {"etcd": etcd_port, "etcd-peer": peer_port, "kube-apiserver": api_port,
                      "kube-controller-manager": kcm_port, "kube-scheduler": sched_port,
                      "kwok": kwok_port},
        })
        self._save_state()

        etcd_url = f"http://{LOOPBACK}:{etcd_port}"
        peer_url = f"http://{LOOPBACK}:{peer_port}"
        self._spawn("etcd", [
            "--name=baton", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=baton={peer_url}", "--initial-cluster-state=new",
            "--unsafe-no-fsync", "--log-level=warn", "--snapshot-count=5000",
        ], None, die_with_parent)
        self._spawn("kube-apiserver", [
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}",
            f"--secure-port={api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--authorization-mode=RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount",
            # Nodes would be created with a not-ready taint that only the node-lifecycle
            # controller removes; that controller does not run here (kwok nodes never fail).
            "--disable-admission-plugins=TaintNodesByCondition",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            # Sharded list/watch (KEP-5866, alpha in 1.36): Baton's sharded replicas list and
            # watch only their ranges' ToolRuntimes (baton.cache.views; off: they filter themselves).
            "--feature-gates=ShardedListAndWatch=true",
            f"--cert-dir={self.run / 'apiserver'}",
            *self._audit_args(),
        ], {"GOMEMLIMIT": "600MiB"}, die_with_parent)
        # The clients start once the API server is ready: kube-controller-manager exits at once
        # when it cannot read its request-header CA from the API server (seen under load).
        api = AdminApi(api_port, pki)

        def http_ok(port: int, path: str, ctx: ssl.SSLContext | None) -> bool:
            status, body = http_get(LOOPBACK, port, path, ctx)
            return status == 200

        self._wait("etcd /health", lambda: http_ok(etcd_port, "/health", None), deadline)
        self._wait("kube-apiserver /readyz", lambda: api.request("GET", "/readyz")[0] == 200,
                   deadline)
        common = [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                  f"--authorization-kubeconfig={kc}", f"--bind-address={LOOPBACK}",
                  "--leader-elect=false", "--profiling=false"]
        self._spawn("kube-controller-manager", [
            *common, f"--secure-port={kcm_port}", f"--cert-dir={self.run / 'kcm'}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
        ], None, die_with_parent)
        self._spawn("kube-scheduler", [
            *common, f"--secure-port={sched_port}", f"--cert-dir={self.run / 'scheduler'}",
        ], None, die_with_parent)
        stages = sorted(str(p) for p in KWOK_STAGES.glob("*.yaml"))
        self._kwok_deletes_like_a_kubelet(api)
        self._spawn("kwok", [
            f"--kubeconfig={kwok_kc}", f"--config={','.join(stages)}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--node-ip={LOOPBACK}", f"--cidr={KWOK_FALLBACK_CIDR}",
            f"--server-address={LOOPBACK}:{kwok_port}",
            "--node-lease-duration-seconds=40",
        ], None, die_with_parent)

        status, version = api.request("GET", "/version")
        self.state["version"] = version.get("gitVersion") if isinstance(version, dict) else None
        for node in NODES:
            self._create_node(api, node)
        self._wait("kube-controller-manager /healthz",
                   lambda: http_ok(kcm_port, "/healthz", insecure_ctx()), deadline)
        self._wait("kube-scheduler /healthz",
                   lambda: http_ok(sched_port, "/healthz", insecure_ctx()), deadline)
        self._wait("kwok /healthz", lambda: http_ok(kwok_port, "/healthz", None), deadline)

        def nodes_ready() -> bool:
            for node in NODES:
                status, obj = api.request("GET", f"/api/v1/nodes/{node['name']}")
                conds = (obj or {}).get("status", {}).get("conditions", []) if status == 200 else []
                if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                    return False
            return True

        self._wait("kwok nodes Ready", nodes_ready, deadline)
        self._wait("the default ServiceAccount (controller-manager)",
                   lambda: api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0]
                   == 200, deadline)
        self.state["started_seconds"] = round(time.monotonic() - t0, 2)
        self._save_state()
        return self.state

    def _kwok_deletes_like_a_kubelet(self, api: AdminApi) -> None:
        """A kubelet finishes a pod's deletion with the pod's UID as precondition; kwok (v0.8)
        deletes by name, from a queue that can lag. With one pod name per runtime, a late kwok
        delete meant for a generation already gone would hit its successor. This admission
        policy lets kwok delete only pods that are terminating, as a kubelet would."""
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "kwok-deletes-like-a-kubelet"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}]},
                "matchConditions": [{"name": "kwok", "expression": 'request.userInfo.username == "kwok"'}],
                "validations": [{
                    "expression": "has(oldObject.metadata.deletionTimestamp)",
                    "message": "kwok plays the kubelet: it only finishes deleting pods that are terminating"}],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "kwok-deletes-like-a-kubelet"},
            "spec": {"policyName": "kwok-deletes-like-a-kubelet", "validationActions": ["Deny"]},
        }
        for path, body in (("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", policy),
                           ("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", binding)):
            status, obj = api.request("POST", path, body)
            if status not in (201, 409):
                raise PlaneError(f"creating {body['kind']}: HTTP {status}: {obj}")

    def _create_node(self, api: AdminApi, node: dict[str, Any]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node["name"],
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"type": "kwok", "kubernetes.io/hostname": node["name"],
                           "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                           **node["labels"]},
            },
            "spec": {"podCIDR": node["podCIDR"], "podCIDRs": [node["podCIDR"]],
                     "taints": node["taints"]},
        }
        status, obj = api.request("POST", "/api/v1/nodes", body)
        if status not in (201, 409):
            raise PlaneError(f"creating node {node['name']}: HTTP {status}: {obj}")


# ---------------------------------------------------------------------------------------------
# entry points


def running(d: Path) -> bool:
    """True when every component `up` started in d is still alive."""
    pids = read_pids(d)
    state = read_state(d)
    names = {n for n, _ in pids}
    return names == set(COMPONENTS) and all(_ours(d, n, p, state) for n, p in pids)


def up(d: Path, bin_dir: Path | None = None, timeout: float = 120.0,
       die_with_parent: bool = False, audit_log: Path | None = None) -> dict[str, Any]:
    d = d.resolve()
    if read_pids(d):
        if running(d) and (d / "kubeconfig").exists():
            log(f"already running in {d}")
            return read_state(d)
        log(f"stale plane in {d}: cleaning up first")
        down(d, keep_logs=True)
    bin_dir = bin_dir or find_bin_dir()
    for attempt in (1, 2):
        plane = Plane(d, bin_dir, audit_log=audit_log.resolve() if audit_log else None)
        try:
            state = plane.up(timeout=timeout, die_with_parent=die_with_parent)
            break
        except PlaneError as e:
            down(d, keep_logs=True, grace=3.0)  # a half-started plane: no need to wait long
            # A port found free can be taken by another process before ours binds it.
            if attempt == 1 and "address already in use" in str(e):
                log(f"a port was taken meanwhile; starting again ({e.args[0].splitlines()[0]})")
                continue
            log(f"start failed; logs kept in {plane.logs}")
            raise
        except BaseException:
            log(f"start failed; logs kept in {plane.logs}")
            down(d, keep_logs=True, grace=3.0)
            raise
    log(f"up in {state['started_seconds']}s: {state.get('version')} at {state['server']}")
    return state


def _stop(targets: list[tuple[str, int]], grace: float) -> None:
    """TERM the targets, wait up to `grace` s, SIGKILL what is left, wait (bounded) till gone."""
    for _, pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    alive = list(targets)
    deadline = time.monotonic() + grace
    for _ in range(int(grace / 0.1) + 1):
        for _, pid in alive:
            _reap(pid)
        alive = [(n, p) for n, p in alive if _proc_start_time(p) is not None]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for name, pid in alive:
        log(f"{name} ({pid}) ignored SIGTERM for {grace}s: SIGKILL")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in range(50):
        for _, pid in alive:
            _reap(pid)
        alive = [(n, p) for n, p in alive if _proc_start_time(p) is not None]
        if not alive:
            return
        time.sleep(0.1)
    raise PlaneError(f"still alive after SIGKILL: {alive}")


# Stop the API server's clients first, then the API server, then etcd: an API server whose
# etcd is gone takes long to shut down.
STOP_ORDER = [["kwok", "kube-scheduler", "kube-controller-manager"], ["kube-apiserver"], ["etcd"]]


def down(d: Path, keep_logs: bool = False, grace: float = 10.0) -> list[str]:
    """Stop exactly the processes listed in d/pids (TERM, then KILL after `grace` s)."""
    d = d.resolve()
    state = read_state(d)
    targets = [(n, p) for n, p in read_pids(d) if _ours(d, n, p, state)]
    for name, pid in read_pids(d):
        if (name, pid) not in targets:
            _reap(pid)
    for group in STOP_ORDER:
        _stop([(n, p) for n, p in targets if n in group], grace)
    _stop([(n, p) for n, p in targets if not any(n in g for g in STOP_ORDER)], grace)
    for sub in ("pki", "etcd", "run"):
        shutil.rmtree(d / sub, ignore_errors=True)
    for f in ("pids", "plane.json", "plane.json.tmp", "kubeconfig", "kubeconfig.tmp"):
        (d / f).unlink(missing_ok=True)
    if not keep_logs:
        shutil.rmtree(d / "logs", ignore_errors=True)
        try:
            d.rmdir()
        except OSError:
            pass
    return [n for n, _ in targets]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the plane; print the admin kubeconfig path")
    p_up.add_argument("--dir", required=True, type=Path)
    p_up.add_argument("--bin-dir", default=None)
    p_up.add_argument("--timeout", type=float, default=120.0, help="seconds to become healthy")
    p_up.add_argument("--audit-log", type=Path, default=None,
                      help="write the API server's audit log (metadata of every request) to this file")
    p_down = sub.add_parser("down", help="stop the processes `up` started and remove its files")
    p_down.add_argument("--dir", required=True, type=Path)
    p_down.add_argument("--keep-logs", action="store_true", help="keep DIR/logs")
    p_status = sub.add_parser("status", help="exit 0 when the plane in DIR runs")
    p_status.add_argument("--dir", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "up":
            bin_dir = find_bin_dir(args.bin_dir)
            state = up(args.dir, bin_dir, timeout=args.timeout, audit_log=args.audit_log)
            print(state["kubeconfig"])
        elif args.cmd == "down":
            stopped = down(args.dir, keep_logs=args.keep_logs)
            log(f"stopped: {' '.join(stopped) or 'nothing was running'}")
        else:
            ok = running(args.dir)
            print("running" if ok else "not running")
            return 0 if ok else 1
    except PlaneError as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
