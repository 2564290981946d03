"""`make mutations` still applies: every deliberate bug in hack/mutations.py names a file that
exists, and each of its old texts occurs there exactly once (what `hack.mutations.apply`
requires). A refactor that moves or rewrites the mutated code fails here, in CI, instead of
silently breaking the next `make mutations`."""

from __future__ import annotations

import pytest

from hack import mutations


def test_the_mutations_have_unique_names() -> None:
    names = [m.name for m in mutations.MUTATIONS]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("mutation", mutations.MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_to_todays_code(mutation: mutations.Mutation) -> None:
    assert mutation.edits, f"{mutation.name}: no edits"
    for rel, edits in mutation.files().items():  # its main file and any `elsewhere` ones
        path = mutations.ROOT / rel
        assert path.is_file(), f"{mutation.name}: {rel} does not exist"
        text = path.read_text()
        for old, new in edits:
            assert old != new, f"{mutation.name}: an edit that changes nothing"
            assert text.count(old) == 1, (
                f"{mutation.name}: the text to mutate occurs {text.count(old)} times in {rel} "
                f"(must be exactly once):\n{old}")


def test_the_unit_tests_a_mutation_run_uses_exist() -> None:
    missing = [t for t in mutations.UNIT + mutations.MODEL if not (mutations.ROOT / t).exists()]
    assert not missing, f"hack/mutations.py runs tests that do not exist: {missing}"
