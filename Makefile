# Toolgate: the two commands are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export RUST_LIB_BACKTRACE := 0

.PHONY: run test lint format check policy-test bench clean

$(VENV)/.base: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.base
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

## Set up and start the gateway on the embedded defaults (SQLite, in-process Rego, tools.d).
run: $(VENV)/.base
	$(BIN)/toolgate serve

## Set up and run the whole test suite.
test: $(VENV)/.dev
	$(BIN)/python -m pytest -W error

lint: $(VENV)/.dev
	$(BIN)/ruff check gateway tests bench
	$(BIN)/ruff format --check gateway tests bench
	$(BIN)/mypy gateway

format: $(VENV)/.dev
	$(BIN)/ruff format gateway tests bench
	$(BIN)/ruff check --fix gateway tests bench

check: $(VENV)/.base
	$(BIN)/toolgate check

policy-test: $(VENV)/.base
	$(BIN)/toolgate policy test

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
