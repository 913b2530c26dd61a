"""The faces of whole runs: calls labelled with where they were made, a run's calls as the program made them,
`Run.explain()`, `Run.draw(path)`, `Run.save(path)` / `sim.load_run`, and `meshsim draw` / `explain` of
`[program]` scenarios and saved runs."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import collectives
import scenarios
import sim
from scenarios.cli import main
from scenarios.cli._faces import program_run

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "scenarios" / "library"
SVG = "{http://www.w3.org/2000/svg}"
# a count of one said as many: '1 messages', '(1 rows)'
WRONG_NUMBER = re.compile(r"(?<![\d.:])1 (messages|bytes|devices|calls|groups|rows|slices|steps|local copies)\b")


def _two_axes(x):
    """psum over 'x' then over 'y': the two calls share call number 0 (numbers count per group)."""
    with sim.labelled("first"):
        a = collectives.psum(x, "x")
    with sim.labelled("second"):
        b = collectives.psum(a, "y")
    return b


def _run_two_axes(shape: tuple[int, int] = (2, 2)) -> sim.Run:
    mesh = sim.Mesh({"x": shape[0], "y": shape[1]})
    f = sim.shard_map(_two_axes, mesh=mesh, in_specs=sim.P("x", "y"), out_specs=sim.P())
    return f.run(np.arange(4.0 * shape[0] * shape[1]).reshape(2 * shape[0], 2 * shape[1]))


def _ring(n: int, calls: int) -> sim.Run:
    """`calls` ppermutes around a ring of `n` devices, each from its own line."""
    def body(x):
        for _ in range(calls):
            x = collectives.ppermute(x, "i", [(k, (k + 1) % n) for k in range(n)])
        return x
    f = sim.shard_map(body, mesh=sim.Mesh({"i": n}), in_specs=sim.P("i"), out_specs=sim.P("i"))
    with sim.located():
        return f.run(np.arange(float(n)))


def test_labelled_scopes_nest_and_label_the_calls_made_inside_them():
    """A call inside `sim.labelled` carries the innermost label; outside every scope (and without `located`)
    it carries None, and the outer label is back once the inner block ends."""
    def body(x):
        with sim.labelled("outer"):
            a = collectives.psum(x, "i")
            with sim.labelled("inner"):
                b = collectives.psum(a, "i")
            c = collectives.psum(b, "i")
        return collectives.psum(c, "i")
    f = sim.shard_map(body, mesh=sim.Mesh({"i": 2}), in_specs=sim.P("i"), out_specs=sim.P())
    run = f.run(np.arange(2.0))
    by_device = [[c.label for c in run.calls if c.device == d] for d in (0, 1)]
    assert by_device == [["outer", "inner", "outer", None]] * 2


def test_located_labels_each_call_with_the_program_line_that_made_it():
    """Inside `sim.located()`, a call without a label is labelled with the file, line and function of the
    program that made it: here the line of `collectives.ppermute` in `_ring`."""
    run = _ring(4, 2)
    lines, first = inspect.getsourcelines(_ring)
    line = first + next(k for k, text in enumerate(lines) if "collectives.ppermute" in text)
    assert {c.label for c in run.calls} == {f"{Path(__file__).relative_to(Path.cwd())}:{line} (body)"}


def test_calls_over_different_groups_sharing_a_number_are_told_apart_with_their_messages():
    """psum over 'x' then over 'y' on a 2x2 mesh: both are call 0 of their groups, yet they are two program
    calls, each with the messages of its own groups (sender and receiver in one of the call's groups), and
    every message belongs to exactly one call."""
    run = _run_two_axes()
    calls = sim.record.program_calls(run.trace, run.calls)
    assert [(c.number, c.collective, c.label, len(c.groups)) for c in calls] == [
        (1, "psum", "first", 2), (2, "psum", "second", 2)]
    src, dst = run.trace.column("src"), run.trace.column("dst")
    for call in calls:
        groups = [set(g) for g in call.groups]
        assert all(any({int(src[k]), int(dst[k])} <= g for g in groups) for k in call.messages)
    owned = np.concatenate([c.messages for c in calls])
    assert sorted(owned.tolist()) == list(range(len(run.trace)))


def test_the_grouping_can_fail_when_calls_are_keyed_by_number_alone():
    """Keyed by collective and call number alone (without the label and group size), the two psums of
    `_two_axes` merge into one call: the test above would catch a grouping that does so."""
    run = _run_two_axes()
    merged = {(c.collective, c.call) for c in run.calls}
    assert len(merged) == 1 and len(sim.record.program_calls(run.trace, run.calls)) == 2


@given(n=st.integers(2, 6), calls=st.integers(1, 3))
def test_a_saved_run_reads_back_with_the_same_trace_calls_and_faces(tmp_path_factory, n, calls):
    """`Run.save` then `sim.load_run`: every trace column and detail, every call record (labels included) and
    the end time come back equal, so the saved run explains and draws itself as the run did."""
    run = _ring(n, calls)
    path = tmp_path_factory.mktemp("saved") / "run.json"
    run.save(path)
    back = sim.load_run(path)
    assert back.calls == tuple(run.calls) and back.end_time_s == run.end_time_s
    assert back.mesh_shape == {"i": n}
    for name, column in run.trace.columns().items():
        assert back.trace.column(name).tolist() == column.tolist(), name
    assert back.explain().splitlines()[1:] == run.explain().splitlines()[1:]
    assert back.explain().startswith("run.json: ")


def _ragged_round_trip() -> sim.Run:
    """moe_round_trip.toml's program: all_to_all and ragged_all_to_all calls (slices, rows, empty slices)."""
    scenario = scenarios.load(str(LIBRARY / "moe_round_trip.toml"), allow_code=True)
    return scenarios.run_forward(scenario)


_PROGRAMS = {
    "ring all_gather": lambda: sim.shard_map(
        lambda x: collectives.all_gather(x, "i", tiled=True, algorithm="ring"), mesh=sim.Mesh({"i": 4}),
        in_specs=sim.P("i"), out_specs=sim.P("i")).run(np.arange(8.0)),
    "psum over two axes": _run_two_axes,
    "ragged round trip": _ragged_round_trip,
    "no messages": lambda: sim.shard_map(
        lambda x: x * collectives.axis_index("i"), mesh=sim.Mesh({"i": 2}), in_specs=sim.P("i"),
        out_specs=sim.P("i")).run(np.arange(2.0)),
}


@pytest.mark.parametrize("name", list(_PROGRAMS))
def test_runs_of_every_kind_read_back_column_for_column(name, tmp_path):
    """Rings (steps and phases in their details), calls over two axes, ragged exchanges (slices, row spans,
    empty slices) and a run without messages: saved and read back, every column, detail and call is equal
    and the faces say the same."""
    run = _PROGRAMS[name]()
    run.save(tmp_path / "run.json")
    back = sim.load_run(tmp_path / "run.json")
    assert back.calls == tuple(run.calls)
    for column, values in run.trace.columns().items():
        assert back.trace.column(column).tolist() == values.tolist(), column
    for key in run.trace.detail_keys():
        assert back.trace.detail_column(key) == run.trace.detail_column(key), key
    assert back.explain(full=True).splitlines()[1:] == run.explain(full=True).splitlines()[1:]


def test_a_file_that_is_not_a_saved_run_is_refused_naming_it(tmp_path):
    """Not JSON, another format, another version or a broken column: an InvalidArgumentError naming the file."""
    cases = {"text.json": "not json", "other.json": '{"format": "x"}',
             "version.json": '{"format": "meshsim-run", "version": 99}',
             "columns.json": '{"format": "meshsim-run", "version": 1, "mesh": {"i": 2}, "end_time_s": 0, '
                             '"calls": [], "messages": {"src": [0]}}'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(sim.InvalidArgumentError, match=re.escape(name)):
            sim.load_run(tmp_path / name)


def test_explain_says_each_call_with_its_label_and_bounds_long_lists():
    """Explain names every call with its label, algorithm and groups; past 8 messages of a call the first and
    last 4 show and a line says how many were left out; `full=True` lists every one."""
    run = _run_two_axes((4, 4))
    told = run.explain()
    assert "call 1 of 2: psum at first" in told and "call 2 of 2: psum at second" in told
    assert "4 groups of 4 devices" in told
    assert told.count("more messages (--full for all)") == 2
    full = run.explain(full=True)
    assert "more messages" not in full
    assert full.count(" -> device ") == len(run.trace)


def test_explain_and_draw_bound_many_calls_unless_full(tmp_path):
    """20 calls: explain shows the first and last 4, the picture panels for the first and last 8, each saying
    how many it left out; with full, every call."""
    run = _ring(3, 20)
    assert "... 12 more calls (--full for all) ..." in run.explain()
    assert run.explain(full=True).count("call ") >= 20
    svg = ET.fromstring(run.draw(tmp_path / "ring.svg"))
    assert len([g for g in svg.iter(SVG + "g") if g.get("class") == "call"]) == 16
    full = ET.fromstring(run.draw(tmp_path / "ring.svg", full=True))
    assert len([g for g in full.iter(SVG + "g") if g.get("class") == "call"]) == 20


def test_counts_of_one_are_said_in_the_singular():
    """A run of one message of 4 bytes between two devices: explain and the picture say '1 message',
    '1 call', never '1 messages'; the run's one-line summary too."""
    def body(x):
        return collectives.ppermute(x, "i", [(0, 1)])
    f = sim.shard_map(body, mesh=sim.Mesh({"i": 2}), in_specs=sim.P("i"), out_specs=sim.P("i"))
    run = f.run(np.arange(2, dtype=np.float32))
    faces = [run.explain(), run.explain(full=True), sim.record.draw_svg(run.faced()), repr(run)]
    assert all(not WRONG_NUMBER.search(text) for text in faces), [WRONG_NUMBER.findall(t) for t in faces]
    assert "1 message (1 between devices, 4 bytes over the network)" in faces[0]
    assert WRONG_NUMBER.search("3 calls, 1 messages")  # the pattern can fail


def test_draw_writes_a_panel_per_call_with_its_label_and_a_page_around_it(tmp_path):
    """The SVG (parsed as XML) has a lane bar per device's part of each call and a panel per call whose label
    text is the call's label; the page holds the picture, the message timeline and table; another extension
    is refused naming the path."""
    run = _run_two_axes()
    svg = ET.fromstring(run.draw(tmp_path / "run.svg"))
    labels = [t.text for t in svg.iter(SVG + "text") if t.get("class") == "call-label"]
    assert labels == ["at first", "at second"]
    parts = [r for r in svg.iter(SVG + "rect") if r.get("class") == "call-part"]
    assert len(parts) == len(run.calls) == 8
    page = run.draw(tmp_path / "run.html")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<table" in page
    assert (tmp_path / "run.html").read_text() == page
    with pytest.raises(sim.InvalidArgumentError, match=r"path='.*run\.png'"):
        run.draw(tmp_path / "run.png")


def test_meshsim_draws_and_explains_a_program_scenario_with_its_lines(tmp_path, capsys):
    """`meshsim draw --allow-code` of moe_round_trip.toml: a panel per call, the two ragged calls (dispatch and
    combine) labelled with their lines of the [program] source; `meshsim explain` says the same lines."""
    out = tmp_path / "moe.svg"
    assert main(["draw", "--allow-code", str(LIBRARY / "moe_round_trip.toml"), "-o", str(out)]) == 0
    svg = ET.parse(out).getroot()
    titles = [t.text for t in svg.iter(SVG + "text") if t.get("class") == "call-title"]
    labels = [t.text for t in svg.iter(SVG + "text") if t.get("class") == "call-label"]
    assert titles[2] == "call 3: ragged_all_to_all" and titles[4] == "call 5: ragged_all_to_all"
    text = (LIBRARY / "moe_round_trip.toml").read_text()
    assert "experts = ragged_all_to_all" in tomllib.loads(text)["program"]["source"]
    dispatch = 1 + next(k for k, line in enumerate(text.splitlines()) if "experts = ragged_all_to_all" in line)
    combine = 1 + next(k for k, line in enumerate(text.splitlines()) if "home = ragged_all_to_all" in line)
    assert labels[2].endswith(f"moe_round_trip.toml:{dispatch} (f)")
    assert labels[4].endswith(f"moe_round_trip.toml:{combine} (f)")
    capsys.readouterr()
    assert main(["explain", "--allow-code", str(LIBRARY / "moe_round_trip.toml")]) == 0
    told = capsys.readouterr().out
    assert f"moe_round_trip.toml:{dispatch} (f)" in told.replace("\n", "")


def test_a_program_source_the_file_does_not_hold_line_for_line_is_named_as_the_source(tmp_path):
    """A `[program]` source written as a one-line basic string (escapes) is not in the file line for line:
    its calls are labelled with lines of the source, under `path:[program].source`."""
    path = tmp_path / "one_line.toml"
    path.write_text('[mesh]\naxes = {i = 2}\n[program]\nin_specs = "P(\'i\')"\nout_specs = "P(\'i\')"\n'
                    'source = "def f(x):\\n    return psum(x, \'i\')\\n"\n'
                    '[[args]]\nshape = [2]\n')
    run = program_run(scenarios.load(path, allow_code=True))
    assert run.calls[0].label == f"{path}:[program].source:2 (f)"


def test_meshsim_draws_and_explains_a_saved_run(tmp_path, capsys):
    """A run saved with `Run.save` is drawn (SVG and page) and explained by `meshsim` like the run itself."""
    run = _run_two_axes()
    run.save(tmp_path / "run.json")
    for suffix in (".svg", ".html"):
        assert main(["draw", str(tmp_path / "run.json"), "-o", str(tmp_path / f"out{suffix}")]) == 0
    assert (tmp_path / "out.svg").read_text() == sim.load_run(tmp_path / "run.json").draw(tmp_path / "again.svg")
    capsys.readouterr()
    assert main(["explain", str(tmp_path / "run.json")]) == 0
    told = capsys.readouterr().out
    assert "Call 1 of 2: psum" in told and "made at first" in told and "made at second" in told


def test_meshsim_traces_a_saved_run_as_the_run_itself(tmp_path, capsys):
    """`meshsim trace` of a run saved with `Run.save` writes the events the run's own `to_perfetto` writes,
    running nothing; a file of several runs is refused naming its count."""
    run = _run_two_axes()
    run.save(tmp_path / "run.json")
    assert main(["trace", str(tmp_path / "run.json"), "-o", str(tmp_path / "trace.json")]) == 0
    assert "4 devices" in capsys.readouterr().out
    written = json.loads((tmp_path / "trace.json").read_text())
    assert written == json.loads(json.dumps(run.trace_events(2048)))
    sim.save_runs(tmp_path / "runs.json", [run, _ring(3, 2)])
    assert main(["trace", str(tmp_path / "runs.json"), "-o", str(tmp_path / "two.json")]) == 2
    assert "runs.json: holds 2 runs; meshsim trace writes the timeline of one" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "check"])
