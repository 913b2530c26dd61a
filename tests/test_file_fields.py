"""The parsers of values read from files (`scenarios/_fields.py`) and the results files they check
(`scenarios/_results.py`): every type and range rule, with its message naming the file, line, table, key,
the value and the rule; rows written whole and read back defensively."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layouts
from scenarios import ScenarioError
from scenarios import _fields as fields
from scenarios._errors import Source
from scenarios._fields import InFile, InText
from scenarios._results import MAX_RESULTS_BYTES, append_row, open_for_append, read_rows, write_atomic, write_csv
from scenarios.cli._campaign_files import check_record
from scenarios.sweep._measure import COLUMNS
from scenarios.sweep._sweep_values import ROW_FIELDS, check_row

WHERE = InText("f.toml", "inputs", "x", "[inputs] ", 7)


def _ok(parse: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    return parse(WHERE, value, *args, **kwargs)


GOOD = [
    ("integer", fields.integer, 3, (), {}, 3),
    ("integer_at_minimum", fields.integer, 0, (), {"minimum": 0}, 0),
    ("integer_at_maximum", fields.integer, 9, (), {"minimum": 0, "maximum": 9}, 9),
    ("number_int", fields.number, 2, (), {}, 2.0),
    ("number_float", fields.number, 0.5, (), {"minimum": 0}, 0.5),
    ("string", fields.string, "ring", (), {}, "ring"),
    ("string_choice", fields.string, "b", (("a", "b"),), {}, "b"),
    ("boolean", fields.boolean, False, (), {}, False),
    ("shape_scalar", fields.shape, [], (), {}, ()),
    ("shape_zero_size", fields.shape, [0, 3], (), {}, (0, 3)),
    ("shape_64_dims", fields.shape, [1] * 64, (), {}, (1,) * 64),
    ("shape_2_48_with_zero", fields.shape, [0, 1 << 48], (), {}, (0, 1 << 48)),
    ("mesh_axes", fields.mesh_axes, {"x": 2, "y": 1}, (), {}, {"x": 2, "y": 1}),
    ("mesh_64_axes", fields.mesh_axes, {f"a{i}": 1 for i in range(64)}, (), {}, {f"a{i}": 1 for i in range(64)}),
    ("file_name", fields.file_name, "all_gather-84e8f8fe.toml", (), {}, "all_gather-84e8f8fe.toml"),
    ("table", fields.table, {"a": 1}, (), {}, {"a": 1}),
    ("optional_none", fields.optional(fields.integer), None, (), {}, None),
    ("optional_value", fields.optional(fields.integer), 4, (0,), {}, 4),
]


@pytest.mark.parametrize(("parse", "value", "args", "kwargs", "expected"), [row[1:] for row in GOOD],
                         ids=[row[0] for row in GOOD])
def test_parsers_return_good_values_in_their_type(parse: Any, value: Any, args: tuple, kwargs: dict,
                                                  expected: Any) -> None:
    """A value inside its rule comes back unchanged, in the type the caller needs (a shape as a tuple)."""
    result = _ok(parse, value, *args, **kwargs)
    assert result == expected and type(result) is type(expected)


BAD = [
    ("integer_bool", fields.integer, True, (), {}, "x=True must be an integer"),
    ("integer_float", fields.integer, 2.0, (), {}, "x=2.0 must be an integer"),
    ("integer_string", fields.integer, "3", (), {}, "x='3' must be an integer"),
    ("integer_below_0", fields.integer, -1, (), {"minimum": 0}, "x=-1 must be a non-negative integer"),
    ("integer_below_1", fields.integer, 0, (), {"minimum": 1}, "x=0 must be a positive integer"),
    ("integer_below_5", fields.integer, 4, (), {"minimum": 5}, "x=4 must be an integer >= 5"),
    ("integer_above", fields.integer, 10, (), {"minimum": 0, "maximum": 9}, "x=10 must be an integer from 0 to 9"),
    ("integer_above_only", fields.integer, 10, (), {"maximum": 9}, "x=10 must be an integer <= 9"),
    ("number_string", fields.number, "abc", (), {}, "x='abc' must be a finite number"),
    ("number_nan", fields.number, float("nan"), (), {}, "x=nan must be a finite number"),
    ("number_inf", fields.number, float("inf"), (), {"minimum": 0}, "x=inf must be a finite number >= 0"),
    ("number_bool", fields.number, False, (), {}, "x=False must be a finite number"),
    ("number_negative", fields.number, -0.5, (), {"minimum": 0}, "x=-0.5 must be a finite number >= 0"),
    ("string_int", fields.string, 3, (), {}, "x=3 must be a string"),
    ("string_not_a_choice", fields.string, "c", (("a", "b"),), {}, "x='c' must be one of 'a', 'b'"),
    ("boolean_int", fields.boolean, 1, (), {}, "x=1 must be true or false"),
    ("shape_not_list", fields.shape, 4, (), {}, "x=4 must be a list of non-negative integers"),
    ("shape_negative", fields.shape, [2, -1], (), {}, "x=[2, -1] must be a list of non-negative integers"),
    ("shape_float", fields.shape, [2.0], (), {}, "x=[2.0] must be a list of non-negative integers"),
    ("shape_65_dims", fields.shape, [1] * 65, (), {}, "at most 64 of them"),
    ("shape_product_2_62", fields.shape, [0, 1 << 62], (), {}, "x=[0, 4611686018427387904] must be a list"),
    ("shape_product_over_2_48", fields.shape, [1 << 24, (1 << 24) + 1], (), {}, "multiplying to at most 2**48"),
    ("mesh_empty", fields.mesh_axes, {}, (), {}, "x={} must be a table of axis name = positive size"),
    ("mesh_zero", fields.mesh_axes, {"x": 0}, (), {}, "x={'x': 0} must be a table of axis name = positive size"),
    ("mesh_65_axes", fields.mesh_axes, {f"a{i}": 1 for i in range(65)}, (), {}, "(1 to 64 axes)"),
    ("mesh_list", fields.mesh_axes, [2], (), {}, "x=[2] must be a table"),
    ("dtype_comma", fields.dtype, ",", (), {}, "x=',' must name a numeric numpy dtype"),
    ("dtype_fields", fields.dtype, '("a","f4")', (), {}, "x='(\"a\",\"f4\")' must name a numeric numpy dtype"),
    ("dtype_alias", fields.dtype, "f4", (), {}, "x='f4' must name a numeric numpy dtype"),
    ("dtype_complex", fields.dtype, "complex64", (), {}, "one of: bool, int8"),
    ("dtype_int4", fields.dtype, "int4", (), {}, "x='int4' must name"),
    ("dtype_not_str", fields.dtype, 4, (), {}, "x=4 must name a numeric numpy dtype"),
    ("dtype_not_among", fields.dtype, "bool", (("int32",),), {}, "x='bool' must name a numeric numpy dtype, "
                                                                 "e.g. 'float32' or 'int32'; one of: int32"),
    ("file_name_path", fields.file_name, "../x.toml", (), {}, "x='../x.toml' must be a plain file name"),
    ("file_name_dot", fields.file_name, ".hidden", (), {}, "must be a plain file name"),
    ("file_name_slash", fields.file_name, "a/b", (), {}, "must be a plain file name"),
    ("file_name_long", fields.file_name, "a" * 201, (), {}, "at most 200 characters"),
    ("table_list", fields.table, [1], (), {}, "x=[1] must be a table"),
    ("table_int_key", fields.table, {1: 2}, (), {}, "must be a table"),
    ("list_of_not_list", fields.list_of, "abc", (fields.string, "strings"), {}, "x='abc' must be a list of strings"),
    ("list_of_bad_item", fields.list_of, ["a", 3], (fields.string, "strings"), {}, "x[1]=3 must be a string"),
]


@pytest.mark.parametrize(("parse", "value", "args", "kwargs", "match"), [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_parsers_refuse_with_place_value_and_rule(parse: Any, value: Any, args: tuple, kwargs: dict,
                                                  match: str) -> None:
    """A value outside its rule raises a ScenarioError reading `path:line: [table] key=value must ...`."""
    with pytest.raises(ScenarioError, match=r"^f\.toml:7: \[inputs\] (?=x).*" + re.escape(match)):
        _ok(parse, value, *args, **kwargs)


@pytest.mark.parametrize("name", fields.DTYPE_NAMES)
def test_every_documented_dtype_name_is_a_numeric_dtype(name: str) -> None:
    """Each name is looked up to the numpy dtype of that name (bfloat16 and the float8 types through
    ml_dtypes): a numeric one, or a float8 type, which the collectives move but do not reduce."""
    dtype = fields.dtype(WHERE, name)
    assert dtype == np.dtype(name) and (layouts.is_numeric(dtype) != (dtype in layouts.FLOAT8))
    assert layouts.is_movable(dtype)
    assert (dtype == layouts.BFLOAT16) == (name == "bfloat16")


def test_a_long_or_deep_value_is_shown_cut_to_one_short_line() -> None:
    """Messages echo at most `MAX_SHOWN` characters of a value, and a value too deep to repr does not raise."""
    with pytest.raises(ScenarioError) as error:
        fields.string(WHERE, ["x" * 1000])
    assert "x=['xxxx" in str(error.value) and "...' must be" not in str(error.value)
    assert len(str(error.value)) < 120
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert "nested too deeply" in fields.shown(deep)


def test_a_toml_place_finds_the_line_of_the_key_in_its_table() -> None:
    """`InFile` points at the key's line in table number `index`, with the label before the message."""
    source = Source("s.toml", "[[args]]\nshape = [2]\n\n[[args]]\nseed = 1\nshape = [3]\n")
    where = InFile(source, "args", "shape", "[[args]] number 1: ", 1)
    with pytest.raises(ScenarioError, match=r"^s\.toml:6: \[\[args\]\] number 1: shape=\[-3\] must be a list"):
        fields.shape(where, [-3])
    with pytest.raises(ScenarioError, match=r"^s\.toml:5: \[\[args\]\] number 1: seed=-1 must be a non-negative"):
        fields.integer(where.at("seed"), -1, minimum=0)


