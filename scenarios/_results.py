"""Results on disk: `results.jsonl` (one row a line, appended as each sweep point or campaign job
completes) and, for a sweep, `results.csv` (the same columns, written at the end).

A row is written whole and flushed as soon as it arrives, so a sweep stopped at any moment keeps every
finished point; a line cut short by the stop is dropped when the file is read back (`read_rows`) and
removed before anything more is appended (`open_for_append`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from scenarios._errors import ScenarioError


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of the JSON-lines file at `path` (none when it does not exist), a cut-off last line left out.

    Raises:
        ScenarioError: the file cannot be read, or a line before the last is not a JSON object with a "key".
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{path}: cannot read the results file: {getattr(error, 'strerror', None) or error}") \
            from None
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "key" not in row:
                raise ValueError("not a row")
        except ValueError:
            if number == len(lines):
                break  # the last line of a run that was stopped while writing it
            raise ScenarioError(f"{path}:{number}: not a result (a JSON object with a \"key\"): "
                                f"{line[:80]!r}; write to another -o DIR or repair the file") from None
        rows.append(row)
    return rows


def open_for_append(path: Path) -> TextIO:
    """`path` opened for appending rows, after cutting off a last line left unfinished (no newline).

    Raises:
        ScenarioError: the directory or file cannot be created or written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                path.write_bytes(data[:data.rfind(b"\n") + 1])
        return path.open("a", encoding="utf-8")
    except OSError as error:
        raise ScenarioError(f"{path}: cannot write the results file: {error.strerror}") from None


def append_row(stream: TextIO, row: dict[str, Any]) -> None:
    """Write `row` as one JSON line and flush it to the file at once."""
    stream.write(json.dumps(_finite(row), separators=(", ", ": ")) + "\n")
    stream.flush()


def write_csv(path: Path, rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> None:
    """`rows` as CSV at `path`: a header of `columns`, then one line a row (None as an empty field).

    Raises:
        ScenarioError: the file cannot be written.
    """
    try:
        with path.open("w", encoding="utf-8", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(columns), extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    except OSError as error:
        raise ScenarioError(f"{path}: cannot write the results file: {error.strerror}") from None


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with any infinite or NaN number as None, since JSON has no such numbers."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
