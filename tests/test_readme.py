"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code, capsys):
    """Each ```python block of the README executes without error (its asserts included)."""
    exec(compile(code, "README.md", "exec"), {})


def test_readme_starts_with_the_two_commands():
    """The README opens with the command that runs a scenario and the one that runs the tests."""
    first = re.search(r"```sh\n(.*?)```", README, flags=re.S).group(1)
    assert first.splitlines()[:2] == [
        "make run     # runs the docs' ragged_all_to_all example through the simulator "
        "(creates .venv, installs everything)",
        "make test    # runs the whole test suite, differential tests against real JAX included (same set-up)",
    ]
