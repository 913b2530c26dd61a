"""`plot`: a sweep's time and bus bandwidth against message size, drawn with matplotlib (SVG or PNG).

Two panels share the size axis (log scale): the simulated time (log scale) and busbw. One line per
combination of the parameters other than the size that vary in the sweep (algorithm, network, ...),
labelled with them; rejected points are left out. matplotlib is imported here, inside the function, with
the Agg backend, so nothing else pays for it and no display is needed. The SVG carries no date and a fixed
id salt, so one sweep draws the same file every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scenarios._errors import ScenarioError

FORMATS = (".svg", ".png")
_INSIDE = 10  # lines whose legend fits inside the busbw panel; more go below the panels
SERIES = ("collective", "mesh", "axis_name", "network", "algorithm", "dtype", "seed")


def check_output(path: str) -> Path:
    """`path` as the plot's output, refused unless it ends in .svg or .png.

    Raises:
        ScenarioError: another suffix, naming it and the two accepted.
    """
    output = Path(path)
    if output.suffix.lower() not in FORMATS:
        raise ScenarioError(f"--plot {path}: unknown extension {output.suffix or '(none)'!r}; the plot must end in "
                            f".svg or .png")
    return output


def series(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The measured rows grouped into lines: label -> rows by size. The label names the parameters that vary
    across the rows ('ring, auto'); 'all points' when only the size does."""
    measured = [r for r in rows if not r["error"] and r["time_s"]]
    varying = _varying(measured)
    lines: dict[str, list[dict[str, Any]]] = {}
    for row in measured:
        label = ", ".join(str(row[k]) for k in varying) or "all points"
        lines.setdefault(label, []).append(row)
    return {label: sorted(line, key=lambda r: r["size_bytes"]) for label, line in lines.items()}


def _varying(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The parameters of `SERIES` that take more than one value among `rows`."""
    return [k for k in SERIES if len({str(r[k]) for r in rows}) > 1]


def _styles(lines: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each line's colour and dash: with two or more varying parameters, the first (e.g. the network) sets the
    dash and the rest the colour, so the same algorithm has one colour on every network."""
    dashes, colours = ("-", "--", ":", "-."), [f"C{i}" for i in range(10)]
    firsts: dict[str, int] = {}
    rests: dict[str, int] = {}
    styles = {}
    for label in lines:
        first, _, rest = label.partition(", ")
        if not rest:
            first, rest = "", first
        dash = dashes[firsts.setdefault(first, len(firsts)) % len(dashes)]
        styles[label] = {"linestyle": dash, "color": colours[rests.setdefault(rest, len(rests)) % len(colours)]}
    return styles


def plot(rows: Sequence[dict[str, Any]], output: Path, title: str) -> None:
    """Draw `rows` (the sweep's `COLUMNS`) to `output` (.svg or .png, see `check_output`).

    Raises:
        ScenarioError: matplotlib is missing (install the `plot` extra), no row was measured, or the file
            cannot be written.
    """
    try:
        import matplotlib
    except ImportError:
        raise ScenarioError("--plot needs matplotlib: pip install 'meshsim[plot]'") from None
    lines = series(rows)
    if not lines:
        raise ScenarioError(f"--plot {output}: no point of the sweep was measured (every one was rejected), so "
                            "there is nothing to draw")
    matplotlib.use("Agg")
    from matplotlib import pyplot

    with matplotlib.rc_context({"svg.hashsalt": "meshsim", "svg.fonttype": "none"}):
        columns = 2 if len(lines) <= 40 else 3  # of a legend below the panels
        below = 0 if len(lines) <= _INSIDE else 0.2 * -(-len(lines) // columns)  # inches of its rows
        figure, (times, bandwidths) = pyplot.subplots(1, 2, figsize=(11, 4.2 + below), layout="constrained")
        for label, style in _styles(lines).items():
            sizes = [r["size_bytes"] for r in lines[label]]
            times.plot(sizes, [r["time_s"] * 1e6 for r in lines[label]], marker="o", markersize=3, label=label,
                       gid=f"time: {label}", **style)
            bandwidths.plot(sizes, [r["busbw_GB_per_s"] for r in lines[label]], marker="o", markersize=3,
                            label=label, gid=f"busbw: {label}", **style)
        _axes(times, bandwidths, title)
        if len(lines) <= _INSIDE:
            bandwidths.legend(fontsize="small", loc="upper left")
        else:  # too many to fit in a panel: below both, in columns
            figure.legend(*bandwidths.get_legend_handles_labels(), loc="outside lower center", ncol=columns,
                          fontsize="small")
        try:
            figure.savefig(output, metadata=_metadata(output), bbox_inches="tight")
        except OSError as error:
            raise ScenarioError(f"--plot {output}: cannot write the file: {error.strerror}") from None
        finally:
            pyplot.close(figure)


def _axes(times: Any, bandwidths: Any, title: str) -> None:
    """Scales, labels and grid of the two panels, and the figure's title."""
    from matplotlib.ticker import FuncFormatter

    for axes in (times, bandwidths):
        axes.set_xscale("log", base=2)
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _binary(value)))
        axes.set_xlabel("size (nccl-tests' S)")
        axes.grid(True, which="major", alpha=0.3)
    times.set_yscale("log")
    times.set_ylabel("simulated time (us)")
    bandwidths.set_ylabel("busbw (GB/s)")
    bandwidths.set_ylim(bottom=0)
    times.set_title("time")
    bandwidths.set_title("bus bandwidth")
    times.figure.suptitle(title)


def _binary(size: float) -> str:
    """A tick's size in the largest binary unit that keeps it a whole number: 1 KiB, 64 MiB, 512 B."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{int(size) >> shift} {unit}"
    return f"{size:g} B"


def _metadata(output: Path) -> dict[str, Any]:
    """No creation date (and no software version) in the file, so the same sweep draws the same bytes."""
    if output.suffix.lower() == ".svg":
        return {"Date": None, "Creator": None}
    return {"Software": None}