def test_run_and_check_say_a_saved_run_is_not_a_scenario(command, tmp_path, capsys):
    """`meshsim run` and `check` of a saved run exit 2 saying it is a saved run and which commands take one,
    not that it is invalid TOML."""
    _run_two_axes().save(tmp_path / "run.json")
    assert main([command, str(tmp_path / "run.json")]) == 2
    err = capsys.readouterr().err
    assert f"run.json: a run saved with Run.save (a .json file), not a scenario; meshsim {command} takes a " \
           f"scenario file (TOML), while meshsim draw, explain and trace take a saved run" in err
    assert "TOML:" not in err and err.count("\n") == 1


def test_explain_summarises_operands_in_one_line_unless_full(capsys):
    """moe_dispatch.toml's operands (6 x 4 per device): explain gives each its type and ends in one line, not
    one line per row (row 3 of device 0, [3, 3.1, 3.2, 3.3], is not printed); --full prints every row."""
    assert main(["explain", str(LIBRARY / "moe_dispatch.toml")]) == 0
    brief = capsys.readouterr().out
    assert main(["explain", "--full", str(LIBRARY / "moe_dispatch.toml")]) == 0
    full = capsys.readouterr().out
    row = re.compile(r"\[3\. *, 3\.1, 3\.2, 3\.3\]")
    assert "f32[6,4]" in brief and not row.search(brief) and row.search(full)
    assert len(brief.splitlines()) < 0.6 * len(full.splitlines())


