#!/bin/sh
# The install steps of the Dockerfile's build stage, kept in one script that the Dockerfile
# runs and that tests/integration/test_dockerfile.py runs too (in a fresh venv, on a copy of
# exactly the files the Dockerfile copies): a broken install line fails CI without Docker.
#   hack/image-install.sh VENV SRC
#     VENV  where to create the virtualenv the final image copies (/opt/baton in the image)
#     SRC   the copied source tree (pyproject.toml, README.md, operator/, requirements/image.lock)
# The venv ends without an installer: pip, setuptools and wheel are needed only to install (the
# venv's pip, and setuptools/wheel as the locked build backend) and are uninstalled at the end, so
# the image the final stage copies has no pip, setuptools or wheel (nothing in it can install).
set -eu
venv="$1"
src="$2"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
python3 -m venv "$venv"
# Every dependency (and the build backend) exactly as locked: pinned versions, each file checked
# against its sha256 (--require-hashes), wheels only (a dependency that would need a compiler
# fails here instead of silently building), nothing resolved at build time (--no-deps).
"$venv/bin/pip" install --require-hashes --only-binary=:all: --no-deps -r "$src/requirements/image.lock"
# Baton itself from the copied source, built with the locked setuptools: no index, no isolated
# build environment, so nothing unlocked is fetched.
"$venv/bin/pip" install --no-deps --no-build-isolation --no-index "$src"
# The lock is complete: every requirement of every installed distribution is satisfied.
"$venv/bin/pip" check
# The installers go: the build backend first, then pip uninstalls itself.
"$venv/bin/pip" uninstall --yes --quiet setuptools wheel
"$venv/bin/python" -m pip uninstall --yes --quiet pip
cd /
if ls "$venv"/bin/pip* >/dev/null 2>&1 || ! "$venv/bin/python" -c \
    "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('pip', 'setuptools', 'wheel')))"; then
  echo "image-install: pip, setuptools or wheel is left in $venv" >&2
  exit 1
fi
# The package must import from the venv alone (no installer needed at run time), and the
# entrypoint must answer.
"$venv/bin/python" -c "import baton, baton.activities, kopf, kubernetes, prometheus_client"
"$venv/bin/python" -m baton --help >/dev/null
