"""The API proxy's configuration pieces without a cluster (its traffic is proven against the real
plane in tests/integration/test_apiproxy.py): the kubeconfig it hands the operator is accepted by
the kubernetes client and by kopf's login as plain http without credentials; the upstream
credentials are read the way the kubernetes client reads them; predicates match what they say.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

from harness.apiproxy import RequestInfo, _upstream_from_kubeconfig, matching, write_kubeconfig

KOPF_LOGIN = """
import json, logging, kopf
info = kopf.login_via_client(logger=logging.getLogger("t"), settings=kopf.OperatorSettings())
print(json.dumps({k: getattr(info, k) for k in (
    "server", "ca_path", "insecure", "username", "password", "scheme", "token",
    "certificate_path", "private_key_path")}))
"""


def test_proxy_kubeconfig_is_plain_http_without_credentials_for_the_kubernetes_client(
        tmp_path: Path) -> None:
    kc = tmp_path / "proxy.kubeconfig"
    write_kubeconfig(kc, "http://127.0.0.1:4321")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kc), client_configuration=cfg,  # type: ignore[no-untyped-call]
                            persist_config=False)
    assert cfg.host == "http://127.0.0.1:4321"
    assert not cfg.cert_file and not cfg.key_file and not cfg.api_key
    assert cfg.get_api_key_with_prefix("BearerToken") is None


def test_kopf_login_via_client_accepts_the_proxy_kubeconfig(tmp_path: Path) -> None:
    """What the operator's on_login does (kopf.login_via_client), in a fresh process: the
    kubernetes client reads KUBECONFIG when imported, and no in-cluster variables are set."""
    kc = tmp_path / "proxy.kubeconfig"
    write_kubeconfig(kc, "http://127.0.0.1:4321")
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    env["KUBECONFIG"] = str(kc)
    out = subprocess.run([sys.executable, "-c", KOPF_LOGIN], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info == {"server": "http://127.0.0.1:4321", "ca_path": None, "insecure": False,
                    "username": None, "password": None, "scheme": None, "token": None,
                    "certificate_path": None, "private_key_path": None}


def test_upstream_token_is_sent_as_a_bearer_header(tmp_path: Path) -> None:
    kc = tmp_path / "token.kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "s3cret"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"}))
    up = _upstream_from_kubeconfig(str(kc))
    assert up.base == "https://127.0.0.1:6443"
    assert up.authorization == "Bearer s3cret"
    assert not isinstance(up.ssl_context, bool) and up.ssl_context.check_hostname is False


def test_matching_predicates() -> None:
    post = RequestInfo("POST", "/api/v1/namespaces/ns/pods", "")
    get = RequestInfo("GET", "/api/v1/namespaces/ns/pods", "labelSelector=a")
    watch = RequestInfo("GET", "/api/v1/namespaces/ns/pods", "allowWatchBookmarks=true&watch=true")
    sub = RequestInfo("POST", "/api/v1/namespaces/ns/pods/p/eviction", "")
    pods = matching("POST", r"/api/v1/namespaces/ns/pods")
    assert pods(post) and not pods(get) and not pods(sub)
    assert matching("post")(post)
    assert [matching(watch=True)(r) for r in (post, get, watch)] == [False, False, True]
    assert [matching("GET", watch=False)(r) for r in (post, get, watch)] == [False, True, False]
    assert RequestInfo("GET", "/x", "watch=1").is_watch and not RequestInfo("GET", "/x", "watch=false").is_watch
