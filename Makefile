# Two commands set up a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
BIN    := $(VENV)/bin
EXAMPLE_PLUGIN := examples/ctxpolicy-plugin-example

.PHONY: demo test lint fuzz bench schema docs clean postgres

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.dev: $(VENV)/.base pyproject.toml $(wildcard $(EXAMPLE_PLUGIN)/pyproject.toml)
	$(PIP) install --quiet -e '.[dev,all]'
	@if [ -f $(EXAMPLE_PLUGIN)/pyproject.toml ]; then $(PIP) install --quiet -e $(EXAMPLE_PLUGIN); fi
	touch $@

# matplotlib for the demo's PNG, installed once (a stamp like .base and .dev)
$(VENV)/.plot: $(VENV)/.base pyproject.toml
	$(PIP) install --quiet -e '.[plot]'
	touch $@

demo: $(VENV)/.plot
	$(BIN)/ctxpolicy validate policies/
	$(BIN)/ctxpolicy explain policies/agents.yaml --agent coding_agent
	@if [ -f scripts/demo.sh ]; then bash scripts/demo.sh; fi

# The full suite, after the lint gate (CI runs exactly this target).
test: lint postgres
	$(BIN)/pytest -q -p no:cacheprovider

# The state tests start a real PostgreSQL server (tests/conftest.py): install the
# server on a clean Debian machine when it is missing (CI runs as root).
postgres:
	@if ! command -v pg_config >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing PostgreSQL (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

lint: $(VENV)/.dev
	$(BIN)/ruff check ctxpolicy tests benchmarks examples
	$(BIN)/ruff format --check ctxpolicy tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(PY) -m ctxpolicy.testing.hookdocs --check
	$(PY) -m ctxpolicy.testing.eventdocs --check

fuzz: $(VENV)/.dev
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q tests -k fuzz

bench: $(VENV)/.dev
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
	$(PY) benchmarks/report.py

schema: $(VENV)/.base
	$(BIN)/ctxpolicy schema > schemas/ctxpolicy.schema.json
	$(PY) -m ctxpolicy.policy.docs > docs/policy-reference.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
