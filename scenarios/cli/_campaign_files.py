"""A campaign's directory: results.jsonl (one job's record a line, appended as it arrives) and findings/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import collectives
from scenarios import ScenarioError, append_row, open_for_append, read_rows
from scenarios import _fields as fields
from scenarios._fields import Where
from scenarios._results import write_atomic
from scenarios.campaign import KINDS


class Results:
    """The results file of a campaign in `folder` and the findings saved beside it.

    `done` maps each job key in the file to its record; `added` holds the keys written by this run.
    Without `resume`, a results file that already exists is refused (a campaign never overwrites
    another's results); with it, its records count as done, each checked field by field (`check_record`).
    The file is read and written as a sweep's (`scenarios._results`): a last line cut short (a run killed
    while writing it) is dropped, so its job runs again; a whole last row lacking only its newline is kept.
    """

    def __init__(self, folder: Path, resume: bool) -> None:
        self.path = folder / "results.jsonl"
        self.findings = folder / "findings"
        if self.path.exists() and not resume:
            raise ScenarioError(f"-o {folder}: {self.path} already holds a campaign's results; add --resume to "
                                f"continue it, or give another -o DIR")
        try:
            self.findings.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ScenarioError(f"-o {folder}: cannot create {self.findings}: {error.strerror or error}") from None
        self.done: dict[str, dict[str, Any]] = {record["key"]: record for record in read_rows(self.path,
                                                                                              check_record)}
        if self.path.exists():
            open_for_append(self.path).close()  # ends the file on a whole line, as read_rows read it
        self.added: set[str] = set()

    def add(self, key: str, record: dict[str, Any]) -> None:
        """Save `record` of job `key`: each finding's file in findings/ (whole, by rename), then one line in the
        results file (whole, synced).

        Raises:
            ScenarioError: a finding's name is not a plain file name, or a file cannot be written.
        """
        kept = dict(record, key=key, findings=[])
        for found in record["findings"]:
            name = fields.file_name(fields.InText(str(self.findings), "", "name", "finding: "), found["name"])
            write_atomic(self.findings / name, found["scenario"])
            kept["findings"].append({k: v for k, v in found.items() if k != "scenario"})
        try:
            stream = self.path.open("ab", buffering=0)  # ends on a whole line: __init__ saw to it
        except OSError as error:
            raise ScenarioError(f"{self.path}: cannot write the results file: {error.strerror or error}") from None
        with stream:
            append_row(stream, kept)
        self.done[key] = kept
        self.added.add(key)


def check_record(where: Where, record: dict[str, Any]) -> dict[str, Any]:
    """A job's record read back from results.jsonl, field by field: `op` a registered collective and `kind`
    one of `KINDS`, both the ones its key names; counts non-negative integers, `agree` at most `cases`;
    `known` a table of counts; `findings` a list of {name, replay, differences}; times finite numbers.

    Raises:
        ScenarioError: the first field that breaks its rule, as `field=value must be ...` at `where`.
    """
    op = fields.string(where.at("op"), record.get("op"), tuple(collectives.REGISTRY))
    kind = fields.string(where.at("kind"), record.get("kind", "forward"), tuple(KINDS))
    prefix = f"{op}{'' if kind == 'forward' else '-' + kind}-seed"
    if not record["key"].startswith(prefix):
        raise where.error(f"key={fields.shown(record['key'])} must name the record's op and kind: start with "
                          f"{prefix!r}")
    cases = fields.integer(where.at("cases"), record.get("cases"), minimum=0)
    fields.integer(where.at("agree"), record.get("agree"), 0, cases)
    known = fields.table(where.at("known"), record.get("known", {}))
    for name, count in known.items():
        fields.integer(where.at(f"known[{name!r}]"), count, minimum=0)
    fields.list_of(where.at("findings"), record.get("findings"), _finding, "findings")
    for key in ("seconds", "cpu_seconds"):
        fields.optional(fields.number)(where.at(key), record.get(key))
    return record


def _finding(where: Where, value: Any) -> dict[str, Any]:
    """One finding of a record: its file's name, how its replay went, and the differences found."""
    found = fields.table(where, value)
    fields.file_name(where.at(f"{where.key}.name"), found.get("name"))
    fields.string(where.at(f"{where.key}.replay"), found.get("replay"))
    fields.list_of(where.at(f"{where.key}.differences"), found.get("differences", []), fields.string, "strings")
    return found
