"""The fuzz suite: mutated scenario files and random API arguments end in the spec's answer or a clear error.

Scenario files are the library's (`scenarios/library/*.toml`) with keys deleted, retyped or added, sizes made
huge or negative, values nested deeply, bytes inserted and whole files re-encoded. Each runs in-process
through `meshsim run` under a time limit. Its outcome must be exit 0 with the executable spec's answer (for
a collective that ran), or exit 2 with one `meshsim: error:` message; never a traceback, an exception
escaping `main`, nor a hang. API argument sets call a few collectives through `sim.shard_map` with random
shapes, dtypes and parameters: they raise only `MeshError`s or return the spec's answer.

Case counts scale with the Hypothesis profile (`HYPOTHESIS_PROFILE=fuzz` multiplies them by ten).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from strategies import Case, differences, run_simulator, run_spec
from test_library import _case
from test_mutation import _rotated

import collectives._all_gather
import scenarios
import sim
from scenarios import ScenarioResult
from scenarios.cli import main

LIBRARY = Path(__file__).resolve().parents[1] / "scenarios" / "library"
TEXTS = {p.name: p.read_text() for p in sorted(LIBRARY.glob("*.toml"))}
_LIMIT_S = 20.0  # a case still running after this long is a hang


def scaled(n: int) -> int:
    """`n` cases under the default profile (300 per property), scaled by the loaded profile's count."""
    return max(1, n * settings.default.max_examples // 300)


COUNTS = {"data": 700, "bytes": 500, "api": 900}  # cases per property under the default profile


class Hang(BaseException):
    """A case outlasted `_LIMIT_S` (a BaseException, so no `except Exception` in the code under test hides it)."""


@contextlib.contextmanager
def time_limit(seconds: float = _LIMIT_S):
    """Raise `Hang` in the main thread (where greenlet device programs run too) after `seconds`."""
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------- TOML writer


@dataclass(frozen=True)
class Nested:
    """A value nested `depth` levels deep, as arrays or inline tables (written as text, not recursively)."""

    depth: int
    table: bool = False


def _value(v: Any) -> str:
    if isinstance(v, Nested):
        return ("{a = " * v.depth + "1" + "}" * v.depth) if v.table else ("[" * v.depth + "1" + "]" * v.depth)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_value(x)}" for k, x in v.items()) + "}"
    return "[" + ", ".join(_value(x) for x in v) + "]"


def to_toml(data: dict) -> str:
    """`data` as TOML text: top-level tables as `[name]`, lists of tables as `[[name]]`, the rest inline."""
    lines = [f"{json.dumps(k)} = {_value(v)}" for k, v in data.items()
             if not isinstance(v, dict) and not _tables(v)]
    for k, v in data.items():
        if isinstance(v, dict):
            lines += [f"[{json.dumps(k)}]"] + [f"{json.dumps(a)} = {_value(b)}" for a, b in v.items()]
        elif _tables(v):
            for item in v:
                lines += [f"[[{json.dumps(k)}]]"] + [f"{json.dumps(a)} = {_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"


def _tables(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


# ---------------------------------------------------------------------------------------------- mutations


SIZES = st.sampled_from([0, -1, -2, -2**63, 2**63 - 1, 2**31, 2**32 + 1, 10**6, 10**9, 2**40]) | st.integers(-3, 9)
STRINGS = st.sampled_from(["", "x", "i", "y", "z", "psum", "all_gather", "ring", "float32", "int8", "complex64",
                           "bool", "<U1", "P('i')", "P()", "1/0", "\x00", "💥", "é" * 3, "a" * 10_000])
LEAVES = st.one_of(SIZES, STRINGS, st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                   st.builds(Nested, st.sampled_from([2, 10, 100, 1000, 5000]), st.booleans()))
VALUES = st.one_of(LEAVES, st.lists(SIZES, max_size=5), st.lists(st.lists(SIZES, max_size=3), max_size=3),
                   st.dictionaries(st.sampled_from(["i", "x", "y", "z", "shape", "seed", "dtype"]), SIZES,
                                   max_size=3))


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    """Every path below `node` (dict keys and list indices), parents before children."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    found = []
    for key, child in items:
        found.append(path + (key,))
        found += _paths(child, path + (key,))
    return found


def _mutate(data: dict, draw) -> str:
    """Apply one drawn mutation to `data` in place; return its name (for the report)."""
    paths = _paths(data)
    kind = draw(st.sampled_from(["delete", "retype", "size", "add", "nest"]))
    if kind == "add" or not paths:
        dicts = [p for p in [()] + paths if isinstance(_at(data, p), dict)]
        where = _at(data, draw(st.sampled_from(dicts)))
        key = draw(st.sampled_from(["extra", "shape", "seed", "fill", "dtype", "axes", "op", "source", "x"]))
        where[key] = draw(VALUES)
        return f"add {key}"
    path = draw(st.sampled_from(paths))
    parent, key = _at(data, path[:-1]), path[-1]
    if kind == "delete":
        del parent[key]
    elif kind == "size":
        parent[key] = draw(SIZES)
    elif kind == "nest":
        parent[key] = Nested(draw(st.sampled_from([2, 50, 500, 3000])), draw(st.booleans()))
    else:
        parent[key] = draw(VALUES)
    return f"{kind} {path}"


def _at(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


# ---------------------------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What `meshsim run` did: exit code, captured streams and the results `scenarios.run` returned."""

    code: int
    out: str
    err: str
    results: list = field(default_factory=list)


def run_cli(path: Path, *flags: str) -> Outcome:
    """`meshsim run path --max-memory 1GiB *flags` in this process, under the time limit."""
    results: list = []
    real_run = scenarios.run

    def spy(*a, **kw):
        results.append(real_run(*a, **kw))
        return results[-1]

    out, err = io.StringIO(), io.StringIO()
    with (mock.patch.object(scenarios, "run", spy), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          time_limit()):
        code = main(["run", str(path), "--max-memory", "1GiB", *flags])
    return Outcome(code, out.getvalue(), err.getvalue(), results)


def check_outcome(outcome: Outcome, flags: tuple[str, ...], program: bool) -> None:
    """Exit 0 with the spec's answer, or exit 2 with a `meshsim: error:` message; never a traceback."""
    event(f"exit {outcome.code}" + (" (ran)" if outcome.results else ""))
    assert "Traceback" not in outcome.err, outcome.err
    if program and "--allow-code" not in flags:
        assert outcome.code == 2, f"a program ran without --allow-code (exit {outcome.code})"
    if outcome.code == 2:
        first = outcome.err.splitlines()[0] if outcome.err else ""
        assert first.startswith("meshsim: error: ") and len(first) > len("meshsim: error: ") + 5, outcome.err
        return
    assert outcome.code == 0, f"exit {outcome.code}\n{outcome.err}"
    for result in outcome.results:
        if isinstance(result, ScenarioResult):
            found = differences(run_spec(_case(result.scenario)), list(result.outputs), "spec", "meshsim run")
            assert not found, "\n".join(found)
            if "--json" in flags:
                _check_json(outcome.out, result)


def _check_json(text: str, result: ScenarioResult) -> None:
    """`--json` printed the outputs the run computed."""
    devices = json.loads(text)["devices"]
    for device, output in zip(devices, result.outputs):
        assert device["dtype"] == str(output.dtype)
        if output.dtype.kind in "biuf":
            printed = np.asarray(device["output"], output.dtype)
            if output.size == 0:  # JSON's [] cannot keep an empty array's trailing dimensions
                assert printed.size == 0, device["device"]
                continue
            assert np.array_equal(printed, output, equal_nan=output.dtype.kind == "f"), device["device"]


_FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                    HealthCheck.filter_too_much])
FLAGS = st.sampled_from([(), ("--json",), ("--allow-code",), ("--allow-code", "--json"), ("--full",)])


