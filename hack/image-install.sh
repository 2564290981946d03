#!/bin/sh
# The install steps of the Dockerfile's build stage, kept in one script that the Dockerfile
# runs and that tests/integration/test_dockerfile.py runs too (in a fresh venv, on a copy of
# exactly the files the Dockerfile copies): a broken install line fails CI without Docker.
#   hack/image-install.sh VENV SRC
#     VENV  where to create the virtualenv the final image copies (/opt/baton in the image)
#     SRC   the copied source tree (pyproject.toml, README.md, operator/)
set -eu
venv="$1"
src="$2"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
python3 -m venv "$venv"
# Wheels only for the dependencies: a dependency that would need a compiler fails here instead
# of silently building (the build stage has no compiler either, by design).
"$venv/bin/pip" install --only-binary=:all: --no-binary=baton "$src"
# The package must import from the venv alone, and the entrypoint must answer.
cd /
"$venv/bin/python" -c "import baton, baton.handlers, kopf, kubernetes, prometheus_client"
"$venv/bin/python" -m baton --help >/dev/null