# '1 rows' and its kin, but not a number that is part of a name or a formula ('slice 1 rows', 'n - 1 steps')
SAID_AS_MANY = re.compile(r"(?<![\d.:\[,-])(?<!slice )(?<!device )(?<!- )1 (messages|bytes|devices|calls|groups|"
                          r"rows|slices|steps|local copies|members|entries)\b")


@pytest.mark.parametrize("name", ["ragged_docs_representation", "moe_dispatch", "ragged_docs_example",
                                  "moe_round_trip", "pswapaxes_groups"])
def test_run_explain_and_draw_say_counts_of_one_in_the_singular(name, tmp_path, capsys):
    """Library scenarios with one device, one-row slices, empty slices and programs: what `meshsim run`,
    `explain`, `draw` (SVG and page) and `trace` say never puts a count of one with a plural noun."""
    path = str(LIBRARY / f"{name}.toml")
    said = []
    for argv in (["run", path], ["explain", path], ["draw", path, "-o", str(tmp_path / "x.svg")],
                 ["draw", path, "-o", str(tmp_path / "x.html")], ["trace", path, "-o", str(tmp_path / "x.json")]):
        assert main([argv[0], "--allow-code", *argv[1:]]) == 0
        said.append(capsys.readouterr().out + ((tmp_path / "x.html").read_text() if argv[-1].endswith("html") else
                                               (tmp_path / "x.svg").read_text() if argv[0] == "draw" else ""))
    wrong = [m.group(0) for text in said for m in SAID_AS_MANY.finditer(text)]
    assert wrong == []
    assert SAID_AS_MANY.search("mesh x=1 (1 devices)") and not SAID_AS_MANY.search("slice 1 rows 0:2")


