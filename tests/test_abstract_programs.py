"""Abstract values inside device programs (`sim.Varying` of a hollow dtype): a program reads the logical dtype
(`x.dtype == np.float32`, `np.finfo`, `np.promote_types`), so one branching on it runs the run with bytes'
collectives (same trace, calls and end time, on drawn dtypes); numpy refusing an abstract value's stand-in
(`np.asarray(x) * 2`) is an `AbstractValueError` saying what to do; local work warns of nothing; refusals
name the logical dtype (ragged_all_to_all's operand and output) and give advice that fits abstract operands
(the call budget); the reference page's example shows what it prints."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import layouts
import sim
from sim import P

_DTYPES = [np.float32, np.float64, np.int8, np.int32, np.float16, layouts.BFLOAT16, np.complex64, np.bool_]
_PAGE = Path(__file__).parent.parent / "docs" / "reference" / "abstract-payloads.md"


def _both(body, dtype=np.float32):
    """`body`'s run on real operands of `dtype` and on abstract ones of the same shape and dtype, over 2
    devices."""
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return f.run(np.ones(4, dtype)), f.run(sim.ShapeDtypeStruct((4,), dtype))


def _records(run) -> tuple:
    calls = [(c.device, c.collective, c.call, c.members, c.enter_s, c.met_s, c.exit_s, c.algorithm)
             for c in run.simulation.calls]
    return json.dumps(run.trace.to_json()), calls, run.end_time_s


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_program_reads_an_abstract_values_logical_dtype(dtype):
    """What a program reads off a value's dtype (the dtype, its kind, finfo/iinfo, promotion, itemsize, nbytes,
    the dtypes of zeros_like, astype and view of it) is the same abstract as with bytes, and a view of an
    abstract value stays abstract; before, an abstract value's dtype was its hollow stand-in (kind 'V'), and
    finfo and promote_types raised."""
    seen: dict[str, list] = {"real": [], "abstract": []}

    def body(x):
        info = np.finfo(x.dtype).bits if np.issubdtype(x.dtype, np.inexact) else \
            np.iinfo(x.dtype).bits if np.issubdtype(x.dtype, np.integer) else None
        seen["abstract" if sim.memory.is_abstract(x) else "real"].append(
            (x.dtype, x.dtype == dtype, x.dtype.kind, info, np.promote_types(x.dtype, np.float32), x.itemsize,
             x.nbytes, np.zeros_like(x).dtype, x.astype(x.dtype).dtype, x.view(x.dtype).dtype, np.result_type(x, 1),
             sim.memory.is_abstract(x.view(x.dtype)) == sim.memory.is_abstract(x)))
        return x.astype(x.dtype)

    real, abstract = _both(body, dtype=dtype)
    assert seen["abstract"] == seen["real"] and seen["real"][0][0] == np.dtype(dtype)
    assert isinstance(abstract.outputs, sim.ShapeDtypeStruct) and abstract.outputs.dtype == real.outputs.dtype
    assert str(abstract.program(0)) == str(real.program(0))


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(_DTYPES), chosen=st.sampled_from(_DTYPES), floating=st.booleans())
def test_a_program_branching_on_dtype_runs_the_same_collectives_abstract(dtype, chosen, floating):
    """A program choosing its collective by its operand's dtype (`==`, `np.issubdtype`) gives the run with
    bytes' trace, call records and end time when its operands are abstract; before, the abstract run took
    the other branch (psum with bytes, all_gather abstract)."""
    def body(x):
        pick = np.issubdtype(x.dtype, np.floating) if floating else x.dtype == chosen
        return collectives.psum(x, "x") if pick else collectives.all_gather(x, "x", tiled=True)

    real, abstract = _both(body, dtype=dtype)
    assert _records(abstract) == _records(real)
    assert (abstract.outputs.shape, abstract.outputs.dtype) == (real.outputs.shape, real.outputs.dtype)


@pytest.mark.parametrize("read", [
    lambda x: np.asarray(collectives.psum(x, "x")) * 2,
    lambda x: np.array(x) + np.ones(2, np.float32),
    lambda x: np.exp(np.asarray(x)),
    lambda x: np.asarray(x) > 0,
    lambda x: np.asarray(x).astype(np.float32),
], ids=["asarray*2", "array+ones", "exp(asarray)", "asarray>0", "asarray.astype"])
def test_numpy_on_an_abstract_values_stand_in_is_refused_saying_what_to_do(read):
    """A plain numpy array of an abstract value (np.asarray, np.array) computed on is refused as an
    AbstractValueError that says there are no values and what to do, naming the device and the line; it
    raised numpy's UFuncTypeError naming a structured dtype."""
    f = sim.shard_map(read, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    assert isinstance(f.run(np.ones(4, np.float32)).outputs, np.ndarray)
    with pytest.raises(sim.memory.AbstractValueError, match=r"no values, and np\.asarray\(x\) or np\.array\(x\) of "
                                                            r"one gives a plain numpy array.*compute on x itself") as e:
        f.run(sim.ShapeDtypeStruct((4,), np.float32))
    assert any("raised on device 0" in note and "test_abstract_programs.py" in note for note in e.value.__notes__)


def test_local_work_on_abstract_values_warns_of_nothing():
    """A softmax on abstract values (its stand-ins' 0/0) warns of nothing, under numpy's strictest error state
    and with warnings as errors; it printed "RuntimeWarning: invalid value encountered"."""
    body = lambda x: np.exp(x - x.max()) / np.exp(x - x.max()).sum() / (x - x) + np.log(x - x)
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        assert f(sim.ShapeDtypeStruct((4,), np.float32)) == sim.ShapeDtypeStruct((4,), np.float32)


@pytest.mark.parametrize(("operand", "output", "match"), [
    (sim.ShapeDtypeStruct((6,), np.int64), np.zeros(8, np.int64),
     r"operand is abstract int64\[3\] and output is int64\[4\]; .*both abstract \(a sim.ShapeDtypeStruct each\) or "
     r"both concrete"),
    (np.zeros(6, np.int64), sim.ShapeDtypeStruct((8,), np.int64),
     r"operand is int64\[3\] and output is abstract int64\[4\]; .*both abstract"),
    (sim.ShapeDtypeStruct((6,), np.int64), sim.ShapeDtypeStruct((8,), np.float32),
     r"operand is abstract int64\[3\] and output is abstract float32\[4\]; they must share the dtype and every "
     r"dimension after the first\n"),
], ids=["abstract-operand", "abstract-output", "both-abstract"])
def test_ragged_operand_and_output_refused_naming_logical_dtypes(operand, output, match):
    """ragged_all_to_all's operand and output that differ are named by their logical dtypes, abstract ones as
    such, and mixing abstract with concrete is told as the rule broken; it read "operand is {'names': [], ...}"."""
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=sim.Mesh({"x": 2}),
                      in_specs=(P("x"),) * 6, out_specs=P("x"))
    steering = [np.array([0, 1, 0, 2]), np.array([1, 2, 2, 1]), np.array([0, 0, 1, 2]), np.array([1, 2, 2, 1])]
    with pytest.raises(sim.InvalidTypeError, match=rf"device 0: ragged_all_to_all: {match}"):
        f.run(operand, output, *steering)


