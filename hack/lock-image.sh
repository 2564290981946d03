#!/bin/sh
# Regenerates requirements/image.lock: every Python distribution the image installs, pinned,
# with the sha256 of every file PyPI has for that version (any platform: amd64 and arm64 images
# verify against the same lock). Inputs: pyproject.toml's [project] dependencies and
# requirements/build.in (what building the baton wheel needs).
#   hack/lock-image.sh            rewrite the lock (pip-tools in a throw-away venv)
#   hack/lock-image.sh --upgrade  also move every pin to the newest allowed version
# Run it with the image's Python minor version (3.13; e.g. PATH with a python3 -> python3.13 first):
# environment markers resolve for it.
# tests/integration/test_image_lock.py checks the lock against pyproject.toml.
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"
want="$(sed -n 's/^ARG PYTHON_IMAGE=python:\([0-9]*\.[0-9]*\)\..*/\1/p' "$root/Dockerfile")"
have="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ "$want" != "$have" ]; then
  echo "lock-image: the image runs Python $want, this python3 is $have" >&2
  exit 2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet "pip-tools==7.6.2"
cd "$root"
# PIP_FIND_LINKS: a machine-local wheel directory must not leak into the lock.
PIP_FIND_LINKS= "$tmp/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
  --no-emit-index-url --no-emit-find-links "$@" \
  --output-file requirements/image.lock pyproject.toml requirements/build.in
