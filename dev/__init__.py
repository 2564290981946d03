"""The developer library: what tests (tests/harness), benchmarks (bench/) and the developer
scripts (hack/) share, so that they depend one way: product (operator/baton) <- dev <- {tests,
bench, hack}. Not shipped: setuptools packages operator/ only. Importable from the repository
root (`python -m bench.scale`; pytest's `pythonpath`). Standard library only, except where a
module says otherwise.

- ``dev.ports``: ``free_port()``, a loopback port no live test process was handed before.
- ``dev.wait``: ``wait_for``, ``stays``: bounded waits.
- ``dev.process``: ``stop`` child processes (terminate, wait, kill); ``plane``: hack/cluster.py.
- ``dev.crds``: the CRD files, ``wait_established`` (needs the kubernetes client).

hack/cluster.py (the local plane) and hack/kind.py stay in hack/: `make cluster-down` and
`make kind-down` run them by path with the system python3, and a script run by path cannot
import a sibling package. Tests import them as modules (``hack.cluster``, ``hack.kind``);
hack/cluster.py keeps its own ``free_ports`` (standard library only, several ports at once).
"""
