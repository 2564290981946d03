"""The operator fixtures (crd, operators, rts, pod_watch) come from harness.fixtures, a plugin of
tests/conftest.py; here: release_ns, the chart install tests' restricted namespace."""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException


@pytest.fixture
def release_ns(cluster: Any) -> Iterator[str]:
    """A namespace for a Helm release that enforces Pod Security "restricted" (the chart's install
    tests), deleted afterwards."""
    core = client.CoreV1Api(cluster.api_client)
    name = f"baton-rel-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": {
        "baton.dev/test": "true",
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"}}})
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise
