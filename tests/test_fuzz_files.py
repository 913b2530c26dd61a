"""The fuzz suite's second half: sweep files, results files and campaign command lines.

Every generated case runs `meshsim` in this process, under a time limit, and must end with exit 0 (or, for
a campaign, 1 with a finding or 4 with jobs that have no verdict) and an outcome that is whole (a sweep's
JSON has one row per point; a campaign's report counts what its records hold), or with exit 2 and one
`meshsim: error:` line (argparse's `meshsim campaign: error:` for a malformed command line); never a
traceback, an exception escaping `main`, exit 3 (an unexpected exception, reported) nor a hang.

- Sweep files: every key drawn from valid and invalid values (wrong types, bad units and dtypes, huge and
  negative numbers, unknown keys, `[[point]]` tables), over meshes small enough to run.
- Results files: the results of a small sweep and of a small campaign, with lines deleted, duplicated, cut
  short or garbled and fields retyped, then `--resume`d.
- Campaign command lines: random `--cases`, `--ops`, `--kinds`, `--seed`, `--workers`, `-o` and `--resume`.

The Dask cluster is replaced by a loop in this process (`in_process`), and a campaign's jobs by
`stub_job` (a record drawn from the job's seed, now and then with a finding or an error), so a case takes
milliseconds: the cluster and the jobs themselves are tested in test_fleet.py, test_sweep.py and
test_campaign_cli.py. Inputs that once failed are fixed cases; the two that can read or allocate without
bound run as a child process under a memory limit. Case counts scale with the Hypothesis profile.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_files import Outcome, check_campaign, check_error, check_sweep, run, stand_in
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from test_fuzz import _FUZZ, scaled, to_toml

import collectives
from scenarios.cli import main
from scenarios.sweep import SWEPT

ROOT = Path(__file__).resolve().parents[1]
COUNTS = {"sweep": 250, "results": 200, "campaign": 150}  # cases per property under the default profile
# No shrinking: a failing case is reported as drawn (its file or command line is small), and a run that
# meets a bug does not spend minutes re-running it.
_FILES = dict(_FUZZ, phases=tuple(p for p in Phase if p not in (Phase.shrink, Phase.explain)),
              report_multiple_bugs=False)


@pytest.fixture
def in_process(monkeypatch):
    """`stand_in` for one test."""
    stand_in(monkeypatch)


# ---------------------------------------------------------------------------------------------- sweep files


HUGE = st.sampled_from([0, -1, -2**63, 2**63 - 1, 2**20 + 1, 2**50 + 1, 10**12, 2**64])  # as sizes: refused, or quick
SMALL = st.integers(-1, 5)
TEXT = st.sampled_from(["", "x", "y", "abc", "1/0", "\x00", "💥", "\x1b]0;title\x07\x1b[2J", "é" * 3, "a" * 5000])
ODD = st.one_of(HUGE, TEXT, st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.just([]),
                st.just({}), st.lists(SMALL, max_size=3), st.dictionaries(st.sampled_from(["x", "y", "a"]), SMALL,
                                                                          max_size=2))
# Sizes a sweep refuses (beyond 1 PiB, not a size) or times quickly (up to 64 KiB): sizes of megabytes and more
# that fit in memory take as long as moving their bytes, which is the sweep's job, not the fuzz's.
SIZE_TEXT = st.sampled_from(["1KiB", "4 KiB", "0.5 KiB", "64KB", "2PiB", "1e30B", "-1KiB", "0B", "abc", "1 KiB B",
                             "KiB", "1_000", "nan", "inf", "1e3", "1.5"])
SIZE = st.one_of(st.integers(-2, 5000), st.sampled_from([0, -1, -2**63, 2**50 + 1, 2**63 - 1, 2**64]), SIZE_TEXT)
RANGE = st.fixed_dictionaries({"from": SIZE, "to": SIZE},
                              optional={"factor": st.sampled_from([2, 4, 1.5, 1, 0.5, 0, -2, "x", 10**6]),
                                        "step": st.sampled_from(["1KiB", 1024, 0, -1, "x"]),
                                        "extra": SMALL})
MESH = st.one_of(st.fixed_dictionaries({"x": st.integers(1, 8)}),
                 st.fixed_dictionaries({"x": st.integers(1, 4), "y": st.integers(1, 4)}),
                 st.dictionaries(st.sampled_from(["x", "y", "", "a b", "💥"]), st.one_of(SMALL, HUGE, TEXT),
                                 max_size=3))
NETWORK = st.one_of(st.sampled_from(["fully_connected", "switch", "ring", "torus", "hierarchical", "tpu-v5e",
                                     "h100-nvlink", "nowhere", ""]),
                    st.fixed_dictionaries({"topology": st.sampled_from(["ring", "torus", "switch", "mesh"])},
                                          optional={"latency_s": st.sampled_from([1e-6, 0, -1, "x", 1e300, 1e-300]),
                                                    "bandwidth_bytes_per_s": st.sampled_from([1e9, 0, -5, "fast"]),
                                                    "shape": st.lists(SMALL, max_size=3)}),
                    st.fixed_dictionaries({"preset": st.sampled_from(["tpu-v4p", "tpu-v5e", "gb200-nvl72", "none"])}))
ALGORITHM = st.sampled_from(["direct", "ring", "auto", "recursive_doubling", "rabenseifner", "pairwise", "bruck",
                             "per_axis", "bidirectional_ring", "fastest", ""])
DTYPE = st.sampled_from(["float32", "bfloat16", "float16", "int8", "int64", "complex64", "bool", "<U1", "object",
                         "V8", ",", '("a","f4")', "float32,int8", "f4", "", "[('a', 'f4')]"])
KEYS = {
    "collective": st.sampled_from([*SWEPT, "axis_index", "pbroadcast", "nope"]),
    "mesh": MESH,
    "axis_name": st.sampled_from(["x", "y", ["x", "y"], [["x", "y"]], "z", [["x", "x"]], []]),
    "size": st.one_of(SIZE, RANGE, st.lists(SIZE, min_size=1, max_size=3)),
    "network": st.one_of(NETWORK, st.lists(NETWORK, min_size=1, max_size=2)),
    "algorithm": st.one_of(ALGORITHM, st.lists(ALGORITHM, min_size=1, max_size=3)),
    "dtype": st.one_of(DTYPE, st.lists(DTYPE, min_size=1, max_size=2)),
    "seed": st.sampled_from([0, 1, -1, 2**63, 2**64, "x", 1.5]),
    "title": TEXT,
    "description": TEXT,
}


VALID = {
    "collective": st.sampled_from(SWEPT),
    "mesh": st.one_of(st.fixed_dictionaries({"x": st.integers(1, 8)}),
                      st.fixed_dictionaries({"x": st.integers(1, 4), "y": st.integers(1, 2)})),
    "size": st.one_of(st.integers(1, 1 << 16), st.sampled_from(["1KiB", "4 KiB", "64KiB", "10 KB"]),
                      st.just({"from": "1KiB", "to": "16KiB", "factor": 4})),
    "network": st.sampled_from(["fully_connected", "switch", "ring", "torus", "hierarchical", "tpu-v5e"]),
    "algorithm": ALGORITHM,
    "dtype": st.sampled_from(["float32", "bfloat16", "float16", "int8", "int64"]),
    "seed": st.integers(0, 3),
}


@st.composite
def sweep_files(draw: st.DrawFn) -> dict[str, Any]:
    """A sweep file's data: a valid grid (optional keys now and then), then 0 to 3 keys made odd (a value of
    any kind, valid or not), deleted, or added (unknown keys, `[[point]]` tables)."""
    data = {key: draw(values) for key, values in VALID.items()
            if key in ("collective", "mesh", "size") or draw(st.booleans())}
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from([*KEYS, "sizes", "point", "extra"]))
        action = draw(st.sampled_from(["value", "value", "odd", "delete"]))
        if action == "delete":
            data.pop(key, None)
        elif key == "point":
            keys = st.sampled_from(sorted(VALID))
            data["point"] = draw(st.lists(st.dictionaries(keys, st.deferred(lambda: st.one_of(*KEYS.values())),
                                                          max_size=2), min_size=1, max_size=2))
        else:
            data[key] = draw(KEYS.get(key, ODD) if action == "value" else ODD)
    return data


def sweep_case(folder: Path, data: dict[str, Any]) -> None:
    """One case of the sweep-file fuzz: `data` written as a sweep file in `folder`, swept, its outcome checked."""
    path = folder / "sweep.toml"
    path.write_text(to_toml(data), encoding="utf-8")
    shutil.rmtree(folder / "out", ignore_errors=True)
    outcome = run(["sweep", str(path), "-o", str(folder / "out"), "--json"], shown=path.read_text())
    check_sweep(outcome, path)


def test_random_sweep_files_run_whole_or_exit_2(tmp_path_factory, in_process):
    """Sweep files with every key valid, odd or missing: exit 0 with a row for every point (timed, or the
    simulator's rejection), or exit 2 with one message; no traceback, no hang."""
    folder = tmp_path_factory.mktemp("sweeps")
    settings(max_examples=scaled(COUNTS["sweep"]), **_FILES)(given(data=sweep_files())(
        lambda data: sweep_case(folder, data)))()


# ---------------------------------------------------------------------------------------------- results files


TINY_SWEEP = ('title = "tiny"\ncollective = "psum"\nmesh = {x = 2}\nsize = [64, "1KiB"]\n'
              'algorithm = ["direct", "ring"]\n')
CAMPAIGN = ["campaign", "--ops", "psum", "ppermute", "--kinds", "forward", "vmap", "--cases", "20", "--json"]


def finish(folder: Path) -> dict[str, Path]:
    """A finished tiny sweep (4 points) and stub campaign (8 jobs) in `folder` (jobs in this process)."""
    (folder / "tiny.toml").write_text(TINY_SWEEP)
    assert main(["sweep", str(folder / "tiny.toml"), "-o", str(folder / "sweep"), "--json"]) == 0
    assert main([*CAMPAIGN, "-o", str(folder / "campaign")]) in (0, 1, 4)
    return {"sweep": folder / "sweep", "campaign": folder / "campaign"}


@pytest.fixture
def finished(tmp_path, in_process, capsys) -> dict[str, Path]:
    """A finished tiny sweep and a finished stub campaign: each one's folder."""
    folders = finish(tmp_path)
    capsys.readouterr()
    return folders


FIELDS = {"sweep": ["key", "time_s", "error", "size_bytes", "devices", "mesh", "busbw_GB_per_s", "collective"],
          "campaign": ["key", "cases", "agree", "findings", "known", "error", "op", "kind", "seed"]}
LINES = st.sampled_from(["", "{}", "[]", "null", "1", '{"key": 1}', '{"key": null}', '{"key": []}', "{", "\x00",
                         '{"key": "psum-seed0-chunk0-10cases"}', "\ufeff{}", '"key"'])


def _mutate_lines(lines: list[str], draw: st.DrawFn, kind: str) -> tuple[list[str], str]:
    """One drawn edit of a results file's lines; returns the lines and how the text ends."""
    edit = draw(st.sampled_from(["delete", "duplicate", "cut", "garbage", "retype", "drop field", "no newline",
                                 "swap"]))
    at = draw(st.integers(0, max(len(lines) - 1, 0)))
    if not lines:
        return [draw(LINES)], "\n"
    if edit == "delete":
        del lines[at]
    elif edit == "duplicate":
        lines.insert(at, lines[at])
    elif edit == "cut":
        lines[at] = lines[at][:draw(st.integers(0, len(lines[at])))]
    elif edit == "garbage":
        lines.insert(at, draw(LINES))
    elif edit == "swap":
        lines.reverse()
    elif edit == "no newline":
        return lines, ""
    else:
        try:
            row = json.loads(lines[at])
        except ValueError:
            return lines, "\n"
        if not isinstance(row, dict):
            return lines, "\n"
        field = draw(st.sampled_from(FIELDS[kind]))
        if edit == "drop field":
            row.pop(field, None)
        else:
            row[field] = draw(st.one_of(ODD, st.sampled_from(["abc", None, ["a"], {"k": 1}, 1e308, -1])))
        lines[at] = json.dumps(row)
    return lines, "\n"


def _resumed(kind: str, folder: Path, tiny: Path) -> Outcome:
    if kind == "sweep":
        return run(["sweep", str(tiny), "-o", str(folder), "--resume", "--json"])
    return run([*CAMPAIGN, "-o", str(folder), "--resume"])


@pytest.mark.parametrize("kind", ["sweep", "campaign"])
def test_mutated_results_files_resume_whole_or_exit_2(kind, finished, tmp_path):
    """A finished sweep's or campaign's results.jsonl with lines deleted, duplicated, cut, garbled or
    reversed, fields retyped or dropped, the last newline gone, then `--resume`d: exit 0 (1, 4) with a
    whole outcome, or exit 2 with one message; no traceback, no hang."""
    settings(max_examples=scaled(COUNTS["results"] // 2), **_FILES)(given(data=st.data())(
        lambda data: results_case(kind, finished, tmp_path / "resumed", data.draw)))()


def results_case(kind: str, finished: dict[str, Path], folder: Path, draw: st.DrawFn) -> None:
    """One case of the results-file fuzz: `finished[kind]` copied to `folder`, its results file edited 1 to 3
    times, resumed, its outcome checked."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(finished[kind], folder)
    lines, end = (finished[kind] / "results.jsonl").read_text().splitlines(), "\n"
    for _ in range(draw(st.integers(1, 3), label="edits")):
        lines, end = _mutate_lines(lines, draw, kind)
    (folder / "results.jsonl").write_text("\n".join(lines) + (end if lines else ""), encoding="utf-8")
    tiny = finished["sweep"].parent / "tiny.toml"
    outcome = _resumed(kind, folder, tiny)
    check_sweep(outcome, tiny) if kind == "sweep" else check_campaign(outcome)


# ---------------------------------------------------------------------------------------------- campaign flags


def _mostly(valid: st.SearchStrategy, odd: st.SearchStrategy) -> st.SearchStrategy:
    """Valid values about seven times in eight."""
    return st.sampled_from([False] * 7 + [True]).flatmap(lambda bad: odd if bad else valid)


COUNT = _mostly(st.sampled_from(["1", "2", "3", "10", "11", "25"]),
                st.sampled_from(["0", "-1", "abc", "1e3", "", " 5", "5.0", "0x10", "٣", "-99999999999999999999999"]))
SEED = _mostly(st.integers(0, 2**32).map(str), st.sampled_from(["-1", "x", "1.5", "", "2**64"]))
OPS = _mostly(st.lists(st.sampled_from(list(collectives.REGISTRY)), min_size=1, max_size=3, unique=True),
              st.lists(st.sampled_from([*collectives.REGISTRY, "nope", "", "psum "]), min_size=1, max_size=3))
KINDS = _mostly(st.lists(st.sampled_from(["forward", "transpose", "vmap"]), min_size=1, max_size=3),
                st.lists(st.sampled_from(["forward", "backward", ""]), min_size=1, max_size=2))
WORKERS = _mostly(st.sampled_from(["1", "2"]), st.sampled_from(["0", "-3", "x", "1.0"]))


_FRESH = itertools.count()


@st.composite
def campaign_lines(draw: st.DrawFn, folder: Path) -> list[str]:
    """A `meshsim campaign` command line of small budgets: each option absent, valid (mostly) or odd, into a
    new folder or (one time in four) one of two that earlier cases may have filled (an unbounded count is
    the fixed case `test_a_campaign_of_a_trillion_cases_is_refused`)."""
    shared = draw(st.integers(0, 3)) == 0
    where = folder / (draw(st.sampled_from(["a", "b"])) if shared else f"new-{next(_FRESH)}")
    argv = ["campaign", "--json", "-o", str(where), "--cases", draw(COUNT)]
    for option, values, chance in (("--ops", OPS, 3), ("--kinds", KINDS, 2), ("--seed", SEED.map(lambda s: [s]), 2),
                                   ("--workers", WORKERS.map(lambda s: [s]), 3), ("--resume", st.just([]), 2),
                                   ("--scheduler", st.just(["tcp://127.0.0.1:1"]), 6)):
        if draw(st.integers(1, chance)) == 1:
            argv += [option, *draw(values)]
    if draw(st.integers(0, 15)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(["--nope", "extra", "--cases", "-o"])))
    return argv


def test_random_campaign_command_lines_end_clearly(tmp_path_factory, in_process):
    """Random `meshsim campaign` command lines (jobs stubbed, small budgets, runs repeated into the same
    folders): exit 0, 1 or 4 as the report says, or exit 2 with one message; no traceback, no hang."""
    folder = tmp_path_factory.mktemp("campaigns")
    settings(max_examples=scaled(COUNTS["campaign"]), **_FILES)(given(argv=campaign_lines(folder))(
        lambda argv: check_campaign(run(argv))))()


# ---------------------------------------------------------------------------------------------- fixed cases


def _sweep_with(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(f"{TINY_SWEEP}{line}\n")
    return path


def test_a_sweep_dtype_of_a_comma_exits_2(tmp_path, in_process):
    """`dtype = ","` in a sweep file: one message, exit 2 (it was a SyntaxError)."""
    check_error(run(["sweep", str(_sweep_with(tmp_path, 'dtype = ","')), "-o", str(tmp_path / "out")]))


def test_a_sweep_dtype_of_a_structure_exits_2(tmp_path, in_process):
    """`dtype = '("a","f4")'` in a sweep file: one message, exit 2 (it was a ValueError)."""
    check_error(run(["sweep", str(_sweep_with(tmp_path, """dtype = '("a","f4")'""")), "-o", str(tmp_path / "out")]))


def _edited(folder: Path, edit: Any) -> None:
    path = folder / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(row) + "\n" for row in edit(rows)))


def test_resume_with_a_time_that_is_text(finished):
    """A sweep row whose `time_s` is "abc": `--resume` exits 0 with every point whole, or 2 with one message."""
    _edited(finished["sweep"], lambda rows: [dict(rows[0], time_s="abc"), *rows[1:]])
    check_sweep(_resumed("sweep", finished["sweep"], finished["sweep"].parent / "tiny.toml"),
                finished["sweep"].parent / "tiny.toml")


@pytest.mark.parametrize("kind", ["sweep", "campaign"])
def test_resume_with_a_list_as_key(kind, finished):
    """A row whose `key` is a list: `--resume` exits 0 with a whole outcome or 2 with one message."""
    _edited(finished[kind], lambda rows: [dict(rows[0], key=["a", 1]), *rows[1:]])
    outcome = _resumed(kind, finished[kind], finished["sweep"].parent / "tiny.toml")
    (check_sweep(outcome, finished["sweep"].parent / "tiny.toml") if kind == "sweep" else check_campaign(outcome))


def test_resume_with_campaign_cases_that_are_text(finished):
    """A campaign row whose `cases` is "abc": `--resume` exits 0, 1 or 4 with counts that add up, or 2."""
    _edited(finished["campaign"], lambda rows: [dict(rows[0], cases="abc"), *rows[1:]])
    check_campaign(_resumed("campaign", finished["campaign"], Path()))


def test_resume_keeps_a_complete_last_line_without_its_newline(finished):
    """One point's row missing and the last row whole but without its newline: `--resume` runs only the
    missing point, keeps the last row, and the sweep ends with every point (it said "1 of 4 points have no
    result": the line was counted done, then cut before appending)."""
    path = finished["sweep"] / "results.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:]))
    outcome = _resumed("sweep", finished["sweep"], finished["sweep"].parent / "tiny.toml")
    check_sweep(outcome, finished["sweep"].parent / "tiny.toml")
    assert outcome.code == 0
    assert sorted(path.read_text().splitlines()) == sorted(lines[1:] + [path.read_text().splitlines()[-1]])


def _limited(argv: list[str], seconds: float = 30.0) -> Outcome:
    """`meshsim *argv` as a child process under a 2 GiB address-space limit and a time limit (the real
    cluster: these reproducers end, or not, before any job runs)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        done = subprocess.run([sys.executable, "-m", "scenarios.cli", *argv], capture_output=True, text=True,
                              timeout=seconds, preexec_fn=limit, cwd=ROOT, env=dict(os.environ, COLUMNS="200"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"meshsim {argv} still running after {seconds} s")
    return Outcome(done.returncode, done.stdout, done.stderr)


def test_a_results_file_linked_to_dev_full_is_refused(tmp_path):
    """results.jsonl a symbolic link to /dev/full (endless zero bytes): `--resume` exits 2 with one message."""
    (tmp_path / "tiny.toml").write_text(TINY_SWEEP)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").symlink_to("/dev/full")
    check_error(_limited(["sweep", str(tmp_path / "tiny.toml"), "-o", str(tmp_path / "out"), "--resume"]))


def test_a_campaign_of_a_trillion_cases_is_refused(tmp_path):
    """`meshsim campaign --cases 1000000000000`: exit 2 with one message naming the bound, at once."""
    check_error(_limited(["campaign", "--cases", "1000000000000", "-o", str(tmp_path / "c")], seconds=20.0))


def test_the_file_fuzz_runs_at_least_500_cases():
    """The three properties above run at least 500 generated cases together under the default profile."""
    assert sum(COUNTS.values()) >= 500
    assert scaled(300) == settings.default.max_examples