# Results files.

def _row(key: str = "k1", **fields_: Any) -> dict[str, Any]:
    return {"key": key, **fields_}


def _write_lines(path: Path, *lines: str, newline: bool = True) -> None:
    path.write_text("\n".join(lines) + ("\n" if newline else ""), encoding="utf-8")


def test_rows_written_are_read_back_in_order(tmp_path: Path) -> None:
    """append_row writes whole lines that read_rows returns as written (non-finite numbers as null)."""
    path = tmp_path / "out" / "results.jsonl"
    with open_for_append(path) as stream:
        append_row(stream, _row("a", time_s=1.5))
        append_row(stream, _row("b", time_s=float("inf")))
    assert read_rows(path) == [_row("a", time_s=1.5), _row("b", time_s=None)]
    assert path.read_bytes().endswith(b"\n") and path.read_bytes().count(b"\n") == 2


def test_a_missing_file_has_no_rows(tmp_path: Path) -> None:
    """No file, no rows (a new sweep or campaign)."""
    assert read_rows(tmp_path / "results.jsonl") == []


def test_a_whole_last_row_without_newline_is_kept_and_ended(tmp_path: Path) -> None:
    """A complete last row lacking its newline counts as done, and open_for_append adds the newline, so
    reading again gives the same rows (never counted done and then dropped)."""
    path = tmp_path / "results.jsonl"
    _write_lines(path, json.dumps(_row("a")), json.dumps(_row("b")), newline=False)
    assert [row["key"] for row in read_rows(path)] == ["a", "b"]
    with open_for_append(path) as stream:
        append_row(stream, _row("c"))
    assert [row["key"] for row in read_rows(path)] == ["a", "b", "c"]


