# better-compute: `make test` and `make demo` work on a fresh clone.
# Each creates .venv when it is missing: `make test` installs the project with its dev and all extras,
# `make demo` only what the demo needs (the demo extra: the providers' SDKs, no dev tools).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
DEMO_INSTALLED := $(VENV)/.demo-installed

.PHONY: setup test lint demo bench

# Python writes its bytecode caches even where the environment says not to (a container's
# PYTHONDONTWRITEBYTECODE=1): without them every test worker and every Python subprocess a test
# starts compiles its imports again, and pytest rewrites its plugins' asserts again (the
# collection of the suite: about 13.6 s of CPU without the caches, 7.2 s with them).
unexport PYTHONDONTWRITEBYTECODE

setup: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,all]"
	touch $@

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -n auto --timeout 900 --durations=30

$(DEMO_INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[demo]"
	touch $@

demo: $(DEMO_INSTALLED)
	$(BIN)/better-compute demo

bench: setup
	$(BIN)/python bench/engine.py --items 5000 --database sqlite
	$(BIN)/python bench/engine.py --items 5000 --database postgresql://postgres@127.0.0.1:5432/postgres
