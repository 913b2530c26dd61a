"""The README's Python examples run as written, each in a fresh process as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _marks(code: str) -> list[pytest.MarkDecorator]:
    """An example that asks JAX (the oracle's worker, or the bridge) is a differential test."""
    return [pytest.mark.differential] if "oracles" in code else []


@pytest.mark.parametrize("code", [pytest.param(code, marks=_marks(code)) for code in BLOCKS],
                         ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code):
    """Each ```python block of the README executes without error (its asserts included) in a new process
    started in the checkout, as a user pasting it would run it."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-4000:]


def test_readme_has_three_examples_and_links_every_command_page():
    """The README shows three examples and links the reference page of every `meshsim` command."""
    from scenarios.cli import parser

    assert len(BLOCKS) == 3
    commands = parser()._subparsers._group_actions[0].choices  # argparse keeps its subparsers here
    for command in commands:
        assert f"](docs/reference/{command}.md)" in README, f"README: no link to docs/reference/{command}.md"
        assert (ROOT / "docs" / "reference" / f"{command}.md").exists()


def test_readme_starts_with_the_two_commands():
    """The README opens with the command that runs a scenario and the one that runs the tests."""
    first = re.search(r"```sh\n(.*?)```", README, flags=re.S).group(1)
    assert first.splitlines()[:2] == [
        "make run     # runs the docs' ragged_all_to_all example through the simulator "
        "(creates .venv, installs everything)",
        "make test    # runs the whole test suite, differential tests against real JAX included (same set-up)",
    ]


def test_readme_links_point_at_files_that_exist():
    """Every relative link of the README names a file of the checkout (a page of the site is its markdown)."""
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        assert "://" in target or (ROOT / target).exists(), f"README links {target}, which does not exist"


def test_readme_counts_the_library_right():
    """The README's count of ready scenarios is the number of files in scenarios/library/, TOML files and
    Python scripts apart."""
    library = ROOT / "scenarios" / "library"
    tomls, scripts = len(list(library.glob("*.toml"))), len(list(library.glob("*.py")))
    said = re.search(r"(\d+) ready ones \((\d+) TOML files and the layout guide's script", README)
    assert said is not None and (int(said.group(1)), int(said.group(2))) == (tomls + scripts, tomls)
    assert scripts == 1 and (library / "layout_guide.py").exists()