def test_several_runs_in_one_file_are_read_drawn_and_explained_in_order(tmp_path, capsys):
    """`sim.save_runs` writes a forward-and-backward pair in one file: `sim.load_runs` gives both back in order
    (titled 'runs.json run 1', 'run 2'), `sim.load_run` refuses the file naming `load_runs`, and `meshsim
    draw` / `explain` show both, one after the other."""
    first, second = _run_two_axes(), _ring(3, 2)
    sim.save_runs(tmp_path / "runs.json", [first, second])
    back = sim.load_runs(tmp_path / "runs.json")
    assert [b.calls for b in back] == [tuple(first.calls), tuple(second.calls)]
    assert [b.title for b in back] == ["runs.json run 1", "runs.json run 2"]
    with pytest.raises(sim.InvalidArgumentError, match=r"holds 2 runs; sim\.load_runs reads them all"):
        sim.load_run(tmp_path / "runs.json")
    assert main(["draw", str(tmp_path / "runs.json"), "-o", str(tmp_path / "runs.svg")]) == 0
    svg = ET.parse(tmp_path / "runs.svg").getroot()
    titles = [t.text for t in svg.iter(SVG + "text") if t.get("class") == "title"]
    assert titles == ["run 1 of 2: runs.json run 1", "run 2 of 2: runs.json run 2"]
    panels = [g for g in svg.iter(SVG + "g") if g.get("class") == "call"]
    assert len(panels) == 2 + 2
    capsys.readouterr()
    assert main(["explain", str(tmp_path / "runs.json")]) == 0
    told = capsys.readouterr().out
    assert told.index("Run 1 of 2") < told.index("Run 1, call 2 of 2: psum") < told.index("Run 2 of 2")


