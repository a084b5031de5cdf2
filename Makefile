# Toolgate: the two commands are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export RUST_LIB_BACKTRACE := 0

.PHONY: run test test-fast fuzz lint format check policy-test bench bench-peers clean system-deps mcp-inspector

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

## Install what the tests need from Debian when it is missing and we are root: chromium (browser
## tests), wrk (the benchmark harness's smoke test), nginx (the compose proxy's deploy/nginx.conf
## in front of two replicas, tests/integration/test_proxy.py).
CHROMIUM ?= /usr/bin/chromium
NGINX ?= /usr/sbin/nginx
system-deps:
	@missing=""; \
	[ -x "$(CHROMIUM)" ] || missing="$$missing chromium"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	[ -x "$(NGINX)" ] || command -v nginx >/dev/null || missing="$$missing nginx"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "system-deps: missing$$missing; running: apt-get update && apt-get install -y$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
	  echo "system-deps: missing$$missing; install them as root:"; \
	  echo "  apt-get update && apt-get install -y$$missing"; \
	  echo "  (without them those tests skip, or fail when CI=true)"; \
	fi

## The MCP Inspector CLI that tests/mcp/test_inspector.py drives: npm installs it into
## .cache/npm when Node is present. Without Node those tests skip, or fail when CI=true.
INSPECTOR := .cache/npm/node_modules/.bin/mcp-inspector
mcp-inspector:
	@if [ -x "$(INSPECTOR)" ]; then :; \
	elif command -v npm >/dev/null; then \
	  echo "mcp-inspector: npm install --prefix .cache/npm @modelcontextprotocol/inspector@2.12.x"; \
	  npm install --prefix .cache/npm --no-audit --no-fund --loglevel=error \
	    '@modelcontextprotocol/inspector@2.12.x'; \
	elif [ "$$CI" = true ]; then \
	  echo "mcp-inspector: Node and npm are missing (CI=true): install Node 20 or newer"; exit 1; \
	else \
	  echo "mcp-inspector: Node and npm are missing; the MCP Inspector tests will skip"; \
	fi

## Set up and run the whole test suite, on four pytest-xdist workers, each taking whole files
## (--dist loadfile): a module's gateway is started once, by the one worker that runs the
## module's tests in their order (6 min here against about 20 in one process).
test: $(VENV)/.dev system-deps mcp-inspector
	$(BIN)/python -m pytest -W error -n 4 --dist loadfile

## The fast tier: the tests that start no process (no gateway, browser, CLI, nginx, OPA...).
## tests/conftest.py marks `slow` every test using a fixture tagged @starts_processes and fails
## any other test that starts a process, so this tier stays fast. `make test` runs both tiers.
## Four pytest-xdist workers (-n 4), each a session of its own: the tests mostly wait, and
## four overlap their waits on two cores (faster here than -n auto, one worker a core).
test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -W error -m "not slow" -n 4 --dist loadfile

## The fuzzers and security corpora alone (docs/security.md, "Tested, not promised"); in
## `make test` they run bounded. FUZZ_SCALE=20 draws twenty times the examples.
FUZZ_SCALE ?= 1
fuzz: $(VENV)/.dev
	TOOLGATE_FUZZ_SCALE=$(FUZZ_SCALE) $(BIN)/python -m pytest -W error -s tests/fuzz tests/security

## Benchmarks (not part of `make test`): the gateway against a bare Starlette app in one run;
## prints the table and writes bench/results/<date>.json, docs/performance.md and .png.
## Installs Debian's wrk when missing (as root) and py-spy into the venv for the profile
## (without it the profile falls back to cProfile). Pass options with BENCH_ARGS=--quick etc.
bench: $(VENV)/.dev
	$(BIN)/python -m pip install --quiet py-spy || echo "bench: py-spy not installed; profiling with cProfile"
	$(BIN)/python bench/run.py $(BENCH_ARGS)

## Toolgate against peers (IBM ContextForge, openapi-mcp-gateway) in front of the same HTTP
## tool, alternated over rounds (bench/peers/run.py): prints the table and writes
## bench/results/peers-<date>.json. Installs each peer on first use into a venv of its own
## under .cache/peers/ (not project dependencies). Figures mean something only on a quiet machine. Options: PEERS_ARGS=--quick.
bench-peers: $(VENV)/.dev
	$(BIN)/python bench/peers/run.py $(PEERS_ARGS)

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
	rm -rf $(VENV) var .cache .pytest_cache .mypy_cache .ruff_cache
