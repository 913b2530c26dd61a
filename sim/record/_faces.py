"""The faces of a run: `explain()`, `draw(path)` and `save(path)`, for a `sim.Run` and for a run read back
from its file (`SavedRun`, from `load_run`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim._errors import InvalidArgumentError
from sim.record._draw_run import draw_page, draw_svg
from sim.record._explain_run import explain_run
from sim.record._runfile import Faced, read_runs, write_runs

_DRAWINGS = {".svg": draw_svg, ".html": draw_page}


class Faces:
    """What a run shows of itself. A class using it has `trace`, `calls`, `end_time_s` and a `simulation`
    with its `mesh`, or overrides `faced`."""

    def faced(self) -> Faced:
        """What the faces read of the run."""
        return Faced(dict(self.simulation.mesh.shape), self.trace, tuple(self.calls), float(self.end_time_s))

    def explain(self, full: bool = False) -> str:
        """The run in words, call by call: where each call was made (its label), its algorithm and groups,
        when it began, met and ended, its messages. Past 8 calls, members or messages the ends show and a
        line says how many were left out; `full` shows everything. `print` it."""
        return explain_run(self.faced(), full)

    def draw(self, path: str | Path, full: bool = False) -> str:
        """Write the run's picture to `path` (`.svg`) or a page around it with the message timeline and table
        (`.html`): a timeline of the calls per device and a panel per call with where it was made and a
        sender x receiver matrix of its bytes (bounded past 32 devices or 16 calls unless `full`). Returns
        the text written.

        Raises:
            InvalidArgumentError: `path` ends in neither .svg nor .html.
            OSError: `path` cannot be written.
        """
        return draw_runs(path, [self], full)

    def save(self, path: str | Path) -> None:
        """Write the run to `path` (JSON: the mesh's axes, every call with its label, the trace), for
        `sim.load_run` and for `meshsim draw` / `meshsim explain` to read back.

        Raises:
            OSError: `path` cannot be written.
        """
        write_runs([self.faced()], path)


@dataclass(frozen=True)
class SavedRun(Faced, Faces):
    """A run read back from its file (`load_run`): it explains, draws and saves itself as the run did."""

    def faced(self) -> Faced:
        """The run itself: it holds what the faces read."""
        return self


def draw_runs(path: str | Path, runs: Sequence[Faces], full: bool = False) -> str:
    """Draw several runs to `path`, one under another (e.g. `simulated.runs` of a `simulate_jax` gradient), as
    `Run.draw` draws one; returns the text written.

    Raises:
        InvalidArgumentError: `path` ends in neither .svg nor .html, or `runs` is empty.
        OSError: `path` cannot be written.
    """
    render = _DRAWINGS.get(Path(path).suffix.lower())
    if render is None:
        raise InvalidArgumentError(f"path={str(path)!r}: a run is drawn to a file ending in .svg (the picture) "
                                   f"or .html (a page around it)")
    if not runs:
        raise InvalidArgumentError(f"path={str(path)!r}: no run to draw")
    drawn = render([run.faced() for run in runs], full)
    Path(path).write_text(drawn, encoding="utf-8")
    return drawn


def save_runs(path: str | Path, runs: Sequence[Faces]) -> None:
    """Write several runs to one file, in order (e.g. `simulated.runs` of a `simulate_jax` gradient: its
    forward and backward runs); `meshsim draw` and `explain` show them one after another.

    Raises:
        OSError: `path` cannot be written.
    """
    write_runs([run.faced() for run in runs], path)


def load_runs(path: str | Path) -> tuple[SavedRun, ...]:
    """Every run saved at `path` (by `Run.save` or `save_runs`), in order.

    Raises:
        InvalidArgumentError: the file is not a saved run (names the file and what is wrong).
        OSError: the file cannot be read.
    """
    return tuple(SavedRun(f.mesh_shape, f.trace, f.calls, f.end_time_s, f.title) for f in read_runs(path))


def load_run(path: str | Path) -> SavedRun:
    """The run saved at `path` by `Run.save`.

    Raises:
        InvalidArgumentError: the file is not a saved run, or holds several (`load_runs` reads them all).
        OSError: the file cannot be read.
    """
    runs = load_runs(path)
    if len(runs) != 1:
        raise InvalidArgumentError(f"{path}: holds {len(runs)} runs; sim.load_runs reads them all")
    return runs[0]