def _alternating(labelled: bool) -> sim.Run:
    """On mesh {a: 2, c: 2}, 4 psums over 'c', 'a', 'c', 'a' (each 'layer k' when `labelled`): each is call 0
    or 1 of its own groups, call k of the program."""
    def body(x):
        for k in range(4):
            with sim.labelled(f"layer {k}") if labelled else contextlib.nullcontext():
                x = collectives.psum(x, "a" if k % 2 else "c")
        return x
    f = sim.shard_map(body, mesh=sim.Mesh({"a": 2, "c": 2}), in_specs=sim.P(("a", "c")), out_specs=sim.P())
    return f.run(np.ones(8, np.float32))


@pytest.mark.parametrize("labelled", [False, True], ids=["unlabelled", "labelled"])
def test_a_call_is_the_kth_call_each_device_made_across_its_groups(labelled, tmp_path, capsys):
    """4 psums alternating over two axes are 4 calls of the program, each over its 2 groups and holding only
    their messages, though the engine numbers them 0, 0, 1, 1 per group (so a count by collective and number
    says 2): the run's repr and notebook summary, explain, draw (picture and page) and `meshsim explain` /
    `draw` of the saved run all say 4 calls."""
    run = _alternating(labelled)
    assert len({(c.collective, c.call) for c in run.calls}) == 2  # numbers per group alone merge the calls
    calls = sim.record.program_calls(run.trace, run.calls)
    assert [sorted(c.groups) for c in calls] == [[(0, 1), (2, 3)], [(0, 2), (1, 3)]] * 2
    assert [c.label for c in calls] == ([f"layer {k}" for k in range(4)] if labelled else [None] * 4)
    src, dst = run.trace.column("src"), run.trace.column("dst")
    for call in calls:
        assert all(any({int(src[k]), int(dst[k])} <= set(g) for g in call.groups) for k in call.messages)
    assert sorted(np.concatenate([c.messages for c in calls]).tolist()) == list(range(len(run.trace)))
    assert "4 collective calls" in repr(run) and "4 collective calls" in run._repr_html_()
    told = run.explain()
    assert "; 4 calls, " in told.splitlines()[0]
    assert [line.split(":")[0] for line in told.splitlines() if line.startswith("call ")] == [
        f"call {k} of 4" for k in range(1, 5)]
    svg = ET.fromstring(run.draw(tmp_path / "run.svg"))
    assert len([g for g in svg.iter(SVG + "g") if g.get("class") == "call"]) == 4
    assert "; 4 calls; " in next(t.text for t in svg.iter(SVG + "text") if t.get("class") == "summary")
    assert "4 collective calls" in run.draw(tmp_path / "run.html")
    run.save(tmp_path / "run.json")
    assert main(["explain", str(tmp_path / "run.json")]) == 0
    out = capsys.readouterr().out
    assert "Call 4 of 4: psum" in out and " of 2: " not in out
    assert main(["draw", str(tmp_path / "run.json"), "-o", str(tmp_path / "saved.svg")]) == 0
    assert len([g for g in ET.parse(tmp_path / "saved.svg").getroot().iter(SVG + "g")
                if g.get("class") == "call"]) == 4


