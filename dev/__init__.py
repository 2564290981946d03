"""The developer library: what tests (tests/harness), benchmarks (bench/) and the developer
scripts (hack/) share, so that they depend one way: product (operator/baton) <- dev <- {tests,
bench, hack}. Not shipped: setuptools packages operator/ only. Importable from the repository
root (`python -m bench.scale`; pytest's `pythonpath`). Standard library only, except where a
module says otherwise.

- ``dev.ports``: ``free_port()``, a loopback port no live test process was handed before.
- ``dev.wait``: ``wait_for``, ``stays``: bounded waits.
- ``dev.process``: stopping a child process (terminate, wait, kill) and the local plane.
"""
