"""The examples in the docstrings of layouts, sim and collectives (`>>>` lines) run and print what they show:
each in its module's namespace, as `python -m doctest` and `pytest --doctest-modules` run them, and those of
the public entry points a user copies first also in a fresh namespace (their own imports)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import collectives
import layouts
import sim

FINDER = doctest.DocTestFinder()


def _module_names() -> list[str]:
    """Every module of layouts, sim and collectives, sub-packages included."""
    names = []
    for package in (layouts, sim, collectives):
        names.append(package.__name__)
        names += [found.name for found in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return names


def _examples() -> list[doctest.DocTest]:
    """Each docstring with examples, once (a name re-exported by a package is found in its own module)."""
    found, seen = [], set()
    for name in _module_names():
        for test in FINDER.find(importlib.import_module(name), name):
            if test.examples and (test.filename, test.lineno) not in seen:
                seen.add((test.filename, test.lineno))
                found.append(test)
    return sorted(found, key=lambda test: test.name)


def _run(test: doctest.DocTest) -> str:
    """The report of the examples of `test` that failed; empty when every one printed what it shows."""
    lines: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=lines.append, clear_globs=False)
    return "".join(lines)


EXAMPLES = _examples()


def test_the_packages_have_docstring_examples():
    """The collection finds the examples (a finder that found none would pass every test below)."""
    assert len(EXAMPLES) >= 60
    assert {"sim.program._shard_map.shard_map", "sim.memory._array.device_put"} <= {t.name for t in EXAMPLES}


@pytest.mark.parametrize("test", EXAMPLES, ids=[test.name for test in EXAMPLES])
def test_a_docstring_example_runs_in_its_module(test):
    """Every example prints what its docstring shows, run in its module's namespace."""
    assert _run(test) == ""


@pytest.mark.parametrize("name", ["sim.shard_map", "sim.device_put", "sim.jit"])
def test_a_public_entry_points_example_runs_as_written(name):
    """The examples of shard_map, device_put and jit, the first a user copies, run in a fresh namespace: they
    import every name they use."""
    package, attribute = name.split(".")
    function = getattr(importlib.import_module(package), attribute)
    (test,) = [t for t in FINDER.find(function, name, globs={}) if t.examples]
    assert _run(test) == ""
