"""The documentation site's pages as tests read them: a page's text, its code cells, a named static block.

Examples that must start in a fresh process (a device count set before jax starts, a lowering installed
before the first jit, a shell recipe) are static blocks named with `:name:` on their page; the tests that
run them find them here by that name. Examples that can run in a page's kernel are `{code-cell}` blocks,
executed by the docs build (tests/test_docs_site.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """The markdown source of the page `name` (e.g. "reference/cli"), as the site builds it."""
    return (DOCS / f"{name}.md").read_text()


def code_cells(text: str) -> list[str]:
    """The code of each ```{code-cell} block of a page's `text`, in order, without its option lines."""
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, flags=re.S)
    return [re.sub(r"\A(?::[\w-]+:.*\n)+", "", cell) for cell in cells]


def named_block(text: str, name: str) -> str:
    """The body of the static ```{code-block} whose `:name:` is `name` in a page's `text`."""
    options = r"(?::[\w-]+:.*\n)*"
    fence = r"```\{code-block\} \w+\n" + options + ":name: " + re.escape(name) + r"\n" + options
    found = re.search(fence + r"\n(.*?)```", text, flags=re.S)
    assert found, f"no code-block named {name!r} on the page"
    return found.group(1)
