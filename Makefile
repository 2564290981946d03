# Baton developer entry points. `make test` is the one command CI runs (.ci/run); `make test` and
# `make demo` set up everything they need themselves: the venv (from pyproject.toml, kubectl
# included) and the pinned Go builds (make tools). Needs Go 1.26, make, python3 (>= 3.11), openssl.
SHELL := bash
.DEFAULT_GOAL := help
VENV := .venv
PY ?= $(VENV)/bin/python
PYTEST_ARGS ?= -q
CLUSTER_DIR ?= .baton
# The venv is a real prerequisite: made, and re-installed whenever pyproject.toml changes, through
# this stamp. With PY pointing elsewhere, that interpreter is used as it is.
VENV_STAMP := $(VENV)/.installed
PY_DEPS := $(if $(filter $(VENV)/bin/python,$(PY)),$(VENV_STAMP))

.PHONY: help venv tools tools-control-plane cluster-up cluster-down kind-build kind-up kind-down test test-unit test-integration lint demo bench bench-scale bench-configmaps bench-gateway bench-gateway-flood bench-bridge bench-idle chaos chaos-summary model-check mutations

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Output goes to stderr: `$(make -s cluster-up)` must print the kubeconfig path only.
$(VENV_STAMP): pyproject.toml
	@echo "venv: installing $(VENV) from pyproject.toml (.[test])" >&2
	@[[ -x $(VENV)/bin/python ]] || python3 -m venv $(VENV) >&2
	@$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' >&2
	@touch $@

venv: $(VENV_STAMP) ## the Python venv in .venv (operator, test tools, kubectl), redone when pyproject.toml changes

tools: ## build the pinned etcd, kube-*, kwok, helm, promtool, prometheus into ~/.cache/baton (once)
	@bin="$$(bash hack/build-tools.sh)" && echo "tools: $$bin" >&2

# The control plane's set only (no Prometheus, no kind route): what cluster-up and demo run on.
tools-control-plane: ## only the control plane set of `make tools` (what cluster-up, demo and kind-up need; no Prometheus)
	@bash hack/build-tools.sh --only control-plane

cluster-up: $(PY_DEPS) tools-control-plane ## start the local control plane; prints $(CLUSTER_DIR)/kubeconfig
	@$(PY) hack/cluster.py up --dir $(CLUSTER_DIR)

cluster-down: ## stop the local control plane started by cluster-up
	@python3 hack/cluster.py down --dir $(CLUSTER_DIR)

kind-up: $(PY_DEPS) tools-control-plane ## a one-node kind cluster with podman (root; builds once into ~/.cache/baton); prints $(CLUSTER_DIR)/kind-kubeconfig
	@$(PY) hack/kind.py up --dir $(CLUSTER_DIR)

kind-down: ## delete the kind cluster and undo every host change kind-up made (network, iptables, ip_forward, /lib/modules)
	@python3 hack/kind.py down --dir $(CLUSTER_DIR)

test: $(PY_DEPS) tools lint ## lint, then all tests (unit, integration against a fresh local plane; tests/e2e on kind, built meanwhile)
	PY=$(PY) bash hack/test.sh $(PYTEST_ARGS)

kind-build: $(PY_DEPS) ## build the kind route's tools and images (cached) where it runs (root); else say why
	@$(PY) hack/kind.py prebuild

lint: $(PY_DEPS) ## mypy (strict) and import-linter layering contracts
	PY=$(PY) bash hack/lint.sh

demo: $(PY_DEPS) tools-control-plane ## Baton end to end on a throwaway local plane (handoff, stuck pod, force recovery)
	$(PY) -m hack.demo

bench: $(PY_DEPS) tools ## handoff latency beside a Recreate Deployment (prints p50/p95 and the ratio)
	$(PY) -m bench.handoff_latency

N ?= 1000
CHANGES ?= 100
REPLICAS ?= 1
WORKERS ?= 8
SHARDS ?= 0
bench-scale: $(PY_DEPS) tools ## N runtimes and K changes beside N Recreate Deployments, per-replica costs (make bench-scale N=1000 CHANGES=100 REPLICAS=2 SHARDS=16: with shards, the failover of a SIGKILLed replica; SINGLE=1: one unsharded replica beside them in the same run)
	$(PY) -m bench.scale --n $(N) --changes $(CHANGES) --replicas $(REPLICAS) --workers $(WORKERS) --shard-ranges $(SHARDS) $(if $(SINGLE),--beside-single)

COUNT ?= 2000
bench-configmaps: $(PY_DEPS) tools ## peak operator RSS, COUNT ConfigMaps of 100 KiB in the cluster (BASELINE=DIR: another operator tree beside it)
	$(PY) -m bench.configmap_rss --count $(COUNT) $(if $(BASELINE),--baton-path $(BASELINE))

