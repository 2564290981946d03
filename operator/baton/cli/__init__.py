"""kubectl-baton, the `kubectl baton` plugin: a separate program from the operator.

- ``main``: the command line (argparse, the verbs' table, exit codes).
- ``verbs``: the verb runners.
- ``requests``: the rules of reset, force-recover, force-retire, suspend and resume, the confirmation,
  kubectl's durations (pure).
- ``render``: tables, text, json and yaml output (pure).
- ``completion``: the bash and zsh completion scripts, made from the parser (pure).
- ``kubeconfig``: the kubeconfig loader, as kubectl reads it (files, and an exec plugin run).
- ``cluster``: the adapter on the API server over http.client (the only module here doing API I/O;
  the plugin never imports the official client: its import alone was most of a call's time).

It imports nothing of the operator but ``baton.model`` and ``baton.version`` (an import-linter
contract in pyproject.toml).
"""

from __future__ import annotations

from baton.cli.main import main

# The console script `kubectl-baton = "baton.cli:main"` (pyproject.toml) calls this.
__all__ = ["main"]
