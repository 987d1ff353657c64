# AgentHub developer entry points: `make run` starts the product, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest bench clean

# The first `make run` installs everything: each step says what it does, and pip lists every package it fetches.
$(BIN)/python:
	@echo "==> [1/3] creating the virtual environment $(VENV) (with $(PYTHON))"
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "==> [2/3] updating pip in $(VENV)"
	$(BIN)/pip install --upgrade --progress-bar on pip
	@echo "==> [3/3] installing AgentHub and its dependencies into $(VENV) (the first time: a minute or two)"
	$(BIN)/pip install --progress-bar on -e '.[dev]'
	touch $(STAMP)
	@echo "==> installed into $(VENV)"

run: $(STAMP)
	$(BIN)/agenthub serve --console-hint

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

bench: $(STAMP)
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
