"""The API's names have one home, baton.model.names: no other module spells a baton.dev name."""
from __future__ import annotations

import re
from pathlib import Path

from baton.lifecycle import manifests
from baton.model import names

PACKAGE = Path(names.__file__).resolve().parent.parent
# A string literal that is, or starts with, the API group: "baton.dev", "baton.dev/reset", ...
LITERAL = re.compile(r"""["']baton\.dev["'/]""")
# Modules allowed to spell a baton.dev name besides model/names.py: none. Keep it empty.
NOT_YET: set[str] = set()


def test_only_names_spells_the_api_names() -> None:
    found = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if LITERAL.search(p.read_text())}
    assert found == {"model/names.py"} | NOT_YET


def test_the_re_exports_are_gone() -> None:
    # The names are read from baton.model.names only: no second spelling through an old module.
    from baton.cache import store
    from baton.k8s import claims
    for name in ("GROUP", "API_VERSION", "KIND", "FINALIZER", "LABEL_RUNTIME", "LABEL_GENERATION", "LABEL_SERVING",
                 "ANN_GENERATION", "ANN_FENCING_TOKEN", "ANN_TEMPLATE_HASH", "ANN_RESET", "ANN_FORCE_RECOVERY",
                 "ANN_FORCE_RETIRE", "pod_name", "lease_name"):
        assert not hasattr(manifests, name), name
    assert not hasattr(store, "RUNTIME_LABEL")
    for name in ("GROUP", "VERSION", "PLURAL", "GROUP_VERSION"):
        assert not hasattr(claims, name), name


def test_names_are_the_wire_names() -> None:
    assert (names.GROUP, names.VERSION, names.API_VERSION) == ("baton.dev", "v1alpha1", "baton.dev/v1alpha1")
    assert (names.KIND, names.PLURAL, names.CLAIM_KIND, names.CLAIM_PLURAL) == (
        "ToolRuntime", "toolruntimes", "ToolRuntimeClaim", "toolruntimeclaims")
    assert (names.LABEL_RUNTIME, names.FINALIZER) == ("baton.dev/runtime", "baton.dev/retire")
    assert (names.pod_name("mcp"), names.lease_name("mcp")) == ("mcp", "baton-mcp")


def test_owner_reference_blocks_owner_deletion_unless_told() -> None:
    ref = manifests.owner_reference(name="mcp", uid="u1")
    assert ref == {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "name": "mcp", "uid": "u1",
                   "controller": True, "blockOwnerDeletion": True}
    assert manifests.owner_reference(name="mcp", uid="u1", block_owner_deletion=False) == {
        **ref, "blockOwnerDeletion": False}
