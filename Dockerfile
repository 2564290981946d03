# syntax=docker/dockerfile:1
# Baton operator image: `python -m baton` as a non-root numeric user, no compilers.
#   docker build -t baton:0.1.0 \
#     --build-arg REVISION="$(git rev-parse HEAD)" --build-arg SOURCE=<URL of this repository> .
# Reproducible inputs: the base image by digest (PYTHON_IMAGE) and every Python distribution by
# version and sha256 (requirements/image.lock, installed with --require-hashes; regenerate it
# with hack/lock-image.sh, with the same Python minor version). Only the digest decides what is
# pulled; the tag before it says which image it is: CPython 3.13 on Debian 13 (trixie).
# The digest is the index digest of python:3.13.14-slim-trixie as docker-library/repo-info
# recorded it from Docker Hub (repos/python/remote/3.13.14-slim-trixie.md, image built
# 2026-08-05). No registry is reachable from the machines this was written on, so it was not
# pulled here: check it, and move it to the newest 3.13 patch, where a registry is reachable:
#   docker buildx imagetools inspect python:3.13-slim-trixie
ARG PYTHON_IMAGE=python:3.13.14-slim-trixie@sha256:9662417aace5ae7b8e2609cce472b72a8958e134ba372808abe9cc1a0c0125e6
# The Go toolchain for baton-bridge (bridge/, standard library only): the index digest of
# golang:1.26.8-trixie as docker-library/repo-info recorded it (repos/golang/remote/
# 1.26.8-trixie.md, built 2026-09-01). Not pulled here either (no registry reachable): check it
# where one is: docker buildx imagetools inspect golang:1.26.8-trixie
ARG GO_IMAGE=golang:1.26.8-trixie@sha256:771f3162219f7a66bb6be3fea1ba31f418932946a99ad9eac26ffd555dfcf393

# --- build: the package and its dependencies into a venv at /opt/baton ----------------------
FROM ${PYTHON_IMAGE} AS build
# Unset by default: pip uses PyPI. Where a build cannot reach PyPI (hack/kind.py builds offline
# with buildah), PIP_NO_INDEX=1 and PIP_FIND_LINKS=<a wheelhouse mounted into the build> install
# the same hash-checked files (pip reads both from the environment; ARGs are in it for RUN).
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
WORKDIR /src
COPY hack/image-install.sh /src/hack/image-install.sh
COPY requirements/image.lock /src/requirements/image.lock
COPY pyproject.toml README.md LICENSE /src/
COPY operator /src/operator
# Same steps as tests/integration/test_dockerfile.py runs without Docker.
RUN sh /src/hack/image-install.sh /opt/baton /src

# --- bridge: baton-bridge, static (CGO_ENABLED=0), so it runs in any Linux image -----------
# The operator's pod builder copies it from this image into a stdio runtime's pod (an init
# container); nothing in the operator runs it. No modules to download: the standard library only.
FROM ${GO_IMAGE} AS bridge
WORKDIR /src/bridge
COPY bridge/ /src/bridge/
RUN CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local \
    go build -trimpath -ldflags='-s -w' -o /out/baton-bridge .

# --- final: the venv on the same slim base; nothing built or installed here ----------------
FROM ${PYTHON_IMAGE}
# The operator's version (pyproject.toml; a test checks they agree), the commit it was built
# from, where that commit lives, and the licence (LICENSE: Apache-2.0).
ARG VERSION=0.1.0
ARG REVISION=""
ARG SOURCE=""
ARG LICENSES=Apache-2.0
LABEL org.opencontainers.image.title="baton" \
      org.opencontainers.image.description="Kubernetes operator: tool-runtime generations, one at a time" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}"
COPY --from=build /opt/baton /opt/baton
COPY --from=bridge /out/baton-bridge /opt/baton/bin/baton-bridge
# No installer in the image: the venv has none (hack/image-install.sh uninstalls pip, setuptools
# and wheel), and the base's own goes here (the official image's pip and its scripts, the wheels
# ensurepip and Debian's python3-venv keep). Only removals: nothing is installed in this stage.
RUN rm -rf /usr/local/bin/pip /usr/local/bin/pip3* /usr/local/lib/python3*/site-packages/pip \
      /usr/local/lib/python3*/site-packages/pip-*.dist-info /usr/local/lib/python3*/ensurepip/_bundled \
      /usr/share/python-wheels \
 && for py in python3 /opt/baton/bin/python; do \
      PYTHONDONTWRITEBYTECODE=1 "$py" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('pip', 'setuptools', 'wheel')))"; \
    done
ENV PATH=/opt/baton/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: non-root, numeric (Pod Security "restricted" checks runAsNonRoot against it).
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["/opt/baton/bin/python", "-m", "baton"]
