# syntax=docker/dockerfile:1
# Baton operator image: `python -m baton` as a non-root numeric user, no compilers.
#   docker build -t baton:0.1.0 .
# The base is pinned by version (and Debian release); pin it by digest too where your
# registry policy asks for it (PYTHON_IMAGE=python:3.11.7-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# --- build: the package and its dependencies into a venv at /opt/baton ----------------------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY hack/image-install.sh /src/hack/image-install.sh
COPY pyproject.toml README.md /src/
COPY operator /src/operator
# Same steps as tests/integration/test_dockerfile.py runs without Docker.
RUN sh /src/hack/image-install.sh /opt/baton /src

# --- final: the venv on the same slim base; nothing built or installed here ----------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="baton" \
      org.opencontainers.image.description="Kubernetes operator: tool-runtime generations, one at a time"
COPY --from=build /opt/baton /opt/baton
ENV PATH=/opt/baton/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: non-root, numeric (Pod Security "restricted" checks runAsNonRoot against it).
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["/opt/baton/bin/python", "-m", "baton"]
