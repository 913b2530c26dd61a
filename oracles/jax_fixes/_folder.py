"""A finding's folder, read and checked: `findings/<id>/` holds `finding.toml` (the report's text),
`repro.py`, `fix.diff` and `upstream.toml` (is the fault still upstream, is it reported).

    >>> finding = load("untiled-all-to-all-transpose")     # doctest: +SKIP
    >>> finding.number, finding.upstream.still_present      # doctest: +SKIP
    (6, 'yes')

A folder that holds only its `upstream.toml` is `Pending`: checked upstream, its report not written yet.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sim

JAX_VERSION = "0.10.2"
"""The JAX release every reproducer and diff is written against (jax and jaxlib alike)."""

FOLDER = Path(__file__).resolve().parent / "findings"

FINDING_KEYS = ("number", "title", "summary", "expected", "actual", "known_by", "source_lines", "stock_failure",
                "gpu_tpu")
UPSTREAM_KEYS = ("still_present", "checked", "reported")
STILL_PRESENT = {"yes": "still present", "no": "fixed", "unknown": "unknown"}
"""`still_present`'s values, each with the word the list of findings shows for it."""
_SEEN = {"yes": "still present in the newest JAX source read", "no": "fixed in the newest JAX source read",
         "unknown": "not checked against the newest JAX source"}
_SOURCE_LINE = re.compile(r"jax/_src/[\w/]+\.py:\d+(-\d+)? [\w.]+")  # a nested function as outer.inner
_DEVICES = re.compile(r"xla_force_host_platform_device_count=(\d+)")


class ReportError(sim.InvalidArgumentError):
    """A finding's folder is missing a file or a key, or holds a value its format does not allow."""


@dataclass(frozen=True)
class Upstream:
    """`upstream.toml`: is the fault still in the newest JAX source read, how that was checked, is it reported.

    `reported` is the upstream issue's address (`https://...`) or `not found: ` and what was searched."""

    still_present: str
    checked: str
    reported: str

    @property
    def status(self) -> str:
        """One line, e.g. 'still present in the newest JAX source read; not reported upstream'."""
        seen = _SEEN[self.still_present]
        told = f"reported: <{self.reported}>" if self.reported.startswith("https://") else "not reported upstream"
        return f"{seen}; {told}"


@dataclass(frozen=True)
class Finding:
    """One finding's folder, read: `finding.toml`'s keys, the reproducer and diff texts, `upstream.toml`."""

    id: str
    number: int
    title: str
    summary: str
    expected: str
    actual: str
    known_by: str
    source_lines: tuple[str, ...]
    stock_failure: str
    gpu_tpu: str
    repro: str
    diff: str
    upstream: Upstream | None

    @property
    def devices(self) -> int | None:
        """How many CPU devices the reproducer asks XLA for (its `XLA_FLAGS`), or None if it sets none."""
        found = _DEVICES.search(self.repro)
        return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Pending:
    """A finding whose folder holds only its `upstream.toml`: checked upstream, its report not written yet."""

    id: str
    upstream: Upstream


def ids(folder: Path | None = None) -> tuple[str, ...]:
    """The ids of the findings under `folder` (default `FOLDER`): its sub-folders holding a `finding.toml` or an
    `upstream.toml` (a finding checked upstream but not written up yet), sorted."""
    found = {path.parent.name for name in ("finding.toml", "upstream.toml")
             for path in Path(folder or FOLDER).glob(f"*/{name}")}
    return tuple(sorted(found))


def load_all(folder: Path | None = None) -> tuple[Finding | Pending, ...]:
    """Every finding under `folder` (default `FOLDER`): those written up by FINDINGS.md number (then id), then
    the pending ones by id."""
    found = [load(finding_id, folder) for finding_id in ids(folder)]
    return tuple(sorted(found, key=lambda item: (isinstance(item, Pending), getattr(item, "number", 0), item.id)))