def mutated_file(folder: Path, name: str, data) -> tuple[Path, dict]:
    """Library file `name` with up to three mutations drawn from `data` (`_mutate`), written under `folder`:
    its path and its tree."""
    tree = tomllib.loads(TEXTS[name])
    steps = [_mutate(tree, data.draw) for _ in range(data.draw(st.integers(0, 3), label="mutations"))]
    data.draw(st.just(steps), label="applied")
    path = folder / name
    path.write_text(to_toml(tree), encoding="utf-8")
    return path, tree


def _scenario_data_property(tmp: Path, chosen: settings | None = None):
    """The mutated-file property, writing its files under `tmp` (with `chosen` settings, or the suite's)."""
    @(chosen or settings(max_examples=scaled(COUNTS["data"]), **_FUZZ))
    @given(name=st.sampled_from(sorted(TEXTS)), flags=FLAGS, data=st.data())
    def mutated_data(name, flags, data):
        program = "program" in tomllib.loads(TEXTS[name])
        path, tree = mutated_file(tmp, name, data)
        program = program and isinstance(tree.get("program"), dict) and isinstance(tree["program"].get("source"), str)
        check_outcome(run_cli(path, *flags), flags, program)
    return mutated_data


def test_mutated_scenario_files_run_right_or_exit_2(tmp_path):
    """Library files with keys deleted, retyped or added, huge or negative sizes and deep nesting: exit 0
    with the spec's answer or exit 2 with one `meshsim: error:` message; no traceback, no hang."""
    _scenario_data_property(tmp_path)()


BYTE_EDITS = st.sampled_from(["insert", "delete", "truncate", "utf-16", "latin-1", "bom", "nul"])


@settings(max_examples=scaled(COUNTS["bytes"]), **_FUZZ)
@given(name=st.sampled_from(sorted(TEXTS)), edit=BYTE_EDITS, data=st.data())
def test_scenario_files_with_bad_bytes_exit_0_or_2(tmp_path_factory, name, edit, data):
    """Library files with bytes inserted or cut, or written in another encoding: exit 0 or 2 with one message."""
    raw = (TEXTS[name] + "\n# é ☃ 💥\n").encode()
    at = data.draw(st.integers(0, len(raw)), label="at")
    if edit == "insert":
        raw = raw[:at] + data.draw(st.binary(min_size=1, max_size=8), label="bytes") + raw[at:]
    elif edit == "delete":
        raw = raw[:at] + raw[at + data.draw(st.integers(1, 40)):]
    elif edit == "truncate":
        raw = raw[:at]
    elif edit == "nul":
        raw = raw[:at] + b"\x00" + raw[at:]
    elif edit == "bom":
        raw = b"\xef\xbb\xbf" + raw
    else:
        raw = raw.decode().encode(edit, errors="replace")
    path = tmp_path_factory.mktemp("bytes") / name
    path.write_bytes(raw)
    flags = data.draw(FLAGS, label="flags")
    check_outcome(run_cli(path, *flags), flags, b"[program]" in raw and b"source" in raw)


# ---------------------------------------------------------------------------------------------- API arguments


DTYPES = st.sampled_from(["int32", "int8", "float32", "float64", "bool", "complex64", "uint8"])


