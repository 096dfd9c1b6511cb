# One set of commands everywhere: CI (.ci/run), a laptop and a pre-commit hook run these.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What is installed, each reinstalled only when the dependency declarations change:
# the runtime (what `make run` and `make cluster` need) and, on top, the dev tools.
RUNTIME_STAMP := $(VENV)/.installed-runtime
DEV_STAMP := $(VENV)/.installed-dev

# Tests run in pytest-xdist worker processes: the servers they start are mostly waited on
# (I/O), so more workers than cores pays. `make test PYTEST_WORKERS=0` runs them in one process.
# --dist loadfile: a file's tests run on one worker, in order, as in one process, so a
# module's shared fixture (a standalone server) starts once and sees what it always saw.
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile
# The fast specs mostly compute: one worker per core (measured: -n 2 beat -n 4 on 2 cores).
FAST_WORKERS ?= auto
# tests/fault kill, freeze and restart real processes against 1-3 s leases and watch for the
# effects within seconds: beside 3 other workers on a busy machine they miss their windows
# (3 of 12 failed with -n 4), so they run after the rest, in one process.
SERIAL_TESTS := tests/fault
# The fast loop: specs in this process or on the test servers, no real service processes
# (tests/e2e, tests/fault and tests/deploy start them; so do the tests marked slow).
FAST_TESTS := tests --ignore=tests/e2e --ignore=tests/fault --ignore=tests/deploy -m 'not slow and not e2e'

.DEFAULT_GOAL := test
.PHONY: install install-runtime lint test test-fast bench run cluster clean

install: $(DEV_STAMP)

install-runtime: $(RUNTIME_STAMP)

# The venv is created once, with a Python that meets requires-python.
$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: tickwork needs Python >= 3.11, but '$(PYTHON)' is" \
	    "$$(command -v $(PYTHON) >/dev/null && $(PYTHON) --version 2>&1 || echo 'not found')." \
	    "Install Python 3.11+ or run: make PYTHON=python3.11 ..." >&2; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the dependency declarations changed since the last install.
$(RUNTIME_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -c constraints.txt -e .
	touch $@

# The dev tools come with the runtime, so that install counts as the runtime's too.
$(DEV_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev]'
	touch $@ $(RUNTIME_STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: install lint browser
	$(BIN)/pytest $(PYTEST_PARALLEL) $(SERIAL_TESTS:%=--ignore=%)
	$(BIN)/pytest $(SERIAL_TESTS)

# Unit and store specs only, in parallel: the edit-test loop (a couple of minutes).
test-fast: install
	$(BIN)/pytest -n $(FAST_WORKERS) --dist loadgroup $(FAST_TESTS)

# Every bench/*.py (helpers named _*.py excepted) prints its figure as JSON on its last line.
# bench/scheduler.py needs PostgreSQL: TICKWORK_BENCH_DATABASE_URL, default the local server.
# bench/ui.py needs PostgreSQL too, and /usr/bin/chromium for its graph figure (null without).
bench: install
	@set -e; for script in bench/*.py; do \
	  case "$$(basename "$$script")" in _*) continue ;; esac; \
	  [ -e "$$script" ] || continue; \
	  echo "== $$script" >&2; \
	  $(BIN)/python "$$script"; \
	done

# The API on :8765 (docs at /api/docs; `make run API_PORT=N` for another port), the
# scheduler, the executor and agents in one process on SQLite, with the examples pushed
# (and the pool their pools.dig takes);
# `tickwork run examples/hello.dig` runs one workflow.
run: install-runtime
	$(BIN)/tickwork standalone --project examples --pool warehouse=2 $(if $(API_PORT),--bind 127.0.0.1:$(API_PORT))

# Each service as its own process on the local PostgreSQL (database tickwork_dev) and Redis,
# the API on :8765 or the first free port after it (`make cluster API_PORT=N` to choose),
# so it runs beside `make run`; Ctrl-C, SIGTERM or its output's reader gone stops them all.
cluster: install-runtime
	$(BIN)/tickwork dev --project examples $(if $(API_PORT),--api-port $(API_PORT))

clean:
	rm -rf $(VENV) .tickwork .mypy_cache .ruff_cache .pytest_cache .import_linter_cache dist build
	find . -path ./.git -prune -o \
	  \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune -exec rm -rf {} +

# README's "A short CLI tour" is the output of a real run: this runs its commands against
# a fresh standalone in a temporary directory and rewrites the block between the markers.
.PHONY: readme-tour
readme-tour: install
	$(BIN)/python -m tests.support.readme_tour

# The UI's front-end libraries (elkjs, Swagger UI; axe-core for the tests), pinned in
# tests/support/vendor_ui.py: fetched from the npm registry, checked against its integrity
# and written with their VERSION, LICENSE and SHA256SUMS; the files are committed.
.PHONY: vendor-ui
vendor-ui: install
	$(BIN)/python -m tests.support.vendor_ui

# The UI's browser specs drive Debian's Chromium (tests/support/browser.py): installed here
# when it is missing and we may (root, apt-get), without the recommends (avahi's fail to
# configure in containers). Otherwise one line names the package, and those specs are
# skipped (under CI=true they fail instead).
.PHONY: browser
browser:
	@command -v "$${TICKWORK_TEST_CHROMIUM:-chromium}" >/dev/null 2>&1 \
	  || command -v chromium-browser >/dev/null 2>&1 \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	       && { apt-get install -y --no-install-recommends chromium \
	            || { apt-get update && apt-get install -y --no-install-recommends chromium; }; }; } \
	  || echo "install Debian's chromium package: apt-get install chromium" >&2

# The README's pictures of the web UI (docs/images/ui-*.png), taken by Chromium from a
# fresh standalone that ran a few examples, one failing.
.PHONY: ui-screenshots
ui-screenshots: install browser
	$(BIN)/python -m tests.support.ui_screenshots
