"""Each finding's upstream report, rendered from its folder as JAX's bug tracker takes it.

JAX's bug-report form has a title and two fields, "Description" and "System info". `render` fills them from
`findings/<id>/`: the summary, the reproducer (`repro.py`, runnable with stock JAX), what it prints there
(`stock_failure`), expected against actual, how the expected answer is known, the faulty source lines, the
patch (`fix.diff`) and the GPU/TPU note; then, outside the issue text, whether the fault is still in the
newest JAX source read and whether it is already reported (`upstream.toml`). `render_index` lists them.

    >>> finding = load("untiled-all-to-all-transpose")           # doctest: +SKIP
    >>> print(render(finding).splitlines()[0])                   # doctest: +SKIP
    # `jax.grad` of an untiled all_to_all with split_axis != concat_axis fails

Nothing here imports jax: the text is read from the folder, never computed by running it.
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
STILL_PRESENT = {"yes": "still present", "no": "fixed upstream", "unknown": "not known"}
_SOURCE_LINE = re.compile(r"jax/_src/[\w/]+\.py:\d+(-\d+)? \w+")
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
        """One line: 'still present; not reported upstream', 'fixed upstream; reported: <link>'..."""
        seen = STILL_PRESENT[self.still_present]
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


def ids(folder: Path = FOLDER) -> tuple[str, ...]:
    """The ids of the findings written up under `folder` (a sub-folder holding `finding.toml`), by number."""
    return tuple(finding.id for finding in load_all(folder))


def load_all(folder: Path = FOLDER) -> tuple[Finding, ...]:
    """Every finding written up under `folder`, ordered by FINDINGS.md number (then id)."""
    found = [load(path.parent.name, folder) for path in Path(folder).glob("*/finding.toml")]
    return tuple(sorted(found, key=lambda finding: (finding.number, finding.id)))


def load(finding_id: str, folder: Path = FOLDER) -> Finding:
    """The finding `finding_id`, read from `folder/finding_id/`.

    Raises:
        ReportError: no such finding (with the ids there are), a missing file or key, or a bad value.
    """
    where = Path(folder) / finding_id
    if not (where / "finding.toml").is_file():
        raise ReportError(f"report: finding={finding_id!r} has no {_name(where)}/finding.toml; the findings "
                          f"written up are {sorted(p.parent.name for p in Path(folder).glob('*/finding.toml'))}")
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


def render(finding: Finding) -> str:
    """The issue text of `finding` (markdown): its title, JAX's two fields, then the upstream status."""
    parts = [f"# {finding.title}", _preface(finding), "## Description", finding.summary.strip(),
             *_reproducer(finding), "### Expected and actual", f"**Expected.** {finding.expected.strip()}",
             f"**Actual.** {finding.actual.strip()}", "### How the expected answer is known",
             finding.known_by.strip(), "### Where the fault is", _sources(finding.source_lines),
             "### Proposed fix", f"The same change as a patch against JAX {JAX_VERSION} (`patch -p1` from the "
             "folder that holds `jax/`):", _fenced(finding.diff, "diff"), "### GPU and TPU",
             finding.gpu_tpu.strip(), "## System info (python version, jaxlib version, accelerator, etc.)",
             _fenced(_system(finding), "text"), "## Upstream status", *_status(finding.upstream)]
    return "\n\n".join(parts) + "\n"


def render_index(findings: tuple[Finding, ...], toctree: bool = True) -> str:
    """The list of `findings` (markdown): number, title (linking its page), JAX today, upstream report; with
    `toctree`, the site's table of contents of the pages."""
    parts = ["# Reports for JAX's tracker", _INDEX_TEXT]
    if not findings:
        return "\n\n".join([*parts, "No finding is written up yet."]) + "\n"
    rows = [f"| {f.number} | [{_cell(f.title)}]({f.id}.md) | {' | '.join(_upstream_cells(f.upstream))} |"
            for f in findings]
    parts.append("\n".join(["| # | report | JAX today | upstream |", "|---|---|---|---|", *rows]))
    if toctree:
        parts.append("\n".join(["```{toctree}", ":hidden:", "", *(f.id for f in findings), "```"]))
    return "\n\n".join(parts) + "\n"