def test_a_last_line_cut_short_is_dropped_and_cut_off(tmp_path: Path) -> None:
    """A last line a stop cut short is not a row, and open_for_append removes it before appending."""
    path = tmp_path / "results.jsonl"
    _write_lines(path, json.dumps(_row("a")), json.dumps(_row("b"))[:-3], newline=False)
    assert [row["key"] for row in read_rows(path)] == ["a"]
    with open_for_append(path) as stream:
        append_row(stream, _row("c"))
    assert [row["key"] for row in read_rows(path)] == ["a", "c"]
    assert path.read_text().count("\n") == 2


@pytest.mark.parametrize(("line", "why"), [
    ("not json", "not a result"), ('{"time_s": 1}', "not a result"), ('{"key": ["a"]}', "not a result"),
    ("[" * 100_000, "not a result"), ('"a string"', "not a result"), ("\udcff", "not a result"),
])
def test_a_line_that_is_not_a_row_is_refused_with_its_number(tmp_path: Path, line: str, why: str) -> None:
    """A corrupt line before the last: the file and line number, what a row is, and how to go on."""
    path = tmp_path / "results.jsonl"
    path.write_bytes(json.dumps(_row("a")).encode() + b"\n" + line.encode("utf-8", "surrogateescape") + b"\n")
    with pytest.raises(ScenarioError, match=rf"results\.jsonl:2: {why}.*repair or delete the line"):
        read_rows(path)


