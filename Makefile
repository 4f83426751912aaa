# Two commands set up a fresh machine: `make demo` and `make test`.
# Every install comes from uv.lock (the whole dependency set, every extra, pinned);
# `make lock` refreshes it after a change to pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
EXAMPLE_PLUGIN := examples/ctxpolicy-plugin-example
# uv installs itself from PyPI into its own small virtualenv (only python3 is needed)
UV_VERSION := 0.13.8
UV_DIR := .uv
UV     := $(UV_DIR)/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# --locked: a pyproject.toml changed without `make lock` is an error, never a silent resolve
SYNC   := $(UV) sync --locked --inexact --python $(PYTHON)

# Python may write its bytecode caches (inside .venv and the __pycache__ folders git
# ignores), whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every process the
# suite starts compiled every module it imports again (collecting the tests alone took
# 48 s instead of 26 s), and pytest rewrote every test module's asserts again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test lint lint-quick fuzz bench schema docs clean postgres chromium lock

$(UV):
	$(PYTHON) -m venv $(UV_DIR)
	$(UV_DIR)/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV)/.base: pyproject.toml uv.lock | $(UV)
	$(SYNC)
	touch $@

$(VENV)/.dev: $(VENV)/.base pyproject.toml uv.lock $(wildcard $(EXAMPLE_PLUGIN)/pyproject.toml)
	$(SYNC) --extra dev --extra all
	@if [ -f $(EXAMPLE_PLUGIN)/pyproject.toml ]; then $(UV) pip install --quiet --python $(PY) --no-deps -e $(EXAMPLE_PLUGIN); fi
	touch $@

# matplotlib for the demo's PNG, installed once (a stamp like .base and .dev)
$(VENV)/.plot: $(VENV)/.base pyproject.toml uv.lock
	$(SYNC) --extra plot
	touch $@

# Re-resolve the whole dependency set (dev, every extra) into uv.lock.
lock: | $(UV)
	$(UV) lock --python $(PYTHON)

demo: $(VENV)/.plot
	$(BIN)/ctxpolicy validate policies/
	$(BIN)/ctxpolicy explain policies/agents.yaml --agent coding_agent
	@if [ -f scripts/demo.sh ]; then bash scripts/demo.sh; fi

# The full suite, after the lint gate (CI runs exactly this target). The type check
# (a minute of one core on a fresh clone) runs beside the suite: the target fails when
# either fails, and prints mypy's report after the suite's.
# pytest-xdist spreads the test files over the cores (one file stays on one worker, so
# a file's fixtures run once); TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= auto
test: lint-quick postgres chromium
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile; rc=$$?; \
	if wait $$mypy; then echo "mypy: $$(tail -n 1 $(VENV)/mypy.log)"; \
	else echo "mypy failed:"; cat $(VENV)/mypy.log; rc=1; fi; \
	exit $$rc

# The state tests start a real PostgreSQL server (tests/conftest.py): install the
# server on a clean Debian machine when it is missing (CI runs as root).
postgres:
	@if ! command -v pg_config >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing PostgreSQL (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

# The dashboard test loads /dashboard in a real headless Chromium (tests/gateway/
# test_dashboard.py): install the Debian package when it is missing.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
		echo "installing Chromium (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi

# The lint gate: style, the import contracts, the hook and event tables, and types
# (`lint-quick` is all but the type check).
lint: lint-quick
	$(BIN)/mypy

lint-quick: $(VENV)/.dev
	$(BIN)/ruff check ctxpolicy tests benchmarks examples
	$(BIN)/ruff format --check ctxpolicy tests benchmarks examples
	$(BIN)/lint-imports
	$(PY) -m ctxpolicy.testing.hookdocs --check
	$(PY) -m ctxpolicy.testing.eventdocs --check

fuzz: $(VENV)/.dev
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q tests -k fuzz

# Every registered benchmark suite (`python -m benchmarks list`; long: an hour or more on
# 2 cores), then the page. One suite: `$(PY) -m benchmarks run SUITE [--quick]`.
bench: $(VENV)/.dev
	$(PY) -m benchmarks run all
	$(MAKE) docs

# Every generated doc: the policy schema and reference, the event and hook tables, and
# docs/benchmarks.md from benchmarks/results (nothing is measured).
docs: schema $(VENV)/.dev
	$(PY) -m ctxpolicy.testing.eventdocs --write
	$(PY) -m ctxpolicy.testing.hookdocs --write
	$(PY) -m benchmarks render

schema: $(VENV)/.base
	$(BIN)/ctxpolicy schema > schemas/ctxpolicy.schema.json
	$(PY) -m ctxpolicy.resolve.docs > docs/policy-reference.md

clean:
	rm -rf $(VENV) $(UV_DIR) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
