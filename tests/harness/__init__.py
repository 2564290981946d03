"""Test harness: the cluster backends (cluster), kwok pod helpers (kwok), bounded waits (wait).

The fixtures built on it are in tests/conftest.py; tests/README.md documents both.
"""