def test_a_call_whose_groups_met_at_different_times_says_when_each_met():
    """psum over 'c' on mesh {a: 2, c: 2} after devices 2 and 3 computed for 1 us: one call of two groups,
    [0, 1] met at 0 s and [2, 3] at 1 us; explain says each (a call whose groups met together says none)."""
    def body(x):
        if int(collectives.axis_index("a")) == 1:
            sim.compute(seconds=1e-6)
        return collectives.psum(x, "c")
    f = sim.shard_map(body, mesh=sim.Mesh({"a": 2, "c": 2}), in_specs=sim.P(("a", "c")), out_specs=sim.P(("a",)))
    run = f.run(np.ones(4, np.float32))
    call, = [c for c in sim.record.program_calls(run.trace, run.calls) if c.collective == "psum"]
    assert dict(zip(call.groups, call.met_by_group)) == {(0, 1): 0.0, (2, 3): 1e-6}
    told = run.explain()
    assert "    group [0, 1] met at 0 s\n    group [2, 3] met at 1 us\n" in told
    assert " met at " not in _alternating(False).explain()


def test_work_started_in_a_labelled_block_keeps_its_label():
    """A function started with `sim.start` inside `sim.labelled("dispatch")` calls psum at once and, after
    the block has ended, all_gather, then pmax under its own label 'inner', then psum again: its calls carry
    'dispatch', 'dispatch', 'inner', 'dispatch', and the program's own pmin, made after the block while the
    started work runs, carries none."""
    def work(y):
        a = collectives.all_gather(collectives.psum(y, "x"), "x", tiled=True)
        with sim.labelled("inner"):
            b = collectives.pmax(a, "x")
        return collectives.psum(b, "x")

    def body(x):
        with sim.labelled("dispatch"):
            started = sim.start(work, x)
        sim.compute(seconds=1e-6)
        own = collectives.pmin(x, "x")
        return started.result()[:1] + own
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=sim.P("x"), out_specs=sim.P("x"), check_vma=False)
    run = f.run(np.ones(2, np.float32))
    for device in (0, 1):
        made = sorted((c.enter_s, c.collective, c.label) for c in run.calls if c.device == device)
        assert [(name, label) for _, name, label in made] == [
            ("psum", "dispatch"), ("pmin", None), ("all_gather", "dispatch"), ("pmax", "inner"), ("psum", "dispatch")]


