# The one source of commands: README, CI and people all call these targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
KAFKA_VERSION ?= 4.1.1
# Kafka jars live outside the repository so clones share them; override to relocate.
REWARDBUS_CACHE ?= $(HOME)/.cache/rewardbus
KAFKA_LIB := $(REWARDBUS_CACHE)/kafka-$(KAFKA_VERSION)/lib
export REWARDBUS_KAFKA_LIB := $(KAFKA_LIB)
export REWARDBUS_CACHE

.PHONY: setup setup-verl train-demo demo test test-fast test-unit test-integration test-sandbox lint typecheck bench cpu-guard cpu-guard-baseline doctor clean kafka-jars toolchains observability-tools k8s-tools docker-engine images test-images compose-up compose-demo compose-down

setup: $(VENV)/.installed kafka-jars

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11+"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m sandbox_workers.jail build
	touch $@

# verl 0.9.1 (with torch, ray, tensordict; ~6 GB) is an extra outside the core install:
# the demo does not need it; the tests (verl's loader and reward loop drive rewardbus)
# and the train demo do. pip's download cache (~/.cache/pip) makes a reinstall quick.
setup-verl: $(VENV)/.installed-verl

$(VENV)/.installed-verl: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,verl]'
	touch $@

kafka-jars: $(KAFKA_LIB)/.complete

$(KAFKA_LIB)/.complete: infra/kafka/pom.xml
	@command -v java >/dev/null || { echo "error: java not found: install a Java 17+ runtime (apt-get install openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn not found: install Maven (apt-get install maven)"; exit 1; }
	rm -rf $(KAFKA_LIB)
	mkdir -p $(KAFKA_LIB)
	mvn -q -B -f infra/kafka/pom.xml -Dkafka.version=$(KAFKA_VERSION) \
	    dependency:copy-dependencies -DoutputDirectory=$(KAFKA_LIB) -DincludeScope=runtime
	touch $@

# Every sandbox language's toolchain: the Debian packages missing on this host (apt, as
# root: infra/toolchains/host-languages.sh), then those no Debian package provides, fetched
# once into $(REWARDBUS_CACHE)/toolchains: TypeScript (npm), the Kotlin and Scala compilers
# (Maven Central). docs/languages.md.
toolchains:
	infra/toolchains/host-languages.sh
	infra/toolchains/fetch.sh

# Jaeger, Prometheus and promtool, built once from the Go module proxy into
# $(REWARDBUS_CACHE)/bin (needs Go on PATH; minutes the first time, nothing after).
observability-tools: $(VENV)/.installed
	$(BIN)/python -m rewardbus.observability.gotools jaeger prometheus promtool

# kubeconform and kustomize, built the same way, and the schemas infra/k8s/validate.py
# checks the manifests against (Strimzi's CRDs come from Strimzi's generator on Maven
# Central, which needs Java 21+: the machines' Temurin 25 beside the default 17).
# Validating the base once lays them out in $(REWARDBUS_CACHE)/k8s.
k8s-tools: $(VENV)/.installed
	$(BIN)/python -m rewardbus.observability.gotools kubeconform kustomize
	$(BIN)/python infra/k8s/validate.py

# A Docker engine for the images and tests/containers/: started here (dockerd, vfs
# storage) when none answers; needs docker.io installed and root to start one.
docker-engine:
	infra/docker/dockerd.sh

# rewardbus-kafka, -worker and -aggregator on a debootstrap base, built locally (no
# registry needed); an image whose content-hash tag exists is not rebuilt.
# The worker carries all twenty-two languages' toolchains; WORKER_LANGUAGES="python c cpp"
# narrows them (docs/containers.md).
WORKER_LANGUAGES ?=
images: $(VENV)/.installed kafka-jars docker-engine
	PYTHON=$(BIN)/python WORKER_LANGUAGES="$(WORKER_LANGUAGES)" infra/docker/images.sh

# The images tests/containers/ run: those of `make images` (one test judges every
# language in the full worker) and the worker with the four cheap toolchains, which the
# others start (the 3.9 GB full one takes minutes per container start on a vfs engine).
# After `images`, never beside it: both write images.sh's build contexts.
TEST_WORKER_LANGUAGES := python bash perl sql
test-images: images
	PYTHON=$(BIN)/python WORKER_LANGUAGES="$(TEST_WORKER_LANGUAGES)" infra/docker/images.sh

# Three KRaft brokers, Jaeger, Prometheus, WORKERS sandbox workers and the aggregator.
WORKERS ?= 2
COMPOSE ?= docker-compose
COMPOSE_FILE := infra/compose/docker-compose.yml
export REWARDBUS_SECCOMP_PROFILE ?= $(REWARDBUS_CACHE)/images/seccomp-worker.json
compose-up: images observability-tools
	PYTHON=$(BIN)/python infra/compose/observability-images.sh
	$(COMPOSE) -f $(COMPOSE_FILE) up -d --scale worker=$(WORKERS)

# The demo on the compose deployment: its worker replicas and aggregator do the work.
DEMO_LIMIT ?= 40
compose-demo:
	DEMO_LIMIT=$(DEMO_LIMIT) $(COMPOSE) -f $(COMPOSE_FILE) --profile demo run --rm demo

compose-down:
	$(COMPOSE) -f $(COMPOSE_FILE) down -v

demo: setup
	$(BIN)/rewardbus demo

doctor: setup
	$(BIN)/rewardbus doctor

test: setup setup-verl toolchains observability-tools k8s-tools test-images
	$(BIN)/python -m pytest -p no:cacheprovider --durations=25 tests

# The fast local loop: all but the tests marked slow (containers, the three-broker cluster,
# fault injection, benchmark smoke runs, the Kubernetes manifests); no Docker needed. CI
# runs `make test`.
test-fast: setup setup-verl toolchains observability-tools
	$(BIN)/python -m pytest -p no:cacheprovider --durations=25 -m "not slow" tests

train-demo: setup setup-verl
	$(BIN)/rewardbus train-demo

test-unit: setup
	$(BIN)/python -m pytest tests/unit

test-integration: setup
	$(BIN)/python -m pytest tests/integration

test-sandbox: setup
	$(BIN)/python -m pytest tests/sandbox

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy --strict reads the verl-facing modules against verl, torch and transformers.
typecheck: setup setup-verl
	$(BIN)/mypy

bench: setup
	$(BIN)/python benchmarks/bench_isolation.py
	$(BIN)/python benchmarks/bench_sandbox.py
	$(BIN)/python benchmarks/bench_pipeline.py
	$(BIN)/python benchmarks/bench_layers.py
	$(BIN)/python benchmarks/bench_io.py
	$(BIN)/python benchmarks/bench_suites.py
	$(BIN)/python benchmarks/bench_languages.py
	$(BIN)/python benchmarks/bench_tools.py

# CPU per completion, by layer, against benchmarks/cpu_baseline.json: a row more than 25 %
# over fails (docs/performance.md). CI runs it. A new baseline is a deliberate commit:
#   make cpu-guard-baseline REASON="what changed, and why the CPU is worth it"
cpu-guard: setup
	$(BIN)/python benchmarks/cpu_guard.py

cpu-guard-baseline: setup
	@test -n "$(REASON)" || { echo 'error: say why: make cpu-guard-baseline REASON="..."'; exit 1; }
	$(BIN)/python benchmarks/cpu_guard.py --write-baseline --reason "$(REASON)"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
