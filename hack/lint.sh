#!/usr/bin/env bash
# Static checks of operator/baton: mypy (strict) and import-linter contracts, both configured in
# pyproject.toml. Runs both and fails if either fails.
#   hack/lint.sh                      with the repository's .venv
#   PY=/path/to/python hack/lint.sh   with another interpreter (needs the test extras)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$root/.venv/bin/python}"
# A relative PY is taken relative to the caller's directory, before the cd below.
if [[ "$PY" == */* && "$PY" != /* ]]; then
  PY="$(pwd)/$PY"
fi
cd "$root"

status=0
echo "[lint] mypy" >&2
"$PY" -m mypy || status=1
echo "[lint] import-linter" >&2
# import-linter has no `python -m` entry point; call its console script's function.
"$PY" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' || status=1
exit "$status"
