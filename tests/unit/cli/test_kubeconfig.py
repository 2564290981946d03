"""The plugin's own kubeconfig loader (baton.cli.kubeconfig) on real files: contexts (--context,
current-context), KUBECONFIG merging, paths relative to their file, tokens, client certificates,
an exec credential plugin run for real, impersonation from the kubeconfig, and refusals that name
the field. And the plugin's entry module, imported in a fresh interpreter, loads no `kubernetes`
(its import alone was 0.73 s of each call)."""
from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.cli import kubeconfig


def _config(*, current: str = "one", contexts: list[dict[str, Any]] | None = None,
            clusters: list[dict[str, Any]] | None = None, users: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "contexts": contexts if contexts is not None else [
            {"name": "one", "context": {"cluster": "c1", "user": "u1", "namespace": "agents"}},
            {"name": "two", "context": {"cluster": "c2", "user": "u2"}},
        ],
        "clusters": clusters if clusters is not None else [
            {"name": "c1", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}},
            {"name": "c2", "cluster": {"server": "https://127.0.0.2:7443", "tls-server-name": "api.internal",
                                       "certificate-authority-data": base64.b64encode(b"CA PEM").decode(),
                                       "proxy-url": "http://127.0.0.9:3128"}},
        ],
        "users": users if users is not None else [
            {"name": "u1", "user": {"token": "token-one"}},
            {"name": "u2", "user": {"username": "admin", "password": "pw", "as": "alice", "as-groups": ["ops"]}},
        ],
    }


def _write(path: Path, doc: dict[str, Any], *, as_json: bool = False) -> str:
    path.write_text(json.dumps(doc) if as_json else yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("as_json", [False, True])
def test_current_context_and_context_flag(tmp_path: Path, as_json: bool) -> None:
    kc = _write(tmp_path / "kc", _config(), as_json=as_json)
    one = kubeconfig.load(kubeconfig=kc, context=None)
    assert (one.server, one.namespace, one.token, one.insecure) == ("https://127.0.0.1:6443", "agents", "token-one", True)
    two = kubeconfig.load(kubeconfig=kc, context="two")
    assert (two.server, two.namespace, two.token, two.basic) == ("https://127.0.0.2:7443", "default", None, ("admin", "pw"))
    assert (two.tls_server_name, two.ca_pem, two.proxy) == ("api.internal", "CA PEM", "http://127.0.0.9:3128")
    assert (two.impersonate_user, two.impersonate_groups) == ("alice", ("ops",))


def test_kubeconfig_env_merges_files_first_one_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _write(tmp_path / "a", _config(current="", contexts=[
        {"name": "one", "context": {"cluster": "c1", "user": "u1", "namespace": "from-a"}}], clusters=[], users=[]))
    second = _write(tmp_path / "b", _config(current="one"))  # its context "one" is shadowed by a's
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([first, str(tmp_path / "missing"), second]))
    creds = kubeconfig.load(kubeconfig=None, context=None)
    assert (creds.namespace, creds.server, creds.token) == ("from-a", "https://127.0.0.1:6443", "token-one")
    # --kubeconfig is one file, KUBECONFIG is not read then.
    assert kubeconfig.load(kubeconfig=second, context=None).namespace == "agents"


def test_files_relative_to_their_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_text("CA FROM FILE")
    (tmp_path / "certs" / "client.pem").write_bytes(b"CERT")
    (tmp_path / "certs" / "client.key").write_bytes(b"KEY")
    (tmp_path / "certs" / "token").write_text("token-from-file\n")
    kc = _write(tmp_path / "kc", _config(
        clusters=[{"name": "c1", "cluster": {"server": "https://127.0.0.1:6443/", "certificate-authority": "certs/ca.pem"}}],
        users=[{"name": "u1", "user": {"client-certificate": "certs/client.pem", "client-key": "certs/client.key",
                                       "tokenFile": "certs/token"}}]))
    creds = kubeconfig.load(kubeconfig=kc, context=None)
    assert (creds.server, creds.ca_pem, creds.cert_pem, creds.key_pem, creds.token) == (
        "https://127.0.0.1:6443", "CA FROM FILE", b"CERT", b"KEY", "token-from-file")


