"""Results on disk: `results.jsonl` (one row a line, appended as each sweep point or campaign job
completes) and, for a sweep, `results.csv` (the same columns, written at the end).

A row is written as one whole line in one write, then synced to the disk (`append_row`), so a run stopped at
any moment keeps every finished row. Read back (`read_rows`), every line must be a row: a JSON object with a
"key", each field of the type its reader declares; a line that is not is refused with its line number. The
one exception is the last line when it lacks its newline: a run stopped while writing it left it cut short,
so it is left out when it does not parse and kept when it does (a whole row missing only its newline), and
`open_for_append` does the same to the file before anything more is appended: it cuts the first and ends
the second with its newline. Whole files (`results.csv`, a campaign's findings) are written to a temporary
file beside their place, synced, then renamed over it (`write_atomic`), so a reader sees the old file or
the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from scenarios._errors import ScenarioError, read_bounded
from scenarios._fields import InText

MAX_RESULTS_BYTES = 1 << 30  # a million sweep rows of about 500 bytes fit twice over
Check = Callable[[InText, dict[str, Any]], dict[str, Any]]


def read_rows(path: Path, check: Check | None = None) -> list[dict[str, Any]]:
    """The rows of the JSON-lines file at `path` (none when it does not exist), each passed through `check`.

    Args:
        path: the results file.
        check: the row's fields parsed by their declared types (see `scenarios._fields`), given where the row
            was read; it returns the row (or raises the `InText`'s error). None checks only the "key".

    Raises:
        ScenarioError: the file is not a regular file, is larger than `MAX_RESULTS_BYTES` or cannot be read;
            a line (but a last one cut short) is not a JSON object with a string "key"; a field breaks
            `check`'s rule. The message gives the file, the line number and the rule.
    """
    lines = _read(path).split(b"\n")
    whole, tail = lines[:-1], lines[-1]
    rows = []
    for number, line in enumerate(whole, 1):
        row = _row(line)
        if row is None:
            raise ScenarioError(f"{path}:{number}: not a result (a JSON object with a string \"key\"): "
                                f"{line[:80]!r}; repair or delete the line, or write to another -o DIR")
        rows.append(_checked(path, number, row, check))
    row = _row(tail) if tail else None
    if row is not None:  # a whole row that lacks only its newline; open_for_append adds it
        rows.append(_checked(path, len(whole) + 1, row, check))
    return rows


def open_for_append(path: Path) -> BinaryIO:
    """`path` opened for appending rows (created with its directory when missing), after ending a last line
    without its newline: a whole row gets its newline, a line cut short is cut off (the rule `read_rows` reads by).

    Raises:
        ScenarioError: the file is not a regular file, or the directory or file cannot be created or written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read(path)
        if data and not data.endswith(b"\n"):
            start = data.rfind(b"\n") + 1
            if _row(data[start:]) is None:
                os.truncate(path, start)
            else:
                with path.open("ab") as stream:
                    stream.write(b"\n")
        return path.open("ab", buffering=0)
    except OSError as error:
        raise ScenarioError(f"{path}: cannot write the results file: {error.strerror or error}") from None


def append_row(stream: BinaryIO, row: dict[str, Any]) -> None:
    """Write `row` as one JSON line in one write to `stream` (from `open_for_append`), then sync it to disk.

    Raises:
        ScenarioError: the line cannot be written (a full disk, a closed file).
    """
    line = memoryview((json.dumps(_finite(row), separators=(", ", ": ")) + "\n").encode("utf-8"))
    try:
        while line:
            written = stream.write(line)
            if not written:
                raise OSError("the file took no bytes")
            line = line[written:]
        stream.flush()
        os.fsync(stream.fileno())
    except (OSError, ValueError) as error:
        raise ScenarioError(f"{getattr(stream, 'name', 'results file')}: cannot write the results file: "
                            f"{getattr(error, 'strerror', None) or error}") from None


def write_csv(path: Path, rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> None:
    """`rows` as CSV at `path` (`write_atomic`): a header of `columns`, then one line a row (None as empty).

    Raises:
        ScenarioError: the file cannot be written.
    """
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, text.getvalue())


def write_atomic(path: Path, text: str) -> None:
    """`text` (UTF-8) as the whole of `path`: written to a new file beside it, synced, then renamed over it.

    Raises:
        ScenarioError: the file cannot be written (the temporary file is removed).
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(text.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise ScenarioError(f"{path}: cannot write the file: {error.strerror or error}") from None


def _read(path: Path) -> bytes:
    """The bytes of the results file at `path` (b'' when nothing is there): `read_bounded`, at most
    `MAX_RESULTS_BYTES`."""
    try:
        return read_bounded(path, "results", MAX_RESULTS_BYTES, "give another -o DIR")
    except FileNotFoundError:
        return b""


def _row(line: bytes) -> dict[str, Any] | None:
    """The JSON object `line` holds when it has a string "key", else None (bad UTF-8, bad JSON, too deep)."""
    try:
        row = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return row if isinstance(row, dict) and isinstance(row.get("key"), str) else None


def _checked(path: Path, number: int, row: dict[str, Any], check: Check | None) -> dict[str, Any]:
    """`row` passed through `check`, its error saying which line to repair."""
    if check is None:
        return row
    try:
        return check(InText(str(path), "", "key", "results row: ", number), row)
    except ScenarioError as error:
        raise ScenarioError(f"{error}; repair or delete the line, or write to another -o DIR") from None


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with any infinite or NaN number as None, since JSON has no such numbers."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
