"""Out-of-cluster connection settings of a kubeconfig, as kubectl takes them (issue 23): the
cluster's `tls-server-name` is the name the API server's certificate is checked against (and
sent as SNI), `proxy-url` is the proxy every request goes through; a proxy Baton's client cannot
speak (socks5) is refused at startup naming the field, instead of being ignored."""
from __future__ import annotations

import asyncio
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import kubernetes
import pytest
import yaml

from baton.k8s import api
from harness.cluster import Cluster


def _kubeconfig(cluster: Cluster, tmp_path: Path, **fields: str) -> Path:
    """The session's kubeconfig with `fields` added to its (one) cluster entry."""
    data: dict[str, Any] = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    data["clusters"][0]["cluster"].update(fields)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(data))
    return path


def _config(path: Path) -> kubernetes.client.Configuration:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(path), client_configuration=cfg)  # type: ignore[no-untyped-call]
    return cfg


def _get_version(cfg: kubernetes.client.Configuration) -> dict[str, Any]:
    async def body() -> dict[str, Any]:
        client = api.Api(cfg, name="test", pool_size=2)
        try:
            got: dict[str, Any] = await client.request("GET", "/version")
            return got
        finally:
            await client.close()
    return asyncio.run(body())


def test_tls_server_name_is_the_name_the_certificate_is_checked_against(cluster: Cluster, tmp_path: Path) -> None:
    # The local plane's serving certificate names kubernetes.default (and 127.0.0.1, the server
    # address): a name it does not carry must fail the TLS check once it is honoured.
    good = _config(_kubeconfig(cluster, tmp_path, **{"tls-server-name": "kubernetes.default"}))
    assert "gitVersion" in _get_version(good)
    bad = _config(_kubeconfig(cluster, tmp_path, **{"tls-server-name": "not-in-the-certificate.invalid"}))
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as caught:
        _get_version(bad)
    assert "not-in-the-certificate.invalid" in str(caught.value)


class ConnectProxy:
    """An HTTP CONNECT proxy on 127.0.0.1 that tunnels only to 127.0.0.1 and counts tunnels.
    Bounded: each tunnel ends when either side closes or after 30 s of silence."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.tunnels: list[str] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.5)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                chunk = conn.recv(1024)
                if not chunk:
                    return
                head += chunk
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or host != "127.0.0.1":  # the network rule: loopback only
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                return
            self.tunnels.append(target)
            with socket.create_connection((host, int(port)), timeout=10) as upstream:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pair = {conn: upstream, upstream: conn}
                while not self._stop.is_set():
                    ready, _, _ = select.select(list(pair), [], [], 30)
                    if not ready:
                        return
                    for s in ready:
                        data = s.recv(65536)
                        if not data:
                            return
                        pair[s].sendall(data)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def connect_proxy() -> Iterator[ConnectProxy]:
    proxy = ConnectProxy()
    yield proxy
    proxy.close()


def test_proxy_url_carries_every_request(cluster: Cluster, tmp_path: Path, connect_proxy: ConnectProxy) -> None:
    cfg = _config(_kubeconfig(cluster, tmp_path, **{"proxy-url": f"http://127.0.0.1:{connect_proxy.port}"}))
    assert "gitVersion" in _get_version(cfg)
    server_port = cfg.host.rsplit(":", 1)[1].rstrip("/")
    assert connect_proxy.tunnels == [f"127.0.0.1:{server_port}"]


def test_a_proxy_baton_cannot_speak_is_refused_at_startup_naming_the_field(cluster: Cluster, tmp_path: Path) -> None:
    path = _kubeconfig(cluster, tmp_path, **{"proxy-url": "socks5://127.0.0.1:1080"})
    env = {**cluster.env, "KUBECONFIG": str(path)}
    res = subprocess.run([sys.executable, "-m", "baton"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "proxy-url 'socks5://127.0.0.1:1080'" in res.stderr and "http:// and https://" in res.stderr, res.stderr
