# Short names for the usual tasks; each sets up what it needs first.
.PHONY: install demo run test test-fast lint format bench
.PHONY: profile verify-determinism verify-profile verify-dashboard

install:
	scripts/setup.sh run

demo: install
	.venv/bin/training-platform demo

run: install
	.venv/bin/training-platform serve

# pytest-xdist workers: the suite waits on servers, sockets and timeouts more than it
# computes, so three workers overlap those waits on two cores (docs/testing.md).
# PYTEST_WORKERS=0 runs in one process (a debugger, -x, print debugging).
PYTEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist worksteal)

# CI (.ci/run) runs exactly this: the lint, the dashboard's JS unit tests, every test.
test:
	scripts/setup.sh test
	$(MAKE) --no-print-directory lint
	npm --prefix training_platform/web test
	.venv/bin/pytest $(XDIST) --durations=30

# The edit-test loop: all but the slow and browser tests (docs/testing.md); CI runs
# `make test`, which runs everything. Sets up only when there is no test venv yet.
# More pytest arguments: make test-fast PYTEST_ARGS="-x tests/api"
test-fast: .venv/bin/pytest
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/pytest $(XDIST) -m "not slow and not browser" $(PYTEST_ARGS)

.venv/bin/pytest:
	scripts/setup.sh test

# Python: ruff; mypy --strict on the server core and the API (docs/architecture.md),
# plain mypy on the rest (benchmarks and scripts too). The dashboard's JavaScript:
# ESLint (docs/dashboard.md).
STRICT_TYPED = training_platform/store training_platform/history training_platform/ingest \
	training_platform/live training_platform/api training_platform/services.py
lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy --strict $(STRICT_TYPED)
	.venv/bin/mypy training_platform benchmarks scripts
	npm --prefix training_platform/web run lint

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

bench: install
	for script in benchmarks/bench_*.py; do .venv/bin/python "$$script" || exit 1; done

# The profiling documents' commands (docs/profiling.md, "The documents' commands"); each
# is a `training-platform` subcommand too. A tiny CPU run: seconds, not minutes.
# `make profile` writes $(PROFILE_DIR); verify-profile and verify-dashboard check what it
# wrote (run it first) or what you name: make verify-dashboard METRICS_LOG=run7_metrics.jsonl
PROFILE_DIR ?= profile_output
METRICS_LOG ?= $(PROFILE_DIR)/demo_metrics.jsonl

profile: install
	.venv/bin/training-platform profile --output-dir $(PROFILE_DIR)

verify-determinism: install
	.venv/bin/training-platform verify-determinism

verify-profile: install
	.venv/bin/training-platform verify-profile $(PROFILE_DIR)

verify-dashboard: install
	.venv/bin/training-platform verify-dashboard $(METRICS_LOG)
