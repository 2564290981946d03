"""The operator fixtures (crd, operators, rts, pod_watch) come from harness.fixtures, a plugin of
tests/conftest.py."""
