"""Baton: hands off tool-runtime generations one at a time under a per-runtime Lease."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    """The installed distribution's version (baton_build_info, --version, the plugin's version)."""
    try:
        return importlib.metadata.version("baton")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree without installing
        return "0.0.0+unknown"
