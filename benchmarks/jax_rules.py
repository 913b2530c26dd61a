"""Run the differential campaign against JAX's own rules and print what it found.

`python benchmarks/jax_rules.py [--profile default|large] [--ops NAME ...]` runs `tests/campaign.py` in its
own process (8 CPU devices, the CPU ragged lowering installed before jax is imported) and prints one line
per (collective, property): examples run, disagreements explained by FINDINGS.md (by id), new ones, time.
A new disagreement is printed whole (Hypothesis's shrunk program) and the exit status is 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CAMPAIGN = Path(__file__).resolve().parents[1] / "tests" / "campaign.py"


def main(argv: list[str]) -> int:
    """Run the campaign with `argv`, print the table, return the exit status."""
    done = subprocess.run([sys.executable, str(CAMPAIGN), *argv], capture_output=True, text=True, check=False,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        return done.returncode
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:  # not a report: the campaign's own text (its --help)
        print(done.stdout, end="")
        return 0
    print(f"profile {report['profile']}: {sum(r['examples'] for r in report['rows'])} examples in "
          f"{report['seconds']} s")
    print(f"{'collective':<22}{'property':<11}{'examples':>9}  {'seconds':>8}  known findings / new")
    for row in report["rows"]:
        known = ", ".join(f"{name} x{n}" for name, n in row["known"].items()) or "-"
        print(f"{row['op']:<22}{row['kind']:<11}{row['examples']:>9}  {row['seconds']:>8}  {known}"
              f"{'  NEW: ' + str(len(row['new'])) if row['new'] else ''}")
    new = [text for row in report["rows"] for text in row["new"]]
    for text in new:
        print(f"\n{text}")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
