"""baton.k8s.api lowers asyncio's TLS read buffer (256 KiB per connection, resident from the
start) to TLS_READ_BUFFER_BYTES: a replica holds a TLS connection per watch. Proved on a real TLS
connection on loopback (a certificate made here by openssl): the connection's buffer is the small
one, and a watch line far larger than it still arrives whole."""
from __future__ import annotations

import asyncio
import asyncio.sslproto
import gc
import json
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import aiohttp.web
import kubernetes
import pytest

from baton.k8s import api as k8s_api


def _certificate(tmp: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is needed (the Makefile requires it too)")
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def test_tls_connections_to_the_api_server_get_the_small_read_buffer_and_long_lines_arrive(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    big = {"type": "ADDED", "object": {"metadata": {"name": "cm", "resourceVersion": "2"},
                                       "data": {"blob": "x" * (4 * k8s_api.TLS_READ_BUFFER_BYTES)}}}

    async def handler(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        resp = aiohttp.web.StreamResponse()
        await resp.prepare(request)
        await resp.write(json.dumps(big).encode() + b"\n")
        return resp

    async def run() -> tuple[list[dict[str, object]], list[int]]:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(str(cert), str(key))
        app = aiohttp.web.Application()
        app.router.add_get("/api/v1/configmaps", handler)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        cfg = kubernetes.client.Configuration()
        cfg.host = f"https://127.0.0.1:{port}"
        cfg.ssl_ca_cert = str(cert)
        api = k8s_api.Api(cfg, name="test")
        try:
            got = []
            sizes: list[int] = []
            async for event in api.watch("/api/v1/configmaps", resource_version="1", timeout_seconds=5):
                got.append(event)
                # The client side's TLS protocol objects alive now (the server's are made by the
                # same class, after the client's Api lowered the default).
                sizes = [len(o._ssl_buffer) for o in gc.get_objects()
                         if isinstance(o, asyncio.sslproto.SSLProtocol)]
            return got, sizes
        finally:
            await api.close()
            await runner.cleanup()

    got, sizes = asyncio.run(run())
    assert got == [big]
    assert sizes and all(size == k8s_api.TLS_READ_BUFFER_BYTES for size in sizes), sizes
