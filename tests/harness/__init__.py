"""Test harness: the cluster backends (cluster), kwok pod helpers (kwok), operator processes
(operator), watch logs (watchlog), ToolRuntimes and their CRDs (runtimes), the operator fixtures
(fixtures), faults (apiproxy, badprobe), seeded orderings (chaos). Ports and bounded waits are
the dev library's (dev.ports, dev.wait).

The fixtures built on it are in tests/conftest.py and harness/fixtures.py; tests/README.md
documents both.
"""
