# Two commands on a fresh machine: `make run` and `make test`. Both set up what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
REGISTRY ?= $(CURDIR)/.modelctl/registry
PORT ?= 8080
PYTEST_ARGS ?=

.PHONY: setup setup-python setup-system demo run test lint typecheck pytest bench clean

setup: setup-system setup-python

setup-python:
	@scripts/setup.sh python

setup-system:
	@scripts/setup.sh system

# Demo models into the local registry (idempotent: an unchanged model is not pushed again).
demo: setup-python
	@$(PY) -m scripts.demo_models --registry "$(REGISTRY)"

run: demo
	$(VENV)/bin/modelctl serve demo-embed@stable --registry "$(REGISTRY)" --port $(PORT)

lint: setup-python
	$(VENV)/bin/ruff check registry predictor rollout cli tests bench scripts

typecheck: setup-python
	$(VENV)/bin/mypy registry predictor rollout cli

pytest: setup
	@# exit code 5 is pytest's "no tests collected": never the reason for a red run.
	@$(VENV)/bin/python -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test: setup lint typecheck pytest

bench: setup
	$(PY) -m bench.run_all

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache
