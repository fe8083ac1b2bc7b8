# Two commands on a fresh machine: `make run` and `make test`. Both set up what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
REGISTRY ?= $(CURDIR)/.modelctl/registry
PORT ?= 8080
PYTEST_ARGS ?=
# mypy --strict: the pure cores (batching, decide, state, plan, judge, durations) and
# every package's public surface.
STRICT_TYPED := common captures accuracy predictor/batching rollout/_decide.py rollout/_state.py rollout/_plan.py \
	rollout/analysis/_judge.py rollout/analysis/_sequential.py rollout/analysis/_traffic.py \
	registry/__init__.py predictor/__init__.py predictor/tap/__init__.py \
	rollout/__init__.py rollout/backends/__init__.py rollout/analysis/__init__.py shadow/__init__.py \
	devstack/__init__.py deploycheck/__init__.py rollout/backends/_kserve/_queue.py \
	capacity/_profile.py capacity/_planfile.py capacity/_sim.py capacity/_plan.py \
	capacity/_arrivals.py capacity/_units.py predictor/_requestlog.py

.PHONY: setup setup-python setup-checkov setup-system setup-node setup-cluster demo run test lint typecheck pytest bench clean

setup: setup-system setup-python setup-checkov setup-node setup-cluster

setup-python:
	@scripts/setup.sh python

setup-checkov:
	@scripts/setup.sh checkov

setup-system:
	@scripts/setup.sh system

# The tests' control plane, built from the Go modules devcluster/ pins (once per machine:
# cached outside the repository, keyed by devcluster/go.sum), and the upstream CRDs.
setup-cluster:
	@scripts/setup.sh cluster

# The npm packages that type-check the Grafana dashboards (tests/dashboards).
setup-node: setup-system
	@scripts/setup.sh node

# Demo models into the local registry (idempotent: an unchanged model is not pushed again).
demo: setup-python
	@$(PY) -m scripts.demo_models --registry "$(REGISTRY)"

# Anyone may call unless TENANTS names a tenants file (docs/TENANTS.md): then every
# predict request needs a tenant's API key, e.g.
#   .venv/bin/modelctl tenants key acme    # a key, and the file's entry for it
#   make run TENANTS=tenants.yaml
run: demo
	$(VENV)/bin/modelctl serve demo-embed@stable --registry "$(REGISTRY)" --port $(PORT) \
	  $(if $(TENANTS),-- --tenants_file "$(TENANTS)" --enable_grpc false)

lint: setup-python
	$(VENV)/bin/ruff check common captures accuracy registry predictor rollout shadow devstack deploycheck cli capacity tests bench scripts

typecheck: setup-python
	$(VENV)/bin/mypy common captures accuracy registry predictor rollout shadow devstack deploycheck cli capacity
	$(VENV)/bin/mypy --strict $(STRICT_TYPED)

pytest: setup
	@# exit code 5 is pytest's "no tests collected": never the reason for a red run.
	@$(VENV)/bin/python -m pytest --durations=30 $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test: setup lint typecheck pytest

# The project's own benchmarks (docs/BENCHMARKS.md); peers: make bench-peers.
bench: setup
	$(PY) -m bench.predictor_bench all
	$(PY) -m bench.registry_bench --runs 3
	$(PY) -m bench.shadow_bench
	$(PY) -m bench.queue_bench all
	$(PY) -m bench.multi_bench all
	$(PY) -m bench.capacity_bench all

# The screenshots in docs/images, taken by the tests that open the report pages in
# headless Chromium (docs/ROLLOUT.md).
.PHONY: screenshots
screenshots: setup
	MODELCTL_SCREENSHOT_DIR=$(CURDIR)/docs/images $(VENV)/bin/python -m pytest -q \
		"tests/system/devstack/test_rehearsals.py::test_a_slow_canary_is_rolled_back_within_two_intervals" \
		"tests/system/shadow/test_mirror_classify.py::test_the_relabelled_classifier_fails_with_its_confusion"

# The promise tests of docs/RELIABILITY.md at full length: 60 s of 5x overload, SIGTERM
# x20, `rollout run` killed x20, 5000 fuzz cases per body kind (make test runs them short).
.PHONY: soak
soak: setup
	MODELCTL_SOAK=1 $(VENV)/bin/python -m pytest tests/system/reliability -m soak --timeout 3600 $(PYTEST_ARGS)

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache

# Benchmarks against peers (issue 18): Ray Serve, BentoML and Mosec go into bench/.venv-peers,
# NVIDIA Triton (PyTriton) and Infinity into bench/.venv-peers-np1 (both need numpy < 2).
.PHONY: bench-peers
bench-peers: setup-python
	@bench/peers/setup.sh
	$(PY) -m bench.compare all
