# Two commands do all set-up on a fresh machine:
#   make run    create .venv if missing, then run the main job (memlens compare)
#   make test   create .venv if missing, then lint and run the default test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup run test test-all bench lint format docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# compile the kernels once, here, into the kernel cache (a second time: a line, at once)
setup: $(STAMP)
	$(VENV)/bin/memlens cache warm

run: setup
	$(VENV)/bin/memlens compare

test: setup
	$(VENV)/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	$(PY) -m pytest -n 2

test-all: setup
	MEMLENS_HYPOTHESIS_EXAMPLES=100 $(PY) -m pytest -n 2 -m "slow or not slow"

bench: setup
	$(PY) benchmarks/bench_replay.py

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf outputs multirun mlflow.db mlflow.db.lock mlflow.db-wal mlflow.db-shm mlartifacts .pytest_cache
