"""Fixtures for running Baton operator processes (defined in harness.fixtures)."""
from harness.fixtures import crd, operators, pod_watch, pytest_runtest_makereport, rts

__all__ = ["crd", "operators", "pod_watch", "pytest_runtest_makereport", "rts"]