def findings_cell(finding: Finding) -> str:
    """The cell of FINDINGS.md's table for `finding`: a link to its report page and its upstream status."""
    status = finding.upstream.status if finding.upstream else "upstream not checked"
    return f"[report](docs/findings/{finding.id}.md): {status}"


_INDEX_TEXT = ("One page per finding of {doc}`../reference/findings`, written as an issue for JAX's bug tracker: "
               "a reproducer that runs with stock JAX, expected against actual, how the expected answer is known, "
               "the faulty source lines and the patch. The pages are `meshsim report --all --out docs/findings` "
               "({doc}`../reference/report`); `tests/test_jax_reports.py` checks that they are what the command "
               "renders now, that each reproducer fails on stock JAX as its page says and passes with the fix "
               "installed, and that each patch applies to the installed JAX.")


def _preface(finding: Finding) -> str:
    return (f"Finding {finding.number} of meshsim's FINDINGS.md (`{finding.id}`), rendered by `meshsim report "
            f"{finding.id}` from `oracles/jax_fixes/findings/{finding.id}/`. To file it, give the title above "
            "as the issue's title and the sections *Description* and *System info* as the bug-report form's two "
            "fields.")


def _reproducer(finding: Finding) -> list[str]:
    """The reproducer's heading, the script and what it ends with on stock JAX."""
    devices = f", {finding.devices} virtual devices the script sets up itself" if finding.devices else ""
    return ["### Reproducer", f"A standalone script for stock JAX {JAX_VERSION} on CPU{devices}:",
            _fenced(finding.repro, "python"), f"On stock JAX {JAX_VERSION} it fails with:",
            _fenced(finding.stock_failure, "text")]


def _sources(lines: tuple[str, ...]) -> str:
    """One bullet per 'jax/_src/<file>.py:<first>-<last> <function>': the function, linked at the release tag."""
    bullets = []
    for line in lines:
        place, function = line.split(" ")
        path, span = place.split(":")
        first, _, last = span.partition("-")
        anchor = f"L{first}-L{last}" if last else f"L{first}"
        bullets.append(f"- `{function}` in `{path}`, lines {span} ([source at jax-v{JAX_VERSION}]"
                       f"(https://github.com/jax-ml/jax/blob/jax-v{JAX_VERSION}/{path}#{anchor}))")
    return "\n".join(bullets)


def _system(finding: Finding) -> str:
    devices = (f"CPU, {finding.devices} devices (XLA_FLAGS=--xla_force_host_platform_device_count={finding.devices})"
               if finding.devices else "CPU")
    return f"jax:    {JAX_VERSION}\njaxlib: {JAX_VERSION}\ndevices: {devices}"


def _status(upstream: Upstream | None) -> list[str]:
    """The upstream status, marked as no part of the issue text."""
    if upstream is None:
        return ["Not part of the issue text. Not checked yet: the folder has no `upstream.toml`."]
    return [f"Not part of the issue text. **{upstream.status[0].upper()}{upstream.status[1:]}.**",
            f"*Checked:* {upstream.checked.strip()}", f"*Reported:* {_link(upstream.reported.strip())}"]


def _upstream_cells(upstream: Upstream | None) -> tuple[str, str]:
    """The index's two cells: is the fault in the newest JAX read, and the upstream issue (or 'none found')."""
    if upstream is None:
        return "not checked", "not checked"
    reported = _link(upstream.reported) if upstream.reported.startswith("https://") else "none found"
    return STILL_PRESENT[upstream.still_present], reported


def _link(text: str) -> str:
    return f"<{text}>" if text.startswith("https://") else text


def _cell(text: str) -> str:
    """`text` inside a markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _fenced(text: str, info: str) -> str:
    """`text` in a fenced code block whose fence is longer than any run of backticks inside it."""
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


__all__ = ["FINDING_KEYS", "FOLDER", "JAX_VERSION", "STILL_PRESENT", "UPSTREAM_KEYS", "Finding", "ReportError",
           "Upstream", "findings_cell", "ids", "load", "load_all", "load_upstream", "render", "render_index"]
