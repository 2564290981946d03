"""Every `baton.x.y` a docstring under operator/baton names exists: a module that imports, or an
attribute of one (`baton.handlers.install`). A docstring naming a module that was moved or never
written fails here."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import baton

PACKAGE = Path(baton.__file__).resolve().parent
DOTTED = re.compile(r"\bbaton(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# `baton.dev` in a docstring is the API group (`baton.dev/reset`, `toolruntimes.baton.dev`).
NOT_MODULES = {"baton.dev"}
# Known false references, each with its reason (none since issue 22). Keyed by (file under
# operator/baton, dotted name).
KNOWN_FALSE: dict[tuple[str, str], str] = {
}


def docstring_names() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                for m in DOTTED.finditer(doc):
                    if m.group(0) not in NOT_MODULES:
                        found.add((path.relative_to(PACKAGE).as_posix(), m.group(0)))
    return found


def resolves(name: str) -> bool:
    """The longest prefix of `name` that imports, then the rest as attributes of it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_docstrings_name_only_modules_that_exist() -> None:
    names = docstring_names()
    assert names, "no baton.* names found in docstrings: the scan is broken"
    false = sorted(ref for ref in names if ref not in KNOWN_FALSE and not resolves(ref[1]))
    assert not false, f"docstrings name modules that do not exist (file, name): {false}"


def test_the_known_false_list_is_still_false() -> None:
    # A fixed docstring leaves its entry behind: remove it, so the list stays exact.
    names = docstring_names()
    stale = sorted(ref for ref in KNOWN_FALSE if ref not in names or resolves(ref[1]))
    assert not stale, f"KNOWN_FALSE entries no longer false (remove them): {stale}"
