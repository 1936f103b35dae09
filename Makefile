# iotsched: one screen of targets. `make test` is what CI runs (.ci/run).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-dev
LOCAL_STAMP := $(VENV)/.stamp-local

include infra/sam.mk

.DEFAULT_GOAL := help
.PHONY: help venv demo local test test-quick quick-tests checks lint format typecheck imports pytest test-unit browser bench bench-test chaos build deploy clean

help:
	@echo "make demo    - create the venv with what the demo needs, run the IoT demo on the embedded emulator"
	@echo "make test    - the same set-up, then ruff, mypy, import rules, template checks, pytest, bench-test"
	@echo "make test-quick - ruff, mypy, import rules, then the in-process tests (unit, contract, API)"
	@echo "make local   - iotsched local up (moto server + tick + worker processes)"
	@echo "make chaos   - the chaos run: random SIGKILLs, invariants checked (a few minutes)"
	@echo "make bench   - the benchmarks: bench/results.json and bench/results.md (about ten minutes)"
	@echo "make bench-test - the benchmarks' own tests (bench/tests), the bench and chaos smoke runs included"
	@echo "make build   - sam build (needs python3.12, the functions' runtime: on PATH or from pyenv)"
	@echo "make deploy  - sam build && sam deploy (ENV=default|prod)"

venv: $(STAMP)

# Venvs are filled by uv (put into the venv by pip first): the same resolution as pip's in a
# fraction of its time. `UV_INSTALL` is the one place to change how they are filled. It
# compiles the packages' bytecode at install, once and on every core: otherwise the first
# processes of a suite (pytest's workers, side by side) would each compile what they import.
# (UV_REQUIREMENT: infra/sam.mk, included above.)
UV_INSTALL = $(BIN)/python -m pip install --quiet --disable-pip-version-check '$(UV_REQUIREMENT)' && \
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --upgrade pip

# The suites start hundreds of Python processes (CLI commands, the local runtime's functions,
# pytest's workers): where the environment says not to write bytecode, each would compile what
# it imports, and pytest rewrite the test modules, again.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(UV_INSTALL) -e '.[dev]'
	touch $@ $(LOCAL_STAMP)

# The demo needs the `local` extra only (the CLI and moto's server), not the dev tools; a venv
# made by `make venv` has it already.
$(LOCAL_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(UV_INSTALL) -e '.[local]'
	touch $@

DEMO_TIME := about 80 s on an idle 2-core machine, plus about 10 s to create the venv (more on a busy one)
demo:
	@echo "make demo: $(DEMO_TIME)"
	@$(MAKE) --no-print-directory $(LOCAL_STAMP)
	$(BIN)/iotsched demo

local: venv
	$(BIN)/iotsched local up

lint: venv
	$(BIN)/ruff check src functions tests bench
	$(BIN)/ruff format --check src functions tests bench

format: venv
	$(BIN)/ruff check --fix src functions tests bench
	$(BIN)/ruff format src functions tests bench

# bench/ (its tests too) is held to the package's strict typing.
typecheck: venv
	$(BIN)/mypy src functions bench

imports: venv
	$(BIN)/lint-imports

# The console's browser test (tests/integration/test_console.py) drives Debian's chromium:
# installed here when missing (as root, or with passwordless sudo), never downloaded by
# Playwright. Where it cannot be installed the test skips with a loud reason.
CHROMIUM := /usr/bin/chromium
APT := env DEBIAN_FRONTEND=noninteractive apt-get -y -q
browser:
	@test -x $(CHROMIUM) || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  echo "installing chromium for the console's browser test (apt-get)"; \
	  { $$SUDO $(APT) install chromium || { $$SUDO $(APT) update && $$SUDO $(APT) install chromium; }; } \
	  || echo "!!! chromium could not be installed: the console's browser test will SKIP !!!"; }

# pytest exits 5 when it collects nothing: make treats that as the failure it is.
# Real-process tests run in two lanes (tests/conftest.py), each on one pytest-xdist worker; the
# in-process tests run on the other two and on whatever a lane leaves free. The lanes wait on
# leases and timeouts most of their time, so two workers beside them keep both cores busy.
TEST_WORKERS ?= 4
pytest: venv browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

test-unit: venv
	$(BIN)/python -m pytest tests/unit

# The loop while working: lint, types and import rules beside unit, contract (memory and moto;
# the load scenarios on memory only), API in-process and the IoT library's tests (each target's
# output printed whole once it ended): no real processes, no adversarial backend, no template
# tools.
QUICK_WORKERS ?= 3
QUICK_MARKS := not slow and not wall_minutes and not adversarial and not (load and moto)
test-quick: venv
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck imports quick-tests

quick-tests: venv
	$(BIN)/python -m pytest -n $(QUICK_WORKERS) -m "$(QUICK_MARKS)" tests/unit tests/contract tests/api tests/iot

# The checks, side by side (mypy beside the template tools).
checks: lint typecheck imports template-check

# Everything CI runs: the checks beside the product's suite (they take a few seconds of its start;
# its output comes line by line, theirs between its lines), then the benchmarks' own tests (two
# pytest runs, as tests/ never collects bench/; not side by side: on two cores their real
# processes starve each other's leases). The suite's template tests run the template tools: their
# venv is made first.
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target venv $(TOOLS_STAMP)
	@$(MAKE) --no-print-directory -j6 --output-sync=line checks pytest
	@$(MAKE) --no-print-directory bench-test

# Benchmarks, not timed tests: figures and targets in bench/results.md. The bench extra adds
# APScheduler (the peer compared side by side). BENCH_ARGS=--quick for a smoke run, --full for
# the issue's sizes everywhere (tens of minutes on the emulator).
BENCH_STAMP := $(VENV)/.stamp-bench
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev,bench]'
	touch $@

bench: venv $(BENCH_STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# The benchmarks' own tests, apart from the product's suite (pyproject's testpaths is tests/):
# the report and accounting units, the bench smoke run and the chaos smoke run (real processes).
# A test to a worker, not a file: the chaos run, the partition and quick bench runs and the
# cold-start measures each take tens of seconds, side by side.
bench-test: venv
	$(BIN)/python -m pytest -n 3 --dist load bench/tests

# The chaos run: 50 instances x 20 shards, SIGKILLed workers and dispatchers, every tick twice.
chaos: venv
	$(BIN)/python -m bench.chaos --results bench/results.md

ENV ?= default
# sam build runs the functions' runtime, python3.12: from PATH, else the newest 3.12 pyenv has.
SAM_PYTHON = $(shell python3.12 -V >/dev/null 2>&1 || { v=$$(pyenv versions --bare 2>/dev/null | grep '^3\.12\.' | sort -V | tail -1); [ -n "$$v" ] && echo "PYENV_VERSION=$$v"; })
build: tools
	@python3.12 -V >/dev/null 2>&1 || [ -n "$(SAM_PYTHON)" ] || { echo "make build: sam build needs python3.12 (the functions' runtime) on PATH or in pyenv"; exit 2; }
	$(SAM_PYTHON) $(TOOLS_BIN)/sam build

deploy: build
	$(TOOLS_BIN)/sam deploy --config-env $(ENV)

clean:
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache
