# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench docs clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,plots]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpuq serve

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check app tests bench
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python bench/core.py

# Regenerate docs/configuration.md and docs/api.md from the code (tests/unit/test_docs.py
# fails when they are stale).
docs: $(STAMP)
	$(BIN)/python -m app.docgen

clean:
	rm -rf $(VENV) .gpuq