def test_an_exec_plugin_is_run_with_its_env_and_exec_info(tmp_path: Path) -> None:
    plugin = tmp_path / "cred-plugin"
    plugin.write_text(f"#!{sys.executable}\n"
                      "import json, os, sys\n"
                      "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
                      "token = os.environ['PLUGIN_PREFIX'] + '-' + sys.argv[1] + '-' + info['spec']['cluster']['server']\n"
                      "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
                      "                  'status': {'token': token}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    kc = _write(tmp_path / "kc", _config(users=[{"name": "u1", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "args": ["arg"],
        "env": [{"name": "PLUGIN_PREFIX", "value": "exec"}], "provideClusterInfo": True,
        "interactiveMode": "Never"}}}]))
    assert kubeconfig.load(kubeconfig=kc, context=None).token == "exec-arg-https://127.0.0.1:6443"

    plugin.write_text(f"#!{sys.executable}\nimport sys\nprint('no credentials for you', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(kubeconfig.Invalid, match=r"user 'u1': exec: .*cred-plugin exited 3: no credentials for you"):
        kubeconfig.load(kubeconfig=kc, context=None)


@pytest.mark.parametrize("change, message", [
    ({"current": ""}, r"no current-context is set \(pass --context\)"),
    ({"current": "nope"}, r"context 'nope' does not exist \(there are: one, two\)"),
    ({"clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.1:6443",
                                              "proxy-url": "socks5://127.0.0.1:1080"}}]},
     r"cluster 'c1': proxy-url 'socks5://127.0.0.1:1080': the plugin supports only http:// proxies"),
    ({"clusters": [{"name": "c1", "cluster": {"server": "127.0.0.1:6443"}}]}, r"cluster 'c1': server '127.0.0.1:6443' is not"),
    ({"clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": "nope.pem"}}]},
     r"cluster 'c1': certificate-authority .*nope.pem: No such file or directory"),
    ({"users": [{"name": "u1", "user": {"client-certificate-data": "Q0VSVA=="}}]},
     r"user 'u1': client-certificate and client-key go together"),
    ({"users": [{"name": "u1", "user": {"auth-provider": {"name": "gcp", "config": {}}}}]},
     r"user 'u1': auth-provider 'gcp': the plugin honours only an oidc id-token"),
    ({"users": []}, r"context 'one': user 'u1' does not exist"),
])
def test_what_cannot_be_honoured_is_refused_by_name(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    kc = _write(tmp_path / "kc", _config(**change))
    with pytest.raises(kubeconfig.Invalid, match=message):
        kubeconfig.load(kubeconfig=kc, context=None)


def test_no_kubeconfig_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=str(tmp_path / ".kube" / "config")):
        kubeconfig.load(kubeconfig=None, context=None)


def _imported(code: str) -> set[str]:
    """The modules a fresh interpreter holds after `code` (the plugin run as its console script does)."""
    probe = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    return set(json.loads(res.stdout.splitlines()[-1]))


def test_the_plugin_entry_module_imports_no_kubernetes_client() -> None:
    loaded = _imported("import baton.cli")
    assert "baton.cli.main" in loaded and "baton.cli.cluster" in loaded  # the probe sees what it should
    assert not {m for m in loaded if m.split(".")[0] in ("kubernetes", "urllib3", "pydantic", "yaml")}
    # `version` and `--help` need no connection: no HTTP, TLS or YAML module either.
    loaded = _imported("import io, baton.cli\nbaton.cli.main(['version'], stdout=io.StringIO())")
    assert not {m for m in loaded if m.split(".")[0] in ("kubernetes", "urllib3", "pydantic", "yaml", "http", "ssl")}
