"""The command line's reference pages (docs/reference/) cover the parser: a page per command, every flag named."""

from __future__ import annotations

import argparse

import pytest
from docs_pages import page

from scenarios.cli import parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Each `meshsim` command's subparser, by name, as `meshsim --help` lists them."""
    (commands,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


COMMANDS = _commands()


def test_the_cli_page_links_a_page_for_every_command():
    """docs/reference/cli.md links one page per command of `meshsim --help`, and docs/reference/index.md's
    toctree lists each."""
    cli, index = page("reference/cli"), page("reference/index")
    for name in COMMANDS:
        assert f"<{name}>`" in cli, f"docs/reference/cli.md: no {{doc}} link to the page of `meshsim {name}`"
        assert f"\n{name}\n" in index, f"docs/reference/index.md: `{name}` missing from the toctree"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_of_a_command_is_named_on_its_page(name):
    """Each option of `meshsim NAME` (its long form) is written on docs/reference/NAME.md, beside the `--help` the
    page runs, so a new flag cannot go undocumented."""
    text = page(f"reference/{name}")
    flags = [s for a in COMMANDS[name]._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
    missing = [flag for flag in flags if f"`{flag}" not in text and f" {flag}" not in text]
    assert not missing, f"docs/reference/{name}.md does not name {missing}"
