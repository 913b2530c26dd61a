"""Line and branch coverage of each JAX rule function, read from a coverage.py data file.

`measure(data_file, rules)` returns one `Covered` per rule function (the registrations that share a
function are one row: `_allreduce_lowering` lowers psum, pmax and pmin): its statements and branches, how
many ran, and the lines that did not, as ranges. A function's own lines are coverage.py's function region
(its nested functions are rows of their own); a `lambda` has no region and counts as one line, run when the
data file records an entry into it.

For example `Covered("_psum_transpose_rule", "parallel.py", 1031, ("psum transpose",), 9, 9, 2, 2, "")`
is a transpose rule every line and branch of which ran.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks._jax_rules_found import Rule, jax_sources


@dataclass(frozen=True)
class Covered:
    """One rule function's coverage: lines and branches run of all, and the lines never run."""

    function: str
    file: str
    first_line: int
    registered: tuple[str, ...]  # "psum lowering", ...
    lines_run: int
    lines: int
    branches_run: int
    branches: int
    missing: str  # "1126, 1128, 1131-1141"
    partial: str = ""  # branches not taken from lines that ran: "1125->1126, 1880->exit"

    @property
    def complete(self) -> bool:
        return self.lines_run == self.lines and self.branches_run == self.branches


def ranges(numbers: Iterable[int]) -> str:
    """Sorted line numbers as ranges: [3, 4, 5, 9] -> '3-5, 9'."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def partial_branches(region: dict) -> str:
    """The branches not taken whose target line is not itself unreached (those the line list does not show)."""
    missing = set(region["missing_lines"])
    arcs = [(a, b) for a, b in region["missing_branches"] if b not in missing]
    return ", ".join(f"{a}->{b if b > 0 else 'exit'}" for a, b in arcs)


def _report(data_file: Path) -> tuple[dict[str, dict], dict[str, set[int]]]:
    """coverage.py's JSON report of the two files, by short name, and the code objects each file entered."""
    import coverage

    cov = coverage.Coverage(data_file=str(data_file), branch=True)
    cov.load()
    sources = jax_sources()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cov.json_report(morfs=[str(p) for p in sources.values()], outfile=str(out))
        files = json.loads(out.read_text())["files"]
    by_name = {Path(path).name: record for path, record in files.items()}
    data = cov.get_data()
    entered = {}
    for name, path in sources.items():
        arcs = data.arcs(str(path)) or []
        entered[name] = {-a for a, _ in arcs if a < 0}
    return by_name, entered


def measure(data_file: Path, rules: Sequence[Rule]) -> list[Covered]:
    """One row per rule function, in the order the rules are given."""
    report, entered = _report(data_file)
    grouped: dict[tuple[str, str, int], list[Rule]] = {}
    for rule in rules:
        grouped.setdefault((rule.file, rule.function, rule.first_line), []).append(rule)
    rows = []
    for (file, function, first), same in grouped.items():
        registered = tuple(f"{r.primitive} {r.kind}" for r in same)
        region = report.get(file, {}).get("functions", {}).get(function.replace(".<locals>.", "."))
        if function.endswith("<lambda>") or region is None:
            ran = int(first in entered.get(file, set()))
            rows.append(Covered(function, file, first, registered, ran, 1, 0, 0, "" if ran else str(first)))
            continue
        s = region["summary"]
        rows.append(Covered(function, file, first, registered, s["covered_lines"], s["num_statements"],
                            s["covered_branches"], s["num_branches"], ranges(region["missing_lines"]),
                            partial_branches(region)))
    return rows


def file_totals(data_file: Path) -> dict[str, dict[str, int]]:
    """Each file's statements and branches, and how many ran."""
    report, _ = _report(data_file)
    return {name: {k: r["summary"][k] for k in ("covered_lines", "num_statements", "covered_branches",
                                                 "num_branches")} for name, r in report.items()}
