"""The gateway admin key: the shared secret the operator presents to the gateway replicas'
admin API (`Authorization: Bearer <key>`) and they check (docs/gateway.md, "Registration and the
admin API"). Reads one file (the chart mounts its Secret there); no other I/O.

`KeyFile.key()` reads the file again when its modification time or size changes, so a key
rotated in the Secret is taken up without a restart (the kubelet swaps the mounted file).
"""

from __future__ import annotations

import os
import pathlib

# 32 characters of a random alphabet at least (the chart writes 64 alphanumerics).
KEY_MIN_BYTES = 32
VARIABLE = "BATON_GATEWAY_ADMIN_KEY_FILE"


class AdminKeyError(ValueError):
    """The admin key file is missing, unreadable or not a usable key."""


def load(path: str) -> bytes:
    """The key in `path`, surrounding whitespace stripped. Never logged."""
    try:
        key = pathlib.Path(path).read_bytes().strip()
    except OSError as exc:
        raise AdminKeyError(f"{VARIABLE}: cannot read {path}: {exc.strerror}") from None
    if len(key) < KEY_MIN_BYTES:
        raise AdminKeyError(f"{VARIABLE}: {path} holds {len(key)} bytes, at least {KEY_MIN_BYTES} are needed")
    # It travels in an HTTP header: visible ASCII only (no space, no control character).
    if not all(0x21 <= b <= 0x7E for b in key):
        raise AdminKeyError(f"{VARIABLE}: {path} holds bytes other than visible ASCII")
    return key


class KeyFile:
    """One key file, read at construction (AdminKeyError if unusable) and again when it changes.
    A change that leaves the file unusable (half-written) keeps the last good key."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp = self._stat()
        self._key = load(path)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def key(self) -> bytes:
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            try:
                self._key = load(self.path)
                self._stamp = stamp
            except AdminKeyError:
                pass  # a half-written file: keep the last good key until the next change
        return self._key
