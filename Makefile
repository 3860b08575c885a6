# One command each: `make demo` runs the main job, `make test` runs every test.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TEST_WORKERS ?= 2

.PHONY: demo test unit lint type check system-packages clean proto

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all]' --group test
	touch $(STAMP)

system-packages:
	bash scripts/ensure-system-packages.sh

demo: $(STAMP)
	$(VENV)/bin/silo demo

test: $(STAMP) system-packages
	$(PY) -m pytest -n $(TEST_WORKERS)

unit: $(STAMP)
	$(PY) -m pytest -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

type: $(STAMP)
	$(VENV)/bin/mypy

check: lint type test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
