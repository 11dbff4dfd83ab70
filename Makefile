# Two commands do everything on a fresh machine: `make demo` and `make test`. Both are safe to run twice.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help install model demo test lint typecheck db-up db-down clean

help:
	@echo "make demo    - install, start the embedded database, migrate, seed, load a sample, run queries"
	@echo "make test    - install, then ruff, mypy and the whole pytest suite"
	@echo "make install - only the virtual environment ($(VENV)) with the package and its test tools"
	@echo "make model   - install, then the offline embedding model files"
	@echo "make lint    - ruff check and ruff format --check"
	@echo "make typecheck - mypy"
	@echo "make db-up   - start the embedded database server"
	@echo "make db-down - stop the embedded database server"
	@echo "make clean   - stop the embedded database server, remove $(VENV) and the tools' caches"

# The venv counts as made only when its python runs pip and is new enough; else (ensurepip failed half-way,
# made by another or a missing Python) it is made again from scratch (--clear), not taken as done.
$(STAMP): pyproject.toml
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 \
		&& $(BIN)/python -m pip --version >/dev/null 2>&1 \
		|| $(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# offline embedding model files (idempotent; checks sha256 of each file)
model: install
	$(BIN)/spark-pg model setup

demo: model
	$(BIN)/spark-pg demo

lint: install
	$(BIN)/ruff check spark_pg tests alembic
	$(BIN)/ruff format --check spark_pg tests alembic

typecheck: install
	$(BIN)/mypy

test: model lint typecheck
	$(BIN)/pytest

db-up: install
	$(BIN)/spark-pg db up

db-down: install
	$(BIN)/spark-pg db down

clean:
	-test -x $(BIN)/spark-pg && $(BIN)/spark-pg db down
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
