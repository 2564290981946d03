"""Every mutation of hack/mutations.py still applies: each old text occurs exactly once in its file.

A refactor that moves or renames the mutated code would otherwise break `make mutations`
silently until it is run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def _mutations() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_mutations", ROOT / "hack" / "mutations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


MUTATIONS = _mutations().MUTATIONS


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_old_text_occurs_exactly_once(mutation: object) -> None:
    for rel, edits in mutation.files().items():  # type: ignore[attr-defined]
        text = (ROOT / rel).read_text()
        for old, _ in edits:
            assert text.count(old) == 1, f"{rel}: {old!r}"


def test_unit_files_exist() -> None:
    for rel in _mutations().UNIT:
        assert (ROOT / rel).is_file(), rel