def test_a_budget_refusal_of_abstract_operands_gives_advice_that_fits():
    """A call refused for its trace whose operands are abstract already advises raising the limit or sending
    fewer messages, not passing abstract payloads; operands with bytes are still pointed to abstract ones."""
    f = sim.shard_map(lambda v: collectives.psum(v, "x"), mesh=sim.Mesh({"x": 4096}, max_memory_bytes=1 << 30),
                      in_specs=P("x"), out_specs=P())
    with pytest.raises(sim.MemoryLimitError, match=r"device 0: psum .* \(trace 8 GiB\).*; the operands are abstract "
                                                   r"payloads already .*max_memory_bytes=N.*send fewer messages") as e:
        f.run(sim.ShapeDtypeStruct((4096,), np.float32))
    assert "pass them as abstract" not in str(e.value)
    with pytest.raises(sim.MemoryLimitError, match="pass them as abstract payloads"):
        sim.check_call("psum", 0, {"outputs": 700, "trace": 400}, 0, 1000)
    with pytest.raises(sim.MemoryLimitError, match="abstract payloads already") as e:
        sim.check_call("psum", 0, {"outputs": 0, "trace": 1400}, 0, 1000, abstract=True)
    assert "pass them as abstract" not in str(e.value)


def test_the_reference_pages_example_shows_what_it_prints():
    """The first example of docs/reference/abstract-payloads.md, run, gives the outputs its comment shows (a
    global all_gather of 1024 x 2**34 elements under out_specs=P('x'); it showed one device's 2**34)."""
    code = re.search(r"```python\n(.*?)```", _PAGE.read_text(), re.S).group(1)
    shown = re.search(r"^run\.outputs\s+# (.*)$", code, re.M).group(1)
    scope: dict = {}
    exec(compile(code, str(_PAGE), "exec"), scope)
    assert repr(scope["run"].outputs) == shown
