# Thin aliases. Each target creates/refreshes the project's own virtual
# environment (.venv) first, so `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.llmload-installed
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: install demo test test-all test-real bench bench-scale lint check docs clean image lock screenshots

$(STAMP): pyproject.toml constraints.txt
	@if [ -z "$(PYTHON)" ]; then echo "llmload needs Python >= 3.11 (python3.11 or newer on PATH); install it, e.g. apt-get install python3 python3-venv" >&2; exit 1; fi
	@echo "== creating $(VENV) with $(PYTHON) and installing llmload[dev]"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# constraints.txt: resolve pyproject.toml's dependencies (with dev) afresh in a throw-away
# environment and pin what was installed.
lock:
	@if [ -z "$(PYTHON)" ]; then echo "llmload needs Python >= 3.11 on PATH" >&2; exit 1; fi
	@rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --disable-pip-version-check '.[dev]'
	@{ sed -n '1,/^$$/{/^#/p}' constraints.txt; .lock-venv/bin/python -m pip freeze --exclude-editable | grep -v '^llmload'; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt && rm -rf .lock-venv
	@echo "constraints.txt: $$(grep -vc '^#' constraints.txt) pins"

demo: install
	$(VENV)/bin/llmload demo

# Three passes. First the timing-accuracy tests (marker `timing`: test_cases_stream's +-5 ms TTFT,
# test_clock's kernel stamps, the SSE decoder's cost ratio) in one process without tracing, which
# would shift what they measure, and with nothing else running. Then everything else under
# coverage.py, and the edge tests (tests/edge: they import Locust, so a pytest process of their own).
# The gate is in pyproject.toml ([tool.coverage.report] fail_under); the `locust` processes and
# simulators the tests start are measured too (coverage's subprocess patch), each writing a
# .coverage.* file that `combine` merges. Every pass always runs and the coverage figure is always
# printed; the exit status is the first failing pass's (pytest's own code), else the coverage gate's.
# TEST_PROCESSES=N (default 2, the CI machine's cores) runs the coverage pass on N pytest-xdist
# workers and, at the same time, the edge tests as ceil(N/2) pytest processes with --shard K/M
# (tests/conftest.py; gevent's patch breaks xdist's worker threads), whose output is printed when all
# are done. TEST_PROCESSES=1: the three passes one after the other in one process each.
# Python keeps its bytecode (gitignored __pycache__/) even where PYTHONDONTWRITEBYTECODE is set: the
# suite starts ~14 pytest processes and ~230 others (`locust`, the simulator, the CLI), and without
# the cache each of them compiles llmload anew and each pytest process rewrites the asserts of every
# test module again (collecting the coverage pass: 10.7 s of CPU per process without it, 2.2 s with it).
TEST_PROCESSES ?= 2

test: install
	@rm -f .coverage .coverage.* .edge-shard-*.log
	@unset PYTHONDONTWRITEBYTECODE; status=0; started=$$(date +%s); n=$(TEST_PROCESSES); \
	if [ "$$n" -gt 1 ] 2>/dev/null; then xdist="-n $$n --dist worksteal"; m=$$(( (n + 1) / 2 )); else n=1; m=0; xdist="-p no:xdist"; fi; \
	echo "$(PY) -m pytest -q --durations=25 -m timing"; \
	$(PY) -m pytest -q --durations=25 -m timing || status=$$?; \
	pids=""; \
	if [ $$m -gt 0 ]; then \
		echo "$(PY) -m coverage run -m pytest -q --durations=10 tests/edge --shard K/$$m, K = 0..$$((m - 1)), beside the next pass"; \
		for k in $$(seq 0 $$((m - 1))); do \
			$(PY) -m coverage run -m pytest -q --durations=10 -p no:cacheprovider tests/edge --shard $$k/$$m \
				> .edge-shard-$$k.log 2>&1 & pids="$$pids $$!"; \
		done; \
	fi; \
	echo "$(PY) -m coverage run -m pytest -q $$xdist --durations=25 -m \"not timing\""; \
	$(PY) -m coverage run -m pytest -q $$xdist --durations=25 -m "not timing" || { test $$status -ne 0 || status=$$?; }; \
	if [ $$m -eq 0 ]; then \
		echo "$(PY) -m coverage run -m pytest -q --durations=10 tests/edge"; \
		$(PY) -m coverage run -m pytest -q --durations=10 tests/edge || { test $$status -ne 0 || status=$$?; }; \
	else \
		k=0; for pid in $$pids; do \
			wait $$pid || { test $$status -ne 0 || status=$$?; }; \
			echo "== tests/edge --shard $$k/$$m"; cat .edge-shard-$$k.log; rm -f .edge-shard-$$k.log; k=$$((k + 1)); \
		done; \
	fi; \
	$(PY) -m coverage combine -q || true; \
	echo "$(PY) -m coverage report"; \
	$(PY) -m coverage report || { test $$status -ne 0 || status=$$?; }; \
	echo "make test: $$(( $$(date +%s) - started )) s"; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (exit $$status); see the failures above the coverage table" >&2; fi; \
	exit $$status

# Opt-in, not part of `make test`: tests/real against llama.cpp's llama-server, built once by the
# real-server kit (../shared/realserver beside the repo, or LLMLOAD_REALSERVER_DIR; ~5-10 min, cached in /tmp/rs).
REALSERVER_DIR ?= $(or $(LLMLOAD_REALSERVER_DIR),$(abspath $(dir $(abspath $(firstword $(MAKEFILE_LIST))))../shared/realserver))

test-real: install
	@test -x "$(REALSERVER_DIR)/setup.sh" || { echo "real-server kit not found: $(REALSERVER_DIR)/setup.sh; set LLMLOAD_REALSERVER_DIR" >&2; exit 1; }
	"$(REALSERVER_DIR)/setup.sh"
	LLMLOAD_REAL=1 LLMLOAD_REALSERVER_DIR="$(REALSERVER_DIR)" $(PY) -m pytest -q -s -m real tests/real

# The web UI and HTML report pictures in docs/ (README), taken by the browser tests in headless chromium.
screenshots: install
	LLMLOAD_SCREENSHOTS=1 $(PY) -m pytest -q tests/integration/test_webui_browser.py tests/integration/test_webui_charts.py

bench: install
	$(PY) bench/run_bench.py

# One master, N fake workers replaying a real worker's recorded reports, beside plain Locust (bench/scale.py);
# writes bench-scale.json. A short form: $(PY) bench/scale.py --quick
bench-scale: install
	$(PY) bench/scale.py --check

lint: install
	$(VENV)/bin/ruff check llmload locustfiles tests bench
	$(VENV)/bin/ruff format --check llmload locustfiles tests bench
	$(VENV)/bin/mypy llmload
	$(VENV)/bin/lint-imports

check: lint test

# The documentation site (docs/, mkdocs.yml) into site/: the options reference must be the one the option
# table generates, and --strict turns a broken page link or anchor into a failure.
docs: install
	$(PY) -m llmload.settings.options_doc --check
	$(VENV)/bin/mkdocs build --strict

# The container image (k8s/Dockerfile) with docker or podman, whichever has a running engine.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= llmload:$(VERSION)
image:
	@tool=""; for t in docker podman; do \
		if command -v $$t >/dev/null 2>&1 && $$t info >/dev/null 2>&1; then tool=$$t; break; fi; done; \
	if [ -z "$$tool" ]; then \
		echo "make image: no container engine here (neither 'docker info' nor 'podman info' answers); nothing built." >&2; \
		echo "On a machine with one: docker build -f k8s/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) ." >&2; \
		exit 1; fi; \
	echo "== building $(IMAGE) with $$tool"; \
	$$tool build -f k8s/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.*
