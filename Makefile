# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

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

clean:
	rm -rf $(VENV) .gpuq
