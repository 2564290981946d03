"""tests/e2e/mcptool-ts/package-lock.json pins what package.json asks for, every package by exact
version and an sha512 integrity hash: hack/kind.py installs it with `npm ci` (which refuses a lock
that does not match package.json) and keys the image's cache by it."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parents[2] / "e2e" / "mcptool-ts"
EXACT = re.compile(r"^\d+\.\d+\.\d+$")


def _lock() -> dict[str, Any]:
    lock: dict[str, Any] = json.loads((DIR / "package-lock.json").read_text())
    return lock


def test_package_json_pins_exact_versions_and_the_lock_matches() -> None:
    package = json.loads((DIR / "package.json").read_text())
    wanted = package["dependencies"]
    assert wanted, "package.json names no dependency"
    packages = _lock()["packages"]
    assert packages[""]["dependencies"] == wanted, (packages[""], wanted)
    for name, version in wanted.items():
        assert EXACT.match(version), f"package.json: {name} {version!r} is not an exact version"
        assert packages[f"node_modules/{name}"]["version"] == version, name


def test_every_locked_package_has_a_version_and_an_integrity_hash() -> None:
    packages = {k: v for k, v in _lock()["packages"].items() if k}
    assert "node_modules/@modelcontextprotocol/sdk" in packages
    for path, entry in packages.items():
        assert EXACT.match(entry.get("version", "")), (path, entry.get("version"))
        assert entry.get("integrity", "").startswith("sha512-"), (path, entry.get("integrity"))
