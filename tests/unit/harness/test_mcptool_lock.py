"""tests/e2e/mcptool/requirements.lock (hack/lock-mcptool.py) pins what requirements.in asks for,
every distribution by version and one sha256, each name once: the MCP image installs it with
--require-hashes --no-deps, so a pin missing here fails its build, not silently later."""
from __future__ import annotations

import re
from pathlib import Path

DIR = Path(__file__).resolve().parents[2] / "e2e" / "mcptool"
PIN = re.compile(r"^([a-z0-9][a-z0-9.-]*)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.M)


def _pins() -> dict[str, str]:
    text = (DIR / "requirements.lock").read_text()
    found = PIN.findall(text)
    names = [n for n, _, _ in found]
    assert len(names) == len(set(names)), names
    # Every requirement line of the lock is a complete pin (nothing unpinned or unhashed).
    reqs = [ln for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
    assert len(reqs) == len(found), reqs
    return {n: v for n, v, _ in found}


def test_the_lock_pins_what_the_inputs_ask_for() -> None:
    pins = _pins()
    wanted = [ln.split("==") for ln in (DIR / "requirements.in").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    assert wanted, "requirements.in names nothing"
    for name, version in wanted:
        assert pins.get(name) == version, (name, version, pins.get(name))


def test_the_lock_holds_the_sdk_and_its_server_stack() -> None:
    # What server.py and client.py import (the image checks the imports once built).
    assert {"mcp", "mcp-types", "uvicorn", "starlette", "httpx2", "websockets", "anyio", "pydantic"} <= set(_pins())
