# Thin aliases. Each target creates/refreshes the project's own virtual
# environment (.venv) first, so `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.llmload-installed
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: install demo test test-all bench lint check clean

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "llmload needs Python >= 3.11 (python3.11 or newer on PATH); install it, e.g. apt-get install python3 python3-venv" >&2; exit 1; fi
	@echo "== creating $(VENV) with $(PYTHON) and installing llmload[dev]"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/llmload demo

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/run_bench.py

lint: install
	$(VENV)/bin/ruff check llmload locustfiles tests bench
	$(VENV)/bin/ruff format --check llmload locustfiles tests bench
	$(VENV)/bin/mypy llmload
	$(VENV)/bin/lint-imports

check: lint test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
