#!/usr/bin/env bash
# `make test`: every test, with the kind route built meanwhile. The kind route's builds (kind
# tools, node image, operator and tool-server images; ~25 min cold on 2 cores, nothing once
# cached) run at the lowest CPU priority while the tests on the local plane run (those mostly
# wait on the plane: the build takes the cores they leave idle); tests/e2e runs once both ended.
# Exit status: non-zero if either pytest run or the build failed. Arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
mkdir -p .baton
log=.baton/kind-build.log
nice -n 19 "$PY" hack/kind.py prebuild >"$log" 2>&1 &
build=$!
trap 'kill "$build" 2>/dev/null; wait "$build" 2>/dev/null' INT TERM
t0=$SECONDS
# The stdio bridge's Go unit tests (seconds; tests/unit/bridge builds and drives the binary).
(cd bridge && go test ./...)
grc=$?
# The slowest tests named in the log: where CI's time goes (its budget is 50 min warm).
"$PY" -m pytest tests --ignore=tests/e2e --durations=40 "$@"
rc=$?
if [[ $grc -ne 0 ]]; then
  echo "test.sh: go test in bridge/ failed" >&2
  rc=1
fi
echo "test.sh: tests on the local plane ended after $((SECONDS - t0)) s (rc=$rc); waiting for the kind build" >&2
wait "$build"
brc=$?
echo "test.sh: kind build ended after $((SECONDS - t0)) s (rc=$brc); its log ($log):" >&2
tail -n 15 "$log" >&2
if [[ $brc -ne 0 ]]; then
  echo "test.sh: the kind build failed: tests/e2e not run" >&2
  exit 1
fi
"$PY" -m pytest tests/e2e --durations=15 "$@"
erc=$?
# pytest's 5 (nothing collected) would only mean tests/e2e is empty: a failure too.
if [[ $rc -ne 0 || $erc -ne 0 ]]; then
  exit 1
fi