HANDOFFS ?= 50
RATE ?= 20
LAT_RATE ?= 200
LAT_CALLS ?= 4000
TPUT_SECONDS ?= 15
CONCURRENCY ?= 16
RSS_RUNTIMES ?= 1000
SKIP ?=
PATHS ?=
BASELINE ?=
TPUT_ROUNDS ?= 2
bench-gateway: $(PY_DEPS) tools ## calls failed during handoffs (direct, gateway, Recreate, RollingUpdate, a handshake-era MCP session through the gateway with its re-bound calls' added latency), gateway latency, calls/s per core, RSS (quick: HANDOFFS=5 LAT_CALLS=1000 RSS_RUNTIMES=100; PATHS=gw: handoff paths; BASELINE=DIR: another checkout's gateway beside it, TPUT_ROUNDS each)
	$(PY) -m bench.gateway --handoffs $(HANDOFFS) --rate $(RATE) --lat-rate $(LAT_RATE) --lat-calls $(LAT_CALLS) \
		--tput-seconds $(TPUT_SECONDS) --concurrency $(CONCURRENCY) --rss-runtimes $(RSS_RUNTIMES) $(if $(SKIP),--skip $(SKIP)) \
		$(if $(PATHS),--paths $(PATHS)) $(if $(BASELINE),--baseline $(BASELINE) --tput-rounds $(TPUT_ROUNDS))

FLOOD_CONNECTIONS ?= 2000
FLOOD_HELD ?= 400
FLOOD_SLOW_BODIES ?= 250
FLOOD_SLOWLORIS ?= 250
FLOOD_LAT_CALLS ?= 2000
bench-gateway-flood: $(PY_DEPS) tools ## one gateway (the chart's bounds) under FLOOD_CONNECTIONS connections: held 1 MiB calls, slow bodies, slowloris, one address past its bound; peak RSS vs the chart's limit, refusals by reason, a victim runtime's p50/p99 unloaded and meanwhile (FLOOD_LAT_CALLS at LAT_RATE/s)
	$(PY) -m bench.gateway_flood --connections $(FLOOD_CONNECTIONS) --held $(FLOOD_HELD) --slow-bodies $(FLOOD_SLOW_BODIES) \
		--slowloris $(FLOOD_SLOWLORIS) --lat-rate $(LAT_RATE) --lat-calls $(FLOOD_LAT_CALLS)

BRIDGE_CALLS ?= 2000
BRIDGE_ROUNDS ?= 3
BRIDGE_ROUND_SECONDS ?= 5
BRIDGE_CONCURRENCY ?= 8
bench-bridge: $(PY_DEPS) ## baton-bridge beside mcp-server-time over stdio, the SDK client on both, in one run: added p50/p95 (interleaved), calls/s (rounds alternating), the bridge's RSS under load (quick: BRIDGE_CALLS=300 BRIDGE_ROUNDS=1)
	$(PY) -m bench.stdio_bridge --calls $(BRIDGE_CALLS) --rounds $(BRIDGE_ROUNDS) --round-seconds $(BRIDGE_ROUND_SECONDS) --concurrency $(BRIDGE_CONCURRENCY)

N_IDLE ?= 1000
IDLE_AWAKE ?= 10
IDLE_WAKES ?= 10
IDLE_STEADY ?= 60
bench-idle: $(PY_DEPS) tools ## N_IDLE idle runtimes (all but IDLE_AWAKE idle) beside N_IDLE always-on ones, one run: pods held, operator and gateway CPU and RSS; wake latency p50/p95 beside the plain start of the same pod (shared 2-core machine: N_IDLE=200)
	$(PY) -m bench.idle --n $(N_IDLE) --awake $(IDLE_AWAKE) --wakes $(IDLE_WAKES) --steady $(IDLE_STEADY)

test-unit: $(PY_DEPS) ## tests/unit only (pure, no cluster; not tests/model: make test and make model-check run that)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(PY_DEPS) tools ## integration and e2e tests (marker `integration`)
	$(PY) -m pytest tests $(PYTEST_ARGS) -m integration

ORDERINGS ?= 50
CHAOS_RESULTS ?= .chaos-results.jsonl
PARALLEL ?= 1
SHARDED ?= 0
chaos: $(PY_DEPS) tools ## seeded fault orderings SEED .. SEED+ORDERINGS-1 on one local plane, PARALLEL side by side, SHARDED=1 odd (sharded) seeds only (make chaos ORDERINGS=500 SEED=1 PARALLEL=3)
	BATON_CHAOS_ORDERINGS=$(ORDERINGS) BATON_CHAOS_SEED=$(if $(SEED),$(SEED),1) BATON_CHAOS_PARALLEL=$(PARALLEL) BATON_CHAOS_SHARDED=$(SHARDED) BATON_CHAOS_RESULTS=$(CHAOS_RESULTS) $(PY) -m pytest tests/chaos -m chaos $(PYTEST_ARGS)

chaos-summary: $(PY_DEPS) ## what the orderings in CHAOS_RESULTS did: violations, wall time, actions taken and skipped, held creates' answers
	$(PY) hack/chaos_summary.py $(CHAOS_RESULTS)

STEPS ?= 40
JOBS ?= 1
BATCH ?= 1000
MINUTES ?= 0
model-check: $(PY_DEPS) ## the long model check in batches, JOBS side by side (make model-check N=100000 JOBS=2 SEED=7 MINUTES=120); RESUME=1 continues the run in OUT; CI runs a short fixed one
	$(PY) hack/model_check.py --examples $(N) --jobs $(JOBS) --batch $(BATCH) --steps $(STEPS) \
	  --seed $(if $(SEED),$(SEED),$$RANDOM) --minutes $(MINUTES) $(if $(OUT),--out $(OUT)) $(if $(RESUME),--resume)

mutations: $(PY_DEPS) ## apply each deliberate bug to the real code, show which check catches it (make mutations ONLY="a b"; hack/mutations.py --list)
	$(PY) hack/mutations.py $(ONLY)
