"""The lessons (`docs/lessons/`): each is an executed notebook that checks its own results, and the index
lists every one. The docs build (`test_docs_site.py`) executes them; this file checks what a build that
succeeds does not: that a lesson would fail on a wrong result, and that no lesson is missing from its index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parents[1] / "docs" / "lessons"
NAMES = ("ragged", "vma", "layouts", "network", "campaign")
FRONT_MATTER = "---\nfile_format: mystnb\nkernelspec:\n  name: python3\n---\n"


def code_cells(text: str) -> list[str]:
    """The source of every executed cell of a MyST notebook, in order."""
    return re.findall(r"^```\{code-cell\} ipython3\n(.*?)^```$", text, flags=re.S | re.M)


def title(text: str) -> str:
    """The page's first heading."""
    return re.search(r"^# (.+)$", text, flags=re.M).group(1)


def test_every_lesson_file_is_one_of_the_five():
    """docs/lessons/ holds the index and exactly the five lessons."""
    assert sorted(p.stem for p in LESSONS.glob("*.md")) == sorted((*NAMES, "index"))


@pytest.mark.parametrize("name", NAMES)
def test_a_lesson_is_an_executed_notebook_that_asserts(name):
    """Each lesson is a MyST notebook whose cells run at build time (no plain python block escapes being
    run), with asserts in at least a third of its cells and text between them, so a wrong result fails
    the build and every step is explained."""
    text = (LESSONS / f"{name}.md").read_text()
    assert text.startswith(FRONT_MATTER)
    cells = code_cells(text)
    assert len(cells) >= 5, name
    asserting = [c for c in cells if re.search(r"^\s*assert ", c, flags=re.M)]
    assert len(asserting) * 3 >= len(cells), f"{name}: {len(asserting)} of {len(cells)} cells assert"
    assert "```python" not in text and "```py\n" not in text
    prose = re.sub(r"^```\{code-cell\}.*?^```$", "", text, flags=re.S | re.M)
    assert len(prose.split()) >= 3 * sum(len(c.split()) for c in cells) // 10, f"{name}: too little text"


@pytest.mark.parametrize("name", NAMES)
def test_the_index_lists_every_lesson_with_its_title(name):
    """The lessons index has each lesson in its toctree and one line on it that carries its title."""
    index = (LESSONS / "index.md").read_text()
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0]
    assert name in toctree.split()
    links = re.findall(rf"^- \[(.+?)\]\({name}\.md\): \S", index, flags=re.M)
    assert links == [title((LESSONS / f"{name}.md").read_text())], name
