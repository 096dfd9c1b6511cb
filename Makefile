# One set of commands everywhere: CI (.ci/run), a laptop and a pre-commit hook run these.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := test
.PHONY: install lint test bench run cluster clean

install: $(STAMP)

# The venv is created once, with a Python that meets requires-python.
$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: tickwork needs Python >= 3.11, but '$(PYTHON)' is" \
	    "$$(command -v $(PYTHON) >/dev/null && $(PYTHON) --version 2>&1 || echo 'not found')." \
	    "Install Python 3.11+ or run: make PYTHON=python3.11 ..." >&2; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the dependency declarations changed since the last install.
$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev]'
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: install lint
	$(BIN)/pytest

# Every bench/*.py (helpers named _*.py excepted) prints its figure as JSON on its last line.
# bench/scheduler.py needs PostgreSQL: TICKWORK_BENCH_DATABASE_URL, default the local server.
bench: install
	@set -e; for script in bench/*.py; do \
	  case "$$(basename "$$script")" in _*) continue ;; esac; \
	  [ -e "$$script" ] || continue; \
	  echo "== $$script" >&2; \
	  $(BIN)/python "$$script"; \
	done

# The API on :8765 (docs at /api/docs), the scheduler, the executor and agents in one
# process, with the examples pushed; `tickwork run examples/hello.dig` runs one workflow.
run: install
	$(BIN)/tickwork standalone --project examples

# Each service as its own process on the local PostgreSQL and Redis; Ctrl-C stops them all.
cluster: install
	$(BIN)/tickwork dev --project examples

clean:
	rm -rf $(VENV) .tickwork .mypy_cache .ruff_cache .pytest_cache .import_linter_cache dist build
	find . -path ./.git -prune -o \
	  \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune -exec rm -rf {} +
