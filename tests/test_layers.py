"""The package's structure: imports run one way (import-linter's contracts), one error base, and a tree that
ruff's rules (pyproject.toml) find nothing in."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGES = sorted({name.split(".")[0] for name in CONFIG["tool"]["setuptools"]["packages"]})

# Run in a fresh interpreter, so importing every module (the JAX worker's included) leaves this process as
# it was. Prints [qualified class name, is a MeshError] for every exception class a module defines, and
# the modules skipped because an optional extra is missing.
_WALK = r"""
import importlib, inspect, json, pkgutil, sys
from layouts import MeshError

OPTIONAL = {"jax", "jaxlib"}
found, skipped = [], []
for top in sys.argv[1:]:
    package = importlib.import_module(top)
    names = [top] + [info.name for info in pkgutil.walk_packages(package.__path__, top + ".")]
    for name in names:
        if name.rpartition(".")[2] == "__main__":  # runs a command when imported
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name.split(".")[0] not in OPTIONAL:
                raise
            skipped.append(name)
            continue
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, Exception) and value.__module__ == name:
                found.append([f"{name}.{value.__qualname__}", issubclass(value, MeshError)])
print(json.dumps({"found": found, "skipped": skipped}))
"""


def test_import_contracts_are_kept():
    """Every import-linter contract in pyproject.toml holds: layouts <- sim <- collectives <- oracles <-
    scenarios (with the command line), jax only from oracles up, no rich in the core, SimPy only through sim."""
    pytest.importorskip("importlinter", reason="needs the test extra: pip install -e '.[test]'")
    script = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(script), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, f"import contracts broken:\n{done.stdout}{done.stderr}"
    assert "0 broken" in done.stdout


def test_contracts_cover_every_package():
    """The contracts see every package meshsim installs, and the layers contract orders all of them."""
    linter = CONFIG["tool"]["importlinter"]
    assert sorted(linter["root_packages"]) == PACKAGES
    layers = [c for c in linter["contracts"] if c["type"] == "layers" and "containers" not in c]
    assert len(layers) == 1 and sorted(layers[0]["layers"]) == PACKAGES


def test_every_sub_package_has_a_public_surface_and_a_layer():
    """Every sub-package meshsim installs re-exports its public names in `__all__` (each name defined), and
    each sub-package of `sim` and `scenarios` (but the data folders) is a layer of its container's contract."""
    import importlib

    subpackages = [name for name in CONFIG["tool"]["setuptools"]["packages"] if "." in name]
    data = {"scenarios.library", "scenarios.sweeps"}
    for name in sorted(set(subpackages) - data):
        module = importlib.import_module(name)
        assert module.__all__ and all(hasattr(module, n) for n in module.__all__), name
    inner = {c["containers"][0]: c["layers"] for c in CONFIG["tool"]["importlinter"]["contracts"]
             if c["type"] == "layers" and "containers" in c}
    for name in set(subpackages) - data:
        container, _, part = name.rpartition(".")
        if container in ("sim", "scenarios"):
            layered = {tail.strip() for layer in inner[container] for tail in layer.replace(":", "|").split("|")}
            assert part in layered, f"{name} is in no layer of the {container} contract"


def test_every_error_class_is_a_mesh_error():
    """Every exception class any module of the packages defines derives from `MeshError`, so a caller
    catches all of meshsim's own errors with one clause. (Signals that derive from BaseException only,
    used to unwind device programs, are not errors and are not listed.)"""
    done = subprocess.run([sys.executable, "-c", _WALK, *PACKAGES], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    walked = json.loads(done.stdout)
    classes = dict(walked["found"])
    for expected in ("layouts._errors.MeshError", "sim._errors.ProtocolError", "scenarios._errors.ScenarioError",
                     "oracles.jax_oracle.OracleError", "oracles.jax_oracle.OracleFailure"):
        assert expected in classes, f"the walk missed {expected}; it found {sorted(classes)}"
    outside = sorted(name for name, is_mesh_error in classes.items() if not is_mesh_error)
    assert outside == [], f"exception classes outside MeshError: {outside}"


def test_ruff_finds_nothing():
    """`ruff check .` from the repository root, with the rules in pyproject.toml, reports no finding in any file."""
    pytest.importorskip("ruff", reason="needs the test extra: pip install -e '.[test]'")
    script = Path(sys.executable).with_name("ruff")
    done = subprocess.run([str(script), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, f"ruff found problems:\n{done.stdout}{done.stderr}"
