"""How much of JAX's collective rules the rules campaign runs: line and branch coverage per rule function.

    python benchmarks/jax_coverage.py                       # the default profile (what `make test` runs)
    python benchmarks/jax_coverage.py --profile wide --kinds transpose vmap   # BENCHMARKS.md's table
    python benchmarks/jax_coverage.py --ops psum ppermute   # a few collectives only
    python benchmarks/jax_coverage.py --data run.cov        # re-read a data file kept with --keep
    python benchmarks/jax_coverage.py --markdown            # the table as BENCHMARKS.md holds it
    python benchmarks/jax_coverage.py --json rows.json      # also the rows as JSON

Runs `tests/campaign.py --profile P` (8 CPU devices, its own process) under coverage.py with branch
measurement, restricted to `jax/_src/lax/parallel.py` and `jax/_src/shard_map.py`, then reads JAX's own
registries for the rule functions of each collective primitive (abstract evaluation, JVP, transpose,
batching, lowering) and shard_map's, each with the private helpers it calls
(`benchmarks._jax_rules_found`), and prints for each function the lines and branches that ran, the lines
that did not, and why they cannot or do not yet run (`benchmarks._jax_coverage_reasons`). Rows are grouped
as the campaign reaches them: collectives meshsim models, shard_map, then primitives outside meshsim's
model (reduced and unreduced types, the asynchronous start/done pairs), which no campaign program binds.
Exits 1 if the campaign met a disagreement no finding explains.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from benchmarks._jax_coverage_reasons import reason
from benchmarks._jax_coverage_table import Covered, file_totals, measure
from benchmarks._jax_rules_found import jax_sources, rule_functions

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGN = ROOT / "tests" / "campaign.py"
OUTSIDE = "outside meshsim's model"


def run_campaign(data_file: Path, argv: list[str]) -> dict[str, Any]:
    """`tests/campaign.py *argv` under coverage.py (branches on, the two JAX files only); its JSON report."""
    include = ",".join(str(p) for p in jax_sources().values())
    command = [sys.executable, "-m", "coverage", "run", "--branch", f"--data-file={data_file}",
               f"--include={include}", str(CAMPAIGN), *argv]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    if done.returncode != 0:
        raise SystemExit(f"the campaign failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def modelled_primitives() -> set[str]:
    """The JAX primitives of the collectives meshsim registers (what campaign programs bind), and shard_map."""
    import collectives

    return {p for d in collectives.REGISTRY.values() for p in d.jax.primitives} | {"shard_map"}


def groups(rows: list[Covered]) -> dict[str, list[Covered]]:
    """The rows as the campaign reaches them: modelled collectives, shard_map, the rest."""
    modelled = modelled_primitives()
    out: dict[str, list[Covered]] = {"collectives meshsim models": [], "shard_map": [], OUTSIDE: []}
    for row in rows:
        prims = {r.split(" ")[0] for r in row.registered}
        key = ("shard_map" if prims == {"shard_map"} else "collectives meshsim models" if prims & modelled
               else OUTSIDE)
        out[key].append(row)
    return out


def _percent(run: int, of: int) -> str:
    return f"{run}/{of}" if of else "-"


def name(row: Covered) -> str:
    """The function's name; a lambda's with its line."""
    return f"<lambda>:{row.first_line}" if row.function.endswith("<lambda>") else row.function


def unreached(row: Covered) -> str:
    """The unreached lines, then the branches not taken from lines that ran."""
    parts = [p for p in (row.missing, row.partial and f"branches {row.partial}") if p]
    return "; ".join(parts) or "-"


def lines_of(row: Covered) -> set[int]:
    """The unreached lines and the lines of the branches not taken, as numbers."""
    found = set()
    for first, last in re.findall(r"(\d+)(?:-(\d+))?", row.missing):
        found.update(range(int(first), int(last or first) + 1))
    found.update(int(a) for a in re.findall(r"(\d+)->", row.partial))
    return found


def text_table(title: str, rows: list[Covered]) -> list[str]:
    modelled = not title.startswith(OUTSIDE)
    lines = [f"\n{title}", f"{'function':<46}{'lines':>8}{'branches':>10}  unreached lines / why"]
    for row in rows:
        why = "" if row.complete else f"  ({reason(name(row), lines_of(row), modelled)})"
        lines.append(f"{name(row):<46}{_percent(row.lines_run, row.lines):>8}"
                     f"{_percent(row.branches_run, row.branches):>10}  {unreached(row)}{why}")
    return lines


def markdown_table(title: str, rows: list[Covered]) -> list[str]:
    modelled = not title.startswith(OUTSIDE)
    lines = [f"\n**{title}**\n", "| function | registered as | lines | branches | unreached lines | why |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        registered = ", ".join(row.registered)
        lines.append(f"| `{name(row)}` ({row.file}:{row.first_line}) | {registered} | "
                     f"{_percent(row.lines_run, row.lines)} | {_percent(row.branches_run, row.branches)} | "
                     f"{unreached(row)} | {'' if row.complete else reason(name(row), lines_of(row), modelled)} |")
    return lines


def summary(rows: list[Covered]) -> str:
    lines = sum(r.lines for r in rows)
    branches = sum(r.branches for r in rows)
    return (f"{sum(r.lines_run for r in rows)}/{lines} lines, {sum(r.branches_run for r in rows)}/{branches} "
            f"branches, {sum(r.complete for r in rows)}/{len(rows)} functions whole")


def main(argv: list[str]) -> int:
    """Parse the command line, run (or re-read) the measurement, print the tables, return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default", help="tests/campaign.py's profile (default, wide, large)")
    parser.add_argument("--ops", nargs="*", help="only these collectives")
    parser.add_argument("--kinds", nargs="*", help="only these kinds of the campaign (default: all of them)")
    parser.add_argument("--data", type=Path, help="read this coverage data file instead of running the campaign")
    parser.add_argument("--keep", type=Path, help="keep the coverage data file here")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument("--json", type=Path, help="also write the rows and totals here as JSON")
    options = parser.parse_args(argv)
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = options.data or options.keep or Path(tmp) / "campaign.cov"
        start = time.perf_counter()
        if options.data is None:
            report = run_campaign(data, ["--profile", options.profile,
                                         *(["--ops", *options.ops] if options.ops else []),
                                         *(["--kinds", *options.kinds] if options.kinds else [])])
        wall = time.perf_counter() - start
        rows = measure(data, rule_functions())
        totals = file_totals(data)
    new = [text for row in report.get("rows", []) for text in row["new"]]
    if options.json:
        options.json.write_text(json.dumps({"totals": totals, "new": new, "rows": [
            {**dataclasses.asdict(r), "group": g} for g, members in groups(rows).items() for r in members]}))
    if report:
        print(f"profile {report['profile']}: {sum(r['examples'] for r in report['rows'])} programs; the campaign "
              f"{report['seconds']} s, with coverage and start-up {wall:.0f} s; {len(new)} new disagreements")
    for name, t in totals.items():
        print(f"{name}: {t['covered_lines']}/{t['num_statements']} lines, "
              f"{t['covered_branches']}/{t['num_branches']} branches run (the whole file)")
    render = markdown_table if options.markdown else text_table
    for title, members in groups(rows).items():
        print("\n".join(render(f"{title}: {summary(members)}", members)))
    for text in new:
        print(f"\n{text}")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