def test_a_row_breaking_its_check_is_refused_with_line_and_field(tmp_path: Path) -> None:
    """`check` sees each row with its place: the message names line, field, value and rule."""
    path = tmp_path / "results.jsonl"
    _write_lines(path, json.dumps(_row("a", n=1)), json.dumps(_row("b", n="abc")))

    def check(where: InText, row: dict[str, Any]) -> dict[str, Any]:
        fields.integer(where.at("n"), row["n"], minimum=0)
        return row

    with pytest.raises(ScenarioError, match=r"results\.jsonl:2: results row: n='abc' must be a non-negative "
                                            r"integer; repair or delete the line"):
        read_rows(path, check)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_results_file_that_is_a_device_is_refused(tmp_path: Path) -> None:
    """A symlink to /dev/full (endless zeros) is refused at once, not read forever; appending too."""
    path = tmp_path / "results.jsonl"
    path.symlink_to("/dev/full")
    with pytest.raises(ScenarioError, match="must be a regular file"):
        read_rows(path)
    with pytest.raises(ScenarioError, match="must be a regular file"):
        open_for_append(path)


def test_a_results_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    """A file larger than MAX_RESULTS_BYTES (sparse here) is refused by its size, before reading."""
    path = tmp_path / "results.jsonl"
    with path.open("wb") as stream:
        stream.truncate(MAX_RESULTS_BYTES + 1)
    with pytest.raises(ScenarioError, match=f"more than a results file may \\({MAX_RESULTS_BYTES}\\)"):
        read_rows(path)


def test_whole_files_are_replaced_by_rename(tmp_path: Path) -> None:
    """write_atomic and write_csv replace the file whole and leave no temporary file; an unwritable place is a
    ScenarioError."""
    path = tmp_path / "results.csv"
    path.write_text("old")
    write_csv(path, [{"a": 1, "b": None}], ["a", "b"])
    assert path.read_bytes() == b"a,b\r\n1,\r\n"
    write_atomic(tmp_path / "f.toml", "x = 1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.toml", "results.csv"]
    with pytest.raises(ScenarioError, match="cannot write the file"):
        write_atomic(tmp_path / "missing" / "f.toml", "x")


def test_the_sweep_row_fields_are_the_sweep_columns() -> None:
    """Every column a sweep writes has its parser, and no other."""
    assert set(ROW_FIELDS) == set(COLUMNS)


