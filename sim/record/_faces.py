"""The faces of a run: `explain()`, `draw(path)` and `save(path)`, for a `sim.Run` and for a run read back
from its file (`SavedRun`, from `load_run`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim._errors import InvalidArgumentError
from sim.record._draw_run import draw_page, draw_svg
from sim.record._explain_run import explain_run
from sim.record._runfile import Faced, read_run, write_run

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
        render = _DRAWINGS.get(Path(path).suffix.lower())
        if render is None:
            raise InvalidArgumentError(f"path={str(path)!r}: a run is drawn to a file ending in .svg (the picture) "
                                       f"or .html (a page around it)")
        drawn = render(self.faced(), full)
        Path(path).write_text(drawn, encoding="utf-8")
        return drawn

    def save(self, path: str | Path) -> None:
        """Write the run to `path` (JSON: the mesh's axes, every call with its label, the trace), for
        `sim.load_run` and for `meshsim draw` / `meshsim explain` to read back.

        Raises:
            OSError: `path` cannot be written.
        """
        write_run(self.faced(), path)


@dataclass(frozen=True)
class SavedRun(Faced, Faces):
    """A run read back from its file (`load_run`): it explains, draws and saves itself as the run did."""

    def faced(self) -> Faced:
        """The run itself: it holds what the faces read."""
        return self


def load_run(path: str | Path) -> SavedRun:
    """The run saved at `path` by `Run.save`.

    Raises:
        InvalidArgumentError: the file is not a saved run (names the file and what is wrong).
        OSError: the file cannot be read.
    """
    faced = read_run(path)
    title = Path(path).name if faced.title == Faced.title else faced.title
    return SavedRun(faced.mesh_shape, faced.trace, faced.calls, faced.end_time_s, title)
