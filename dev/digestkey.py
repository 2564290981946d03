"""``ensure(path)``: the digest key file an operator outside the chart needs (BATON_DIGEST_KEY_FILE).

Created once with a random key and kept: every replica started with the same file agrees on every
hash (replicas with different keys would hand off each other's runtimes)."""
from __future__ import annotations

import os
import secrets
from pathlib import Path


def ensure(path: Path) -> str:
    """The path of a key file, written with 32 random bytes (hex) unless it exists already."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return str(path)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return str(path)
