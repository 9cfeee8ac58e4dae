# Toolgate: `make run` starts the gateway on the example config, `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml
# pytest-xdist processes for make test (the CI machine has 2 cores; 0: one process).
PYTEST_WORKERS ?= 2

.PHONY: run test test-fast lint typecheck check bench bench-full clean lock

# Everything installs from the lock files (requirements/*.txt: every distribution pinned
# with its hashes; `make lock` refreshes them), then the project itself with no
# dependencies of its own choosing. The venv's own pip does it: nothing unpinned is fetched.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

INSTALL := $(BIN)/python -m pip install --quiet --require-hashes --no-deps
PROJECT := $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .

# The stamps depend on the locks, so a refreshed lock reinstalls.
$(VENV)/.installed: $(BIN)/python requirements/build.txt requirements/runtime.txt
	$(INSTALL) -r requirements/build.txt -r requirements/runtime.txt
	$(PROJECT)
	touch $@

$(VENV)/.installed-dev: $(BIN)/python requirements/build.txt requirements/dev.txt
	$(INSTALL) -r requirements/build.txt -r requirements/dev.txt
	$(PROJECT)
	touch $@ $(VENV)/.installed

# Resolve pyproject.toml's ranges anew into requirements/*.txt and say what moved
# (ARGS=--keep keeps every pin the ranges still allow).
lock: $(VENV)/.installed-dev
	$(BIN)/python scripts/lock.py $(ARGS)

# The gateway and the example tools it calls; see scripts/run.sh for the model server.
run: $(VENV)/.installed
	@BIN=$(BIN) CONFIG=$(CONFIG) scripts/run.sh

check: $(VENV)/.installed
	$(BIN)/toolgate check --config $(CONFIG)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The openai Node SDK for the end-to-end tier, pinned by its lock file.
tests/node/node_modules/.installed: tests/node/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix tests/node --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: the Node SDK test will say what to install"; fi

test: lint typecheck tests/node/node_modules/.installed
	@scripts/ensure-redis.sh
	@command -v $${TOOLGATE_CHROMIUM:-chromium} >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
		|| echo "make test: no Chromium here, so the browser tests (tests/browser) are skipped: apt-get install chromium runs them"
	$(BIN)/pytest -n $(PYTEST_WORKERS)

# The in-process tier alone: under a minute.
test-fast: $(VENV)/.installed-dev
	@scripts/ensure-redis.sh
	$(BIN)/pytest -m fast

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache tests/node/node_modules

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench.run

bench-full: $(VENV)/.installed-dev
	$(BIN)/python -m bench.run --full
