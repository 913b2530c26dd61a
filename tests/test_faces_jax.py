"""`meshsim draw` and `meshsim explain` of saved `simulate_jax` runs: the MoE layer of `faces_moe.py`, run
through the bridge in a child process, shows dispatch and combine each labelled with its source line and
JAX's name stack, forward and in the gradient's backward run (its transposes keep the lines)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from scenarios.cli import main

pytestmark = pytest.mark.differential
HERE = Path(__file__).resolve().parent
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The directory where the child saved the MoE layer's runs (forward.json; grad.json, forward and backward)."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("moe")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(HERE / "faces_moe.py"), str(out)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _line(marker: str) -> int:
    """The line of faces_moe.py that ends with `marker`."""
    lines = (HERE / "faces_moe.py").read_text().splitlines()
    return 1 + next(k for k, line in enumerate(lines) if line.rstrip().endswith(marker))


def _panels(svg: Path) -> list[tuple[str, str]]:
    """Each call panel's title and label text, in order."""
    root = ET.parse(svg).getroot()
    titles = [t.text for t in root.iter(SVG + "text") if t.get("class") == "call-title"]
    labels = [t.text for t in root.iter(SVG + "text") if t.get("class") == "call-label"]
    return list(zip(titles, labels))


def test_draw_of_the_moe_run_shows_dispatch_and_combine_labelled_with_their_lines(saved, tmp_path):
    """The forward run's picture has a panel per call; the two ragged_all_to_all panels are labelled with the
    lines of the dispatch and the combine in faces_moe.py and their named scopes."""
    out = tmp_path / "moe.svg"
    assert main(["draw", str(saved / "forward.json"), "-o", str(out)]) == 0
    ragged = [label for title, label in _panels(out) if title.endswith("ragged_all_to_all")]
    dispatch, combine = _line("# dispatch"), _line("# combine")
    assert len(ragged) == 2
    assert f"faces_moe.py:{dispatch}:" in ragged[0] and ragged[0].endswith("[dispatch]")
    assert f"faces_moe.py:{combine}:" in ragged[1] and ragged[1].endswith("[combine]")


def test_the_backward_run_labels_each_transpose_with_the_line_it_transposes(saved, tmp_path, capsys):
    """The gradient's file holds its forward and backward runs; drawn together, the backward run's ragged
    calls come last: the combine's transpose first and the dispatch's last, each labelled with its forward
    line; `meshsim explain` says the same."""
    out = tmp_path / "grad.svg"
    assert main(["draw", str(saved / "grad.json"), "-o", str(out)]) == 0
    ragged = [label for title, label in _panels(out) if title.endswith("ragged_all_to_all")]
    assert len(ragged) == 4
    marks = ("# dispatch", "# combine", "# combine", "# dispatch")
    assert [f"faces_moe.py:{_line(m)}:" in label for label, m in zip(ragged, marks)] == [True] * 4
    capsys.readouterr()
    assert main(["explain", str(saved / "grad.json")]) == 0
    told = capsys.readouterr().out.replace("\n", "")
    assert "Run 2 of 2" in told and f"faces_moe.py:{_line('# dispatch')}:" in told and "[dispatch]" in told


def test_a_simulated_program_draws_explains_and_saves_all_its_runs(saved, tmp_path):
    """`Simulated.draw`, `.explain` and `.save` show the gradient's two runs as `meshsim draw` and `explain`
    show the saved file: the same call panels with the same labels, both runs in words with their lines."""
    out = tmp_path / "grad.svg"
    assert main(["draw", str(saved / "grad.json"), "-o", str(out)]) == 0
    assert _panels(saved / "grad.svg") == _panels(out) and len(_panels(out)) > 4
    told = (saved / "grad.txt").read_text()
    heads = [line for line in told.splitlines() if line.startswith("run ") and " of 2 (" in line]
    assert [h.split(" (")[0] for h in heads] == ["run 1 of 2", "run 2 of 2"] and "faces_moe.py" in heads[1]
    assert f"faces_moe.py:{_line('# combine')}:" in told.split("\nrun 2 of 2")[1]
