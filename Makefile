# Short names for the usual tasks; each sets up what it needs first.
.PHONY: install demo run test lint format bench

install:
	scripts/setup.sh run

demo: install
	.venv/bin/training-platform demo

run: install
	.venv/bin/training-platform serve

test:
	scripts/setup.sh test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/pytest

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy training_platform benchmarks

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

bench: install
	for script in benchmarks/bench_*.py; do .venv/bin/python "$$script" || exit 1; done
