# Baton developer entry points. `make test` is the one command CI runs (.ci/run).
SHELL := bash
.DEFAULT_GOAL := help
PY ?= .venv/bin/python
PYTEST_ARGS ?= -q
CLUSTER_DIR ?= .baton

.PHONY: help tools cluster-up cluster-down test test-unit test-integration lint demo bench bench-scale

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

tools: ## build the pinned etcd, kube-*, kwok, helm into ~/.cache/baton (once)
	@bin="$$(bash hack/build-tools.sh)" && echo "tools: $$bin" >&2

cluster-up: tools ## start the local control plane; prints $(CLUSTER_DIR)/kubeconfig
	@$(PY) hack/cluster.py up --dir $(CLUSTER_DIR)

cluster-down: ## stop the local control plane started by cluster-up
	@$(PY) hack/cluster.py down --dir $(CLUSTER_DIR)

test: tools lint ## lint, then all tests (unit, integration against a fresh local plane)
	$(PY) -m pytest tests $(PYTEST_ARGS)

lint: ## mypy (strict) and import-linter layering contracts
	PY=$(PY) bash hack/lint.sh

demo: tools ## Baton end to end on a throwaway local plane (handoff, stuck pod, force recovery)
	$(PY) hack/demo.py

bench: tools ## handoff latency beside a Recreate Deployment (prints p50/p95 and the ratio)
	$(PY) bench/handoff_latency.py

N ?= 1000
CHANGES ?= 100
REPLICAS ?= 1
WORKERS ?= 8
bench-scale: tools ## N runtimes and K changes beside N Recreate Deployments (make bench-scale N=1000 CHANGES=100)
	$(PY) bench/scale.py --n $(N) --changes $(CHANGES) --replicas $(REPLICAS) --workers $(WORKERS)

test-unit: ## unit tests only (no cluster)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: tools ## integration and e2e tests (marker `integration`)
	$(PY) -m pytest tests $(PYTEST_ARGS) -m integration