def load(finding_id: str, folder: Path | None = None) -> Finding | Pending:
    """The finding `finding_id`, read from `folder/finding_id/` (default `FOLDER`): a `Finding`, or a `Pending`
    where the folder holds only its `upstream.toml`.

    Raises:
        ReportError: no such finding (with the ids there are), a missing file or key, or a bad value.
    """
    where = Path(folder or FOLDER) / finding_id
    if not (where / "finding.toml").is_file():
        if (where / "upstream.toml").is_file():
            return Pending(id=finding_id, upstream=load_upstream(where / "upstream.toml"))
        raise ReportError(f"report: finding={finding_id!r} has no folder {_name(where)}; the findings are "
                          f"{list(ids(folder))}")
    keys = _table(where / "finding.toml", FINDING_KEYS)
    _check_finding(where, keys)
    upstream = load_upstream(where / "upstream.toml") if (where / "upstream.toml").is_file() else None
    texts = {name: _text(where / name) for name in ("repro.py", "fix.diff")}
    return Finding(id=finding_id, **{key: keys[key] for key in FINDING_KEYS if key != "source_lines"},
                   source_lines=tuple(keys["source_lines"]), repro=texts["repro.py"], diff=texts["fix.diff"],
                   upstream=upstream)


def load_upstream(path: Path) -> Upstream:
    """An `upstream.toml`, checked: `still_present` one of yes/no/unknown, `reported` a link or `not found: ...`.

    Raises:
        ReportError: a missing key or a value outside those rules, naming the file, the key and the value.
    """
    keys = _table(path, UPSTREAM_KEYS)
    if keys["still_present"] not in STILL_PRESENT:
        raise ReportError(f"{_name(path)}: still_present={keys['still_present']!r} must be one of "
                          f"{sorted(STILL_PRESENT)}")
    if not keys["reported"].startswith(("https://", "not found: ")):
        raise ReportError(f"{_name(path)}: reported={keys['reported']!r} must be an issue's address (https://...) "
                          "or start with 'not found: ' and say what was searched")
    return Upstream(**{key: keys[key] for key in UPSTREAM_KEYS})


def _table(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """The TOML table at `path`, which must hold every one of `keys`, each a non-empty value."""
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ReportError(f"{_name(path)}: not TOML: {error}") from None
    missing = [key for key in keys if key not in table or table[key] in ("", [])]
    if missing:
        raise ReportError(f"{_name(path)}: keys {missing} are missing or empty; it must give {list(keys)}")
    strings = [key for key in keys if key not in ("number", "source_lines") and not isinstance(table[key], str)]
    if strings:
        raise ReportError(f"{_name(path)}: {', '.join(f'{k}={table[k]!r}' for k in strings)} must be text")
    return table


def _check_finding(where: Path, keys: dict[str, Any]) -> None:
    """`number` a positive integer, each `source_lines` entry 'jax/_src/<file>.py:<first>-<last> <function>'."""
    number = keys["number"]
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise ReportError(f"{_name(where)}/finding.toml: number={number!r} must be a positive integer, "
                          "its FINDINGS.md entry")
    lines = keys["source_lines"]
    bad = [line for line in lines if not isinstance(line, str) or not _SOURCE_LINE.fullmatch(line)] \
        if isinstance(lines, list) else [lines]
    if bad:
        raise ReportError(f"{_name(where)}/finding.toml: source_lines={bad!r} must each read "
                          "'jax/_src/<file>.py:<first>-<last> <function>'")


def _text(path: Path) -> str:
    """The file at `path` (one of a finding's required files)."""
    if not path.is_file():
        raise ReportError(f"{_name(path.parent)}: {path.name} is missing; a finding's folder holds finding.toml, "
                          "repro.py and fix.diff (and upstream.toml)")
    return path.read_text()


def _name(path: Path) -> str:
    """`path` from the `findings` folder on ('findings/<id>/upstream.toml'), for messages."""
    path = Path(path)
    return "/".join(path.parts[-3:] if path.suffix else path.parts[-2:])


__all__ = ["FINDING_KEYS", "FOLDER", "JAX_VERSION", "STILL_PRESENT", "UPSTREAM_KEYS", "Finding", "Pending",
           "ReportError", "Upstream", "ids", "load", "load_all", "load_upstream"]
