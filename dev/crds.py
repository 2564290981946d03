"""Baton's CRDs on a cluster: their files and the wait until the API server serves them. Needs
the kubernetes client (the venv), unlike most of dev."""
from __future__ import annotations

from pathlib import Path

from kubernetes import client

from dev.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "baton.dev_toolruntimes.yaml"
CLAIM_CRD = ROOT / "crds" / "baton.dev_toolruntimeclaims.yaml"
CRD_NAMES = ("toolruntimes.baton.dev", "toolruntimeclaims.baton.dev")


def wait_established(api: client.ApiClient, names: tuple[str, ...] = CRD_NAMES, timeout: float = 60) -> None:
    """Until each CRD reports Established=True. (`kubectl wait --for=condition=established` fails
    at once, "accessor error: <nil>", when it looks before the CRD has any status condition.)"""
    ext = client.ApiextensionsV1Api(api)

    def established(name: str) -> bool:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)
    for name in names:
        wait_for(lambda n=name: established(n), timeout=timeout, what=f"CRD {name} Established")  # type: ignore[misc]
