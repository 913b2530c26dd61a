# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SCENARIO ?= scenarios/library/ragged_docs_example.toml

.PHONY: install run test test-fast bench clean

$(BIN)/meshsim: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[jax,test]'
	touch $@

install: $(BIN)/meshsim

run: install
	$(BIN)/meshsim run $(SCENARIO)

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not differential"

bench: install
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/packing.py
	$(BIN)/python benchmarks/scale.py

clean:
	rm -rf $(VENV) *.egg-info