@st.composite
def api_cases(draw, ops=("all_gather", "all_to_all", "psum", "pmax", "psum_scatter", "ppermute")) -> Case:
    """A call of one of `ops` with random mesh, shapes, dtypes and parameters, valid or not."""
    op = draw(st.sampled_from(ops))
    names = draw(st.lists(st.sampled_from(["i", "j"]), min_size=1, max_size=2, unique=True))
    mesh = {n: draw(st.integers(1, 4)) for n in names}
    devices = math.prod(mesh.values())
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    dtype = draw(DTYPES)
    x = [(np.arange(math.prod(shape)) + 7 * d).astype(dtype).reshape(shape) for d in range(devices)]
    axis_name = draw(st.sampled_from(names) | st.just(tuple(names)) | st.sampled_from(["z", (), ("i", "i")]))
    ints = st.integers(-4, 4)
    params = {"axis_name": axis_name}
    optional = {"all_gather": {"axis": ints, "tiled": st.booleans()},
                "all_to_all": {"split_axis": ints, "concat_axis": ints, "tiled": st.booleans()},
                "psum_scatter": {"scatter_dimension": ints, "tiled": st.booleans()},
                "psum": {}, "pmax": {},
                "ppermute": {"perm": st.lists(st.tuples(ints, ints), max_size=5)}}[op]
    for key, values in optional.items():
        if key in ("split_axis", "concat_axis", "perm") or draw(st.booleans()):
            params[key] = draw(values)
    if op != "ppermute" and draw(st.integers(0, 4)) == 0:
        size = mesh[names[0]]
        params["axis_index_groups"] = draw(st.lists(st.lists(st.integers(-1, size), max_size=size), max_size=size))
    return Case(op, mesh, (tuple(x),), params)


def check_api_case(case: Case) -> None:
    """The simulator raises a MeshError or returns the spec's answer; it never crashes nor hangs."""
    try:
        with time_limit():
            answer = run_simulator(case)
    except sim.MeshError as error:
        event(type(error).__name__)
        return
    event("ran")
    found = differences(run_spec(case), answer)
    assert not found, f"{len(found)} difference(s) on\n{case!r}\n  " + "\n  ".join(found)


@settings(max_examples=scaled(COUNTS["api"]), **_FUZZ)
@given(case=api_cases())
def test_random_api_arguments_raise_mesh_errors_or_give_the_spec(case):
    """Random arguments to all_gather, all_to_all, psum, pmax, psum_scatter and ppermute through
    `sim.shard_map`: only `MeshError`s, or the spec's answer bit for bit."""
    check_api_case(case)


# ---------------------------------------------------------------------------------------------- the suite itself


def test_default_profile_runs_at_least_2000_cases():
    """The properties above run at least 2,000 generated cases together under the default profile."""
    assert sum(COUNTS.values()) >= 2000
    assert scaled(300) == settings.default.max_examples


def test_the_test_run_profiles_draw_the_same_cases_every_run():
    """`default` and `quick`, the profiles `make test` runs under, are derandomized and keep no database, so
    the suite's verdict cannot depend on the run; `explore` and `fuzz` are random."""
    for name in ("default", "quick"):
        chosen = settings.get_profile(name)
        assert chosen.derandomize and chosen.database is None, name
    for name in ("explore", "fuzz"):
        assert not settings.get_profile(name).derandomize, name
    if os.environ.get("HYPOTHESIS_PROFILE", "default") in ("default", "quick"):
        assert settings.default.derandomize and settings.default.database is None


# each search is meant to fail: no explain phase (it reruns the shrunk failure only to annotate its report)
_SEARCH = settings(max_examples=300, database=None, deadline=None, derandomize=True,
                   phases=[p for p in Phase if p != Phase.explain], suppress_health_check=list(HealthCheck))


def test_planted_protocol_bug_is_found_by_the_scenario_fuzz(monkeypatch, tmp_path):
    """With all_gather's protocol placing chunks at the wrong place, the mutated-file property fails."""
    monkeypatch.setattr(collectives._all_gather, "_protocol", _rotated(collectives._all_gather._protocol,
                                                                       lambda a: a.axis))
    prop = _scenario_data_property(tmp_path, _SEARCH)
    with pytest.raises(AssertionError, match=r"spec .*meshsim run|meshsim run"):
        prop()


def test_planted_protocol_bug_is_found_by_the_api_fuzz(monkeypatch):
    """With all_gather's protocol placing chunks at the wrong place, the API property fails."""
    monkeypatch.setattr(collectives._all_gather, "_protocol", _rotated(collectives._all_gather._protocol,
                                                                       lambda a: a.axis))
    prop = _SEARCH(given(case=api_cases(ops=("all_gather",)))(check_api_case))
    with pytest.raises(AssertionError, match=r"difference\(s\) on"):
        prop()
