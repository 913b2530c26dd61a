# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SCENARIO ?= scenarios/library/ragged_docs_example.toml

.PHONY: install bytecode run test test-fast bench docs clean

$(BIN)/meshsim: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[jax,test,dask,plot,docs]'
	touch $@

# The browser tests need Debian's chromium and its driver; as root (CI's fresh machine) install them when
# they are missing.
install: $(BIN)/meshsim
	@(command -v chromium && command -v chromedriver) >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver)

# The project's modules compiled to bytecode before a run starts its many processes (JAX workers, notebook
# kernels, command-line children): where PYTHONDONTWRITEBYTECODE is set, each process would otherwise compile
# every module it imports again, about 0.6 s a process.
bytecode: install
	$(BIN)/python -m compileall -q layouts sim collectives oracles scenarios tests benchmarks docs meshsim_launcher.py

run: install
	$(BIN)/meshsim run $(SCENARIO)

# Two pytest workers (pytest-xdist), each taking whole files: while one waits on a JAX worker process or
# a Dask cluster, the other runs, so both cores stay busy.
test: bytecode
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

test-fast: bytecode
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not differential"

bench: install
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/packing.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/numerics.py
	$(BIN)/python benchmarks/fidelity.py

# The documentation site (docs/): every notebook and code cell executed, any warning an error.
docs: bytecode
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) *.egg-info
