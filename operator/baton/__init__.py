"""Baton: hands off tool-runtime generations one at a time under a per-runtime Lease."""

from __future__ import annotations


def version() -> str:
    """The installed distribution's version (baton_build_info, --version, the plugin's version)."""
    # Imported here: importlib.metadata costs the plugin about 0.1 s of CPU, needed by `version` only.
    import importlib.metadata

    try:
        return importlib.metadata.version("baton")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree without installing
        return "0.0.0+unknown"
