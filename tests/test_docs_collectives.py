"""docs/collectives/: a page for every registered collective, each with its sections, an executed example through
`sim.shard_map`, an executed error, its algorithms and the picture of a library scenario of it; the index links
every page and the algorithms page names every algorithm.

The pages' cells run in the docs build (`tests/test_docs_site.py`, where a raising cell fails it); these tests
read the sources, so a page that loses a part fails here by name, without a build.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

import collectives

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "collectives"
LIBRARY = ROOT / "scenarios" / "library"
NAMES = list(collectives.REGISTRY)
SECTIONS = ("## Semantics", "## Example", "## Undefined and invalid cases", "## Algorithms", "## Picture")
FRONT_MATTER = "---\nfile_format: mystnb\nkernelspec:\n  name: python3\n---\n"


def _cells(text: str) -> list[str]:
    """The sources of the executed cells of a MyST notebook page."""
    return re.findall(r"^```\{code-cell\} ipython3\n(.*?)^```", text, re.S | re.M)


def _page(name: str) -> str:
    path = PAGES / f"{name}.md"
    assert path.exists(), f"collective {name!r} is registered but has no page {path.relative_to(ROOT)}"
    return path.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The text of the section under `heading`, up to the next heading of its level."""
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start:] if following < 0 else text[start:following]


def _op(scenario: str) -> str:
    return tomllib.loads((LIBRARY / f"{scenario}.toml").read_text(encoding="utf-8"))["collective"]["op"]


def test_every_page_is_a_registered_collective_or_the_overview():
    """No page outlives its collective: each page is a registered name, the index or the algorithms page."""
    pages = {path.stem for path in PAGES.glob("*.md")}
    assert pages - set(NAMES) == {"index", "algorithms"}


@pytest.mark.parametrize("name", NAMES)
def test_page_is_an_executed_notebook_with_every_section(name):
    """The page runs its cells (myst-nb's front matter), names its collective and has every section."""
    text = _page(name)
    assert text.startswith(FRONT_MATTER), f"{name}.md must open with the MyST notebook front matter"
    assert f"\n# {name}\n" in text
    missing = [heading for heading in SECTIONS if heading not in text]
    assert not missing, f"{name}.md lacks {missing}"
    assert f"collectives.{name}(" in text, f"{name}.md must give meshsim's signature, collectives.{name}(...)"


@pytest.mark.parametrize("name", NAMES)
def test_page_runs_an_example_through_shard_map_and_shows_its_output(name):
    """The Example section has a code cell that calls the collective inside `sim.shard_map` and prints."""
    cells = _cells(_section(_page(name), "## Example"))
    shown = [c for c in cells if "sim.shard_map(" in c and f"collectives.{name}(" in c and "print(" in c]
    assert shown, f"{name}.md: the Example section needs a code cell calling collectives.{name} in sim.shard_map " \
                  f"and printing its output"


@pytest.mark.parametrize("name", NAMES)
def test_page_shows_an_error_meshsim_reports(name):
    """The undefined-cases section runs a call meshsim refuses and prints the message."""
    cells = _cells(_section(_page(name), "## Undefined and invalid cases"))
    assert any(re.search(r"except \(?sim\.", c) and "print(error)" in c for c in cells), \
        f"{name}.md: the undefined-cases section needs a cell that catches meshsim's error and prints it"


@pytest.mark.parametrize("name", NAMES)
def test_page_tabulates_its_algorithms_from_the_registry(name):
    """The Algorithms section shows the table `_show.algorithms` reads from the collective's own records."""
    cells = _cells(_section(_page(name), "## Algorithms"))
    assert any(f'_show.algorithms("{name}")' in c for c in cells), \
        f'{name}.md: the Algorithms section needs a cell with _show.algorithms("{name}")'


@pytest.mark.parametrize("name", NAMES)
def test_page_draws_a_library_scenario_of_its_collective(name):
    """The Picture section draws, at build time, a scenario of scenarios/library/ whose op is this collective."""
    drawn = [m for c in _cells(_section(_page(name), "## Picture")) for m in re.findall(r'_show\.draw\("(\w+)"\)', c)]
    assert drawn, f"{name}.md: the Picture section needs a cell with _show.draw(\"<library scenario>\")"
    for scenario in drawn:
        assert (LIBRARY / f"{scenario}.toml").exists(), f"{name}.md draws {scenario!r}, not in scenarios/library/"
        assert _op(scenario) == name, f"{name}.md draws {scenario!r}, a scenario of {_op(scenario)!r}"


def test_index_links_and_lists_every_page():
    """The index's table links every collective's page, and its toctree holds every page."""
    text = (PAGES / "index.md").read_text(encoding="utf-8")
    toctree = re.search(r"```\{toctree\}\n(.*?)```", text, re.S).group(1).split()
    for name in NAMES:
        assert f"[{name}]({name}.md)" in text, f"index.md does not link {name}.md"
        assert name in toctree, f"index.md's toctree does not list {name}"
    assert "algorithms" in toctree


def test_algorithms_page_names_every_algorithm_and_runs_a_comparison():
    """Every algorithm any collective has is described on the algorithms page, which times psum's."""
    text = (PAGES / "algorithms.md").read_text(encoding="utf-8")
    assert text.startswith(FRONT_MATTER)
    names = {a.name for d in collectives.REGISTRY.values() for a in d.algorithms}
    described = set(re.findall(r"^\*\*(\w+)", text, re.M)) | {"auto"}
    assert names <= described, f"algorithms.md describes no {sorted(names - described)}"
    assert any("sim.shard_map(" in c and "end_time_s" in c for c in _cells(text))


def _show():
    """docs/collectives/_show.py, imported by path as the pages import it."""
    pytest.importorskip("IPython")
    spec = importlib.util.spec_from_file_location("_show", PAGES / "_show.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_show_draws_the_svg_of_meshsim_draw():
    """`_show.draw` is the picture `meshsim draw` writes for the scenario: an SVG with the call in its title."""
    picture = _show().draw("psum_ring")
    assert picture.data.lstrip().startswith("<svg") and "psum" in picture.data


@pytest.mark.parametrize("name", ["psum", "ragged_all_to_all", "pbroadcast", "axis_size"])
def test_show_tabulates_every_algorithm_record(name):
    """`_show.algorithms` has one row per `Algorithm` record of the collective, in the registry's order."""
    table = _show().algorithms(name).data
    rows = re.findall(r"<tr><td><code>(\w+)</code>", table)
    assert rows == [a.name for a in collectives.definition(name).algorithms]
