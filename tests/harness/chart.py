"""Helpers for tests of the Helm chart (charts/baton): render it, install it, act as its account.

- ``helm_bin()``: the pinned helm built by hack/build-tools.sh (``make tools``).
- ``render(...)``: ``helm template`` of the chart, parsed into a list of objects.
- ``sa_kubeconfig(...)``: a kubeconfig that authenticates with a ServiceAccount token only.
- ``can_i(...)``: ``kubectl auth can-i`` as a ServiceAccount (impersonation by the admin).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Iterable

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "baton"
CRD_SOURCE = ROOT / "crds" / "baton.dev_toolruntimes.yaml"
CRD_COPY = CHART / "files" / "baton.dev_toolruntimes.yaml"
# Every CRD: (the source in crds/, the chart's byte-identical copy in files/).
CRDS = [(ROOT / "crds" / n, CHART / "files" / n) for n in ("baton.dev_toolruntimes.yaml", "baton.dev_toolruntimeclaims.yaml")]
CRD_NAMES = ["toolruntimes.baton.dev", "toolruntimeclaims.baton.dev"]
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
CRD_NAME = "toolruntimes.baton.dev"


def helm_bin() -> str:
    """Path of the pinned helm; AssertionError with the fix when it is not built."""
    from harness.tools import pinned_tool

    return pinned_tool("helm")


def kube_version() -> str:
    """The local plane's Kubernetes version (hack/versions.env)."""
    text = (ROOT / "hack" / "versions.env").read_text()
    m = re.search(r"^KUBERNETES_VERSION=(\S+)$", text, re.M)
    assert m, "hack/versions.env: no KUBERNETES_VERSION"
    return m.group(1)


def helm(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    """helm without any cluster (template, lint): no kubeconfig, no network.

    Without a cluster Helm assumes Kubernetes v1.20.0, which the chart's kubeVersion
    (>=1.29.0-0) refuses: `template` and `install --dry-run=client` render for the local plane's
    version unless the caller passes --kube-version."""
    if args and (args[0] == "template" or "--dry-run=client" in args) and "--kube-version" not in args:
        args = (*args, "--kube-version", kube_version())
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "KUBECONFIG": "/dev/null",
           "HELM_CACHE_HOME": "/tmp/baton-helm-cache", "HELM_CONFIG_HOME": "/tmp/baton-helm-config",
           "HELM_DATA_HOME": "/tmp/baton-helm-data"}
    proc = subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def set_args(values: dict[str, str] | None = None, files: Iterable[Path | str] = ()) -> list[str]:
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    for k, v in (values or {}).items():
        args += ["--set", f"{k}={v}"]
    return args


def render(values: dict[str, str] | None = None, files: Iterable[Path | str] = (), *,
           release: str = "baton", namespace: str = "baton-system",
           set_json: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`helm template` of the chart, as objects (empty documents dropped)."""
    import json

    extra: list[str] = []
    for k, v in (set_json or {}).items():
        extra += ["--set-json", f"{k}={json.dumps(v)}"]
    out = helm("template", release, str(CHART), "-n", namespace, *set_args(values, files), *extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o.get("kind") == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container_env(deployment: dict[str, Any]) -> dict[str, Any]:
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def sa_kubeconfig(cluster: Any, token: str, path: Path, namespace: str = "default") -> str:
    """A kubeconfig with the cluster's server and CA and a bearer token: no admin credential."""
    cfg = cluster.api_client.configuration
    assert cfg.ssl_ca_cert, "the admin client has no CA file to reuse"
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "baton-test", "cluster": {"server": cfg.host,
                                                       "certificate-authority": cfg.ssl_ca_cert}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "baton-test", "user": "sa",
                                                "namespace": namespace}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return str(path)


def can_i(cluster: Any, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    """`kubectl auth can-i VERB RESOURCE --as USER`: in NAMESPACE, in all namespaces at once
    ("*"), or for a cluster-scoped resource (None). RESOURCE may name a subresource:
    "toolruntimes.baton.dev/status"."""
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, resource, "--as", user]
    if sub:
        args.append(f"--subresource={sub}")
    if namespace == "*":
        args.append("--all-namespaces")
    elif namespace:
        args += ["-n", namespace]
    proc = cluster.kubectl(*args, check=False, timeout=30)
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


def adopt_crd(cluster: Any, release: str, namespace: str) -> None:
    """Let `helm install` take over a CRD applied before without Helm (e.g. by another test):
    Helm adopts an existing object only if it carries the release's ownership metadata."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(cluster.api_client)
    for name in CRD_NAMES:
        try:
            ext.read_custom_resource_definition(name)
        except ApiException as e:
            if e.status == 404:
                continue
            raise
        ext.patch_custom_resource_definition(name, {"metadata": {
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": release,
                            "meta.helm.sh/release-namespace": namespace}}})


# Denials that come from the operator, not from the chart (reported to its owners; docs/chart.md,
# "Gaps"): with them the operator still works, after a delay. Any other denial is a chart bug.
KNOWN_GAPS = {
    "kopf scans namespaces and CRDs (settings.scanning.disabled is not set): it retries the "
    "cluster-wide list 9 times (~55 s) before falling back, which delays a namespaced "
    "operator's start by about a minute":
        re.compile(r"/api/v1/namespaces(\?| ->)|customresourcedefinitions|Not enough permissions to "
                   r"(list namespaces|watch for namespaces|watch for resources)"),
    "the operator always watches Secrets, also where rbac.readSecrets grants no Secret access "
    "(no setting turns that watch off), so kopf retries the denied watch forever":
        re.compile(r"/api/v1/(namespaces/[^/]+/)?secrets(\?| ->)"),
}
DENIAL = re.compile(r"\b403\b|[Ff]orbidden|Not enough permissions")


def classify_denials(log: str) -> tuple[list[str], list[str]]:
    """(known operator gaps seen, other denial lines) in an operator log."""
    seen: set[str] = set()
    unknown: list[str] = []
    for line in log.splitlines():
        if not DENIAL.search(line) or "because it is being terminated" in line:
            continue  # the latter: NamespaceLifecycle (another test's namespace going), not RBAC
        gap = next((why for why, rx in KNOWN_GAPS.items() if rx.search(line)), None)
        if gap is None:
            unknown.append(line)
        else:
            seen.add(gap)
    return sorted(seen), unknown
