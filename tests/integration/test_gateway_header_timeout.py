"""The gateway's header-read bound (slowloris): a client that sends its request head a byte at a
time is cut within BATON_GATEWAY_HEADER_SECONDS, while other clients are served meanwhile. The
gateway runs as a real process on loopback; every connection here is bounded in bytes and time."""
from __future__ import annotations

import socket
import threading
import time
from typing import Any

from harness.gateway import GatewayProcess, call

HEADER_SECONDS = 2
DRIBBLERS = 10
# Each dribbler would need this long to finish its head: far past the bound.
HEAD = b"POST /mcp HTTP/1.1\r\nHost: nothing.here\r\n" + b"X-Pad: " + b"a" * 60 + b"\r\n\r\n"
GAP = 0.3  # seconds between two bytes: the head takes len(HEAD) * GAP ≈ 33 s


def dribble(port: int, out: dict[str, Any]) -> None:
    """Send HEAD a byte every GAP seconds until the gateway closes the connection; record when."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(GAP)
        try:
            for i in range(len(HEAD)):
                s.sendall(HEAD[i:i + 1])
                try:
                    if s.recv(1024) == b"":
                        out["cut_after"] = time.monotonic() - start
                        out["sent"] = i + 1
                        return
                except socket.timeout:
                    pass
        except (ConnectionResetError, BrokenPipeError):
            out["cut_after"] = time.monotonic() - start
            return
    out["finished_after"] = time.monotonic() - start


def test_a_client_dribbling_its_headers_is_cut_within_the_bound_and_others_are_served(gateways: Any) -> None:
    gw: GatewayProcess = gateways("gw-a", env={"BATON_GATEWAY_HEADER_SECONDS": str(HEADER_SECONDS)})
    results: list[dict[str, Any]] = [{} for _ in range(DRIBBLERS)]
    threads = [threading.Thread(target=dribble, args=(gw.port, r), daemon=True) for r in results]
    for t in threads:
        t.start()
    time.sleep(0.5)
    # While they dribble, an ordinary call is answered (a Host that names no runtime: 404 at once).
    served = [call(gw.port, "nothing.here", body=b"{}", timeout=10) for _ in range(3)]
    for t in threads:
        t.join(60)
    cut = [r.get("cut_after") for r in results]
    print(f"header bound {HEADER_SECONDS}s: {DRIBBLERS} dribblers cut after "
          f"{', '.join(f'{c:.1f}s' if c is not None else 'never' for c in cut)}; meanwhile calls answered "
          f"{[r.status for r in served]} in {max(r.seconds for r in served):.2f}s at most; "
          f"header timeouts counted: {gw.metric('baton_gateway_header_timeouts_total')}")
    assert all(r.status == 404 and r.headers.get("baton-reason") == "UnknownRuntime" for r in served)
    assert max(r.seconds for r in served) < 5
    assert all(c is not None for c in cut), f"a dribbling client was never cut: {results}"
    # Cut at the bound (with slack for a loaded machine), long before its head would be complete.
    assert all(HEADER_SECONDS - 0.5 <= c < HEADER_SECONDS + 8 for c in cut if c is not None), cut
    assert gw.metric("baton_gateway_header_timeouts_total") >= DRIBBLERS
    # The bound is on the head only: a head sent at once, then a body sent slowly over more than
    # the bound, is answered.
    body = b"{}      "
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: nothing.here\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(len(body)):
            time.sleep(0.5)
            s.sendall(body[i:i + 1])
        answer = s.recv(4096)
    print(f"a slow body after a prompt head ({time.monotonic() - start:.1f}s): {answer.splitlines()[0]!r}")
    assert answer.startswith(b"HTTP/1.1 404"), answer[:200]
