"""The command line's reference pages (docs/reference/) cover the parser: a page per command, every flag named."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex

import pytest
from docs_pages import DOCS, ROOT, page

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


def _shown_command_lines() -> list[tuple[str, str]]:
    """(file, command line) for every `meshsim ...` the README and the site's pages show naming a file:
    inline code, and the lines of shell blocks (a `$ ` prompt, a trailing comment, a pipe or a redirection
    left out)."""
    shown = []
    for path in [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]:
        text = path.read_text()
        lines = re.findall(r"`(meshsim [^`\n]+)`", text)
        for block in re.findall(r"```(?:sh|bash|text|console)\n(.*?)```", text, flags=re.S):
            lines += [line.strip().removeprefix("$ ") for line in block.splitlines()]
        for line in lines:
            line = re.split(r"\s+#|\||>", line)[0].strip()
            if line.startswith("meshsim ") and re.search(r"\.(toml|json|py)\b", line):
                shown.append((str(path.relative_to(ROOT)), line))
    return shown


def test_the_command_lines_the_pages_show_are_accepted():
    """Every `meshsim` command line the README and the pages show with a file is one the parser accepts: a
    required option (`draw` and `trace` need `-o FILE`) is never left out of an example."""
    refused = []
    for where, line in _shown_command_lines():
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
                parser().parse_args(shlex.split(line)[1:])
        except SystemExit as exit_:
            if exit_.code:
                refused.append(f"{where}: {line}: {said.getvalue().strip().splitlines()[-1]}")
    assert not refused, "\n".join(refused)
    assert len(_shown_command_lines()) > 50
