"""A campaign's directory: results.jsonl (one job's record a line, appended as it arrives) and findings/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scenarios import ScenarioError, append_row, open_for_append, read_rows


class Results:
    """The results file of a campaign in `folder` and the findings saved beside it.

    `done` maps each job key in the file to its record; `added` holds the keys written by this run.
    Without `resume`, a results file that already exists is refused (a campaign never overwrites
    another's results); with it, its records count as done. The file is read and written as a sweep's
    (`scenarios._results`): a line cut short (a run killed while writing it) is dropped, so its job runs
    again.
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
        self.done: dict[str, dict[str, Any]] = {record["key"]: record for record in read_rows(self.path)}
        if self.path.exists():
            open_for_append(self.path).close()  # drops a line cut short, so its job runs again
        self.added: set[str] = set()

    def add(self, key: str, record: dict[str, Any]) -> None:
        """Save `record` of job `key`: each finding's file in findings/, then one line in the file."""
        kept = dict(record, key=key, findings=[])
        for found in record["findings"]:
            (self.findings / found["name"]).write_text(found["scenario"], encoding="utf-8")
            kept["findings"].append({k: v for k, v in found.items() if k != "scenario"})
        with self.path.open("a", encoding="utf-8") as stream:
            append_row(stream, kept)
        self.done[key] = kept
        self.added.add(key)