SWEEP_ROW = {"key": "0123456789abcdef", "collective": "psum", "mesh": "x=2", "axis_name": "x", "devices": 2,
             "network": "ring", "algorithm": "direct", "algorithm_run": "direct", "dtype": "float32", "seed": 0,
             "size_bytes": 64, "count": 16, "time_s": 1e-6, "algbw_GB_per_s": 0.1, "busbw_GB_per_s": 0.1,
             "messages": 2, "between_devices": 2, "bytes_sent": 128, "wall_s": 0.01, "error": None, "payload": "bytes"}


@pytest.mark.parametrize(("change", "match"), [
    ({"time_s": "abc"}, "time_s='abc' must be a finite number >= 0"),
    ({"collective": "nope"}, "collective='nope' must be one of"),
    ({"size_bytes": 0}, "size_bytes=0 must be a positive integer"),
    ({"devices": [2]}, "devices=[2] must be a positive integer"),
    ({"error": 5}, "error=5 must be a string"),
    ({"time_s": None}, "time_s=None must be given in a row without an error"),
    ({"algbw_GB_per_s": None}, "algbw_GB_per_s=None must be given in a row without an error"),
    ({"payload": "hollow"}, "payload='hollow' must be one of"),
])
def test_sweep_rows_are_checked_column_by_column(change: dict[str, Any], match: str) -> None:
    """A sweep row with a wrongly typed column is refused naming it; a rejected point's row needs no figures, and
    a row that took no simulated time (one device) no bandwidths."""
    assert check_row(WHERE, SWEEP_ROW) == SWEEP_ROW
    rejected = dict(SWEEP_ROW, error="no", count=None, time_s=None, algorithm_run=None)
    assert check_row(WHERE, rejected)["error"] == "no"
    alone = dict(SWEEP_ROW, devices=1, time_s=0.0, algbw_GB_per_s=None, busbw_GB_per_s=None, messages=1,
                 between_devices=0, bytes_sent=0)  # one device: no time, so no bandwidth, as the sweep writes it
    assert check_row(WHERE, alone) == alone
    with pytest.raises(ScenarioError, match=re.escape(match)):
        check_row(WHERE, dict(SWEEP_ROW, **change))


RECORD = {"key": "psum-seed0-chunk0-10cases", "op": "psum", "kind": "forward", "seed": 5, "cases": 10, "agree": 9,
          "known": {}, "findings": [{"name": "psum-abc.toml", "differences": ["x"], "replay": "differs"}],
          "seconds": 1.0, "cpu_seconds": 0.5, "worker": "h:1"}


@pytest.mark.parametrize(("change", "match"), [
    ({"cases": "abc"}, "cases='abc' must be a non-negative integer"),
    ({"agree": 11}, "agree=11 must be an integer from 0 to 10"),
    ({"op": "nope"}, "op='nope' must be one of"),
    ({"kind": "vmap"}, "must name the record's op and kind: start with 'psum-vmap-seed'"),
    ({"known": {"JAX-1": -1}}, "known['JAX-1']=-1 must be a non-negative integer"),
    ({"known": [1]}, "known=[1] must be a table"),
    ({"findings": "abc"}, "findings='abc' must be a list of findings"),
    ({"findings": [{"name": "../x", "replay": "r"}]}, "findings[0].name='../x' must be a plain file name"),
    ({"findings": [{"name": "a.toml", "replay": 3}]}, "findings[0].replay=3 must be a string"),
    ({"seconds": "1"}, "seconds='1' must be a finite number"),
])
def test_campaign_records_are_checked_field_by_field(change: dict[str, Any], match: str) -> None:
    """A campaign record with a wrongly typed field is refused naming it."""
    assert check_record(WHERE, RECORD) == RECORD
    with pytest.raises(ScenarioError, match=re.escape(match)):
        check_record(WHERE, dict(RECORD, **change))
