"""The API reference (docs/api/) documents every public name of the packages, each object once."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
PACKAGES = ("layouts", "sim", "sim.record", "sim.network", "sim.memory", "sim.engine", "sim.program", "collectives",
            "oracles", "scenarios", "scenarios.picture", "scenarios.sweep", "scenarios.campaign", "scenarios.fleet",
            "scenarios.cli")
DIRECTIVE = re.compile(r"^\.\. auto(?:class|exception|function|data|module):: (\S+)$", re.MULTILINE)
ALIAS = re.compile(r"^\| `(\S+)` \| \{py:obj\}`(\S+)` \|$", re.MULTILINE)


def resolve(qualified: str) -> object:
    """The object a dotted public name stands for: a module, or an attribute of the longest importable prefix."""
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        return target
    raise ImportError(qualified)


def identity(name: str) -> tuple:
    """What `name` stands for: its object (constants: also their name, as small values are shared)."""
    found = resolve(name)
    if isinstance(found, (type, types.FunctionType, types.ModuleType)):
        return (id(found),)
    return id(found), name.rsplit(".", 1)[1]


def same(a: str, b: str) -> bool:
    """Two public names stand for one object."""
    return identity(a) == identity(b)


def read_pages(pages: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The names the pages document with an autodoc directive, and the other names they list, with targets."""
    documented = [name for text in pages.values() for name in DIRECTIVE.findall(text)]
    aliases = {name: target for text in pages.values() for name, target in ALIAS.findall(text)}
    return documented, aliases


def missing(pages: dict[str, str]) -> list[str]:
    """Every `package.name` of the packages' `__all__` that the pages neither document nor list as another's."""
    documented, aliases = read_pages(pages)
    absent = []
    for package in PACKAGES:
        for name in importlib.import_module(package).__all__:
            qualified = f"{package}.{name}"
            if qualified in documented:
                continue
            target = aliases.get(qualified)
            if target is None or target not in documented or not same(qualified, target):
                absent.append(qualified)
    return absent


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(API.glob("*.md"))}


def test_every_public_name_is_in_the_api_reference(pages):
    """Each name in the `__all__` of layouts, sim (and its rooms), collectives, oracles and scenarios (and its
    rooms) is documented by an autodoc directive, or listed beside the directive of the same object."""
    assert missing(pages) == []


def test_each_object_is_documented_once(pages):
    """No two autodoc directives document one object (Sphinx would index it twice, under two names)."""
    documented, _ = read_pages(pages)
    assert len(documented) == len(set(documented))
    names: dict[tuple, list[str]] = {}
    for name in documented:
        names.setdefault(identity(name), []).append(name)
    assert [group for group in names.values() if len(group) > 1] == []


def test_every_page_is_in_the_api_index(pages):
    """Every page of docs/api/ is in the toctree of docs/api/index.md, so the site links to it."""
    index = pages["index.md"]
    assert [name for name in pages if name != "index.md" and f"\n{name[:-3]}\n" not in index] == []


def test_a_name_left_out_is_reported(pages):
    """The check fails when a page loses a directive, or when a listed name points at another object."""
    cut = {name: text.replace(".. autofunction:: sim.shard_map\n", "") for name, text in pages.items()}
    assert missing(cut) == ["sim.shard_map", "sim.program.shard_map"]
    wrong = {name: text.replace("| `collectives.psum2` | {py:obj}`collectives.psum_invariant` |",
                                "| `collectives.psum2` | {py:obj}`collectives.psum` |") for name, text in pages.items()}
    assert missing(wrong) == ["collectives.psum2"]