def test_explain_escapes_a_labels_control_characters_as_the_command_does(tmp_path, capsys):
    """A label holding a newline and an escape sequence: `Run.explain()` writes them as their escapes, as
    `meshsim explain` of the saved run does, never raw; a label that is not a str is refused naming it, and a
    saved file whose label is not a string or null is refused naming the file."""
    def body(x):
        with sim.labelled("evil\n\x1b[31mRED\x1b[0m"):
            return collectives.psum(x, "x")
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=sim.P("x"), out_specs=sim.P("x"))
    run = f.run(np.ones(2))
    told = run.explain()
    escaped = "evil\\x0a\\x1b[31mRED\\x1b[0m"
    assert "\x1b" not in told and f"call 1 of 1: psum at {escaped}\n" in told
    run.save(tmp_path / "run.json")
    assert sim.load_run(tmp_path / "run.json").explain().splitlines()[2:] == told.splitlines()[2:]
    assert main(["explain", str(tmp_path / "run.json")]) == 0
    assert f"made at {escaped}\n" in capsys.readouterr().out

    def numbered(x):
        with sim.labelled(123):
            return collectives.psum(x, "x")
    with pytest.raises(sim.InvalidTypeError, match=r"label=123 must be a str"):
        sim.shard_map(numbered, mesh=sim.Mesh({"x": 2}), in_specs=sim.P("x"), out_specs=sim.P("x")).run(np.ones(2))
    document = json.loads((tmp_path / "run.json").read_text())
    document["runs"][0]["calls"][0][-1] = 123
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(sim.InvalidArgumentError, match=r"bad\.json: not a saved run: .*label must be a string or "
                                                       r"null, not 123"):
        sim.load_run(tmp_path / "bad.json")


def test_every_face_of_a_run_with_work_and_routes_reads_back_the_same(tmp_path, capsys):
    """A started ring psum beside local work (`sim.compute`) on a switched network (routes through ports):
    saved and read back, its compute records and routes come back, and explain (bounded and full), draw
    (picture and page), the Perfetto events (in full and summarised) and `meshsim trace` of the file equal
    the run's own."""
    def body(x):
        started = sim.start(collectives.psum, x, "i", algorithm="ring")
        sim.compute(flops=1e9, name="matmul")
        return started.result()
    mesh = sim.Mesh({"i": 4}, network=sim.Network.preset("h100-nvlink", (4,)))
    run = sim.shard_map(body, mesh=mesh, in_specs=sim.P("i"), out_specs=sim.P("i")).run(np.ones(400, np.float32))
    run.save(tmp_path / "run.json")
    back = dataclasses.replace(sim.load_run(tmp_path / "run.json"), title=run.faced().title)
    assert len(run.trace.computes) == 4 and back.trace.computes == run.trace.computes
    links = sim.record.trace_links(run.trace)
    assert any(isinstance(link[0], str) for link in links) and sim.record.trace_links(back.trace) == links
    assert back.explain() == run.explain() and back.explain(full=True) == run.explain(full=True)
    for suffix in (".svg", ".html"):
        assert back.draw(tmp_path / f"back{suffix}") == run.draw(tmp_path / f"run{suffix}")
    for limit in (None, 3):
        assert sim.record.trace_events(back.trace, back.calls, 4, limit) == run.trace_events(limit)
    assert main(["trace", str(tmp_path / "run.json"), "-o", str(tmp_path / "trace.json")]) == 0
    written = json.loads((tmp_path / "trace.json").read_text())
    assert written == json.loads(json.dumps(run.trace_events(2048)))
    assert "compute" in {e.get("cat") for e in written["traceEvents"]} and written["otherData"]["computes"] == 4
