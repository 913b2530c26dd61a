"""The differential check can fail: deliberately wrong simulators and a wrong spec are caught.

Each mutant replaces one collective's message protocol (through `monkeypatch`, so only this test sees it)
with a plausible mistake. The same `check_agreement` the differential tests use must then report a
difference, Hypothesis must find a failing case, and the case it shrinks to must be small. These need no
JAX; only the wrong-spec test, which asks real JAX, is marked `differential`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from strategies import DOCS_RAGGED, Case, cases, check_agreement, dense_case, ragged_case, run_spec

import collectives._all_gather
import collectives._all_to_all
import collectives._ragged
import layouts
from oracles import spec

# each search is meant to fail: no explain phase (it reruns the shrunk failure only to annotate its report)
_SEARCH = settings(max_examples=200, database=None, print_blob=False, phases=[p for p in Phase if p != Phase.explain],
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _rotated(protocol, axis_of):
    """The protocol, but every received chunk lands one place further along the gather axis (wrapping)."""
    def mutant(port, args):
        result = yield from protocol(port, args)
        axis = axis_of(args)
        return np.roll(result, result.shape[axis] // port.group.size, axis=axis)
    return mutant


def _widened(protocol):
    """The protocol, but the result comes back in a wider dtype with the same values."""
    def mutant(port, args):
        result = yield from protocol(port, args)
        with np.errstate(invalid="ignore"):  # NaN in a float result: the wider dtype is the mistake under test
            narrow = result.dtype == layouts.BFLOAT16 or result.dtype in layouts.FLOAT8
            wider = np.float64 if narrow else np.promote_types(result.dtype, np.int64)
            return result.astype(wider)
    return mutant


class _TamperedPort:
    """A port whose received messages pass through `alter` before the protocol sees them (and the columns of
    slices it takes whole, through `alter_slices`)."""

    def __init__(self, port, alter, alter_slices=lambda payloads, headers: (payloads, headers)) -> None:
        self._port, self._alter, self._alter_slices = port, alter, alter_slices

    def recv_slices(self, count):
        payloads, headers = yield from self._port.recv_slices(count)
        return self._alter_slices(payloads, headers)

    def __getattr__(self, name):
        return getattr(self._port, name)

    def recv(self, src, tag=0):
        arrived = self._port.recv(src, tag)
        altered = self._port.transport.env.event()
        arrived.callbacks.append(lambda event: altered.succeed(self._alter(event.value)))
        return altered


def _dropping_first_slice(protocol):
    """ragged_all_to_all whose receivers lose the first non-empty slice they receive (rows not written)."""
    def mutant(port, args):
        dropped = []

        def alter(message):
            if dropped or not len(message.payload):
                return message
            dropped.append(message)
            return dataclasses.replace(message, payload=message.payload[:0])

        def alter_slices(payloads, headers):  # a column of slices taken whole: its first is not written
            return (payloads[1:], headers[1:]) if payloads else (payloads, headers)

        return (yield from protocol(_TamperedPort(port, alter, alter_slices), args))
    return mutant


MUTANTS = {
    "all_gather-chunk-at-wrong-place": (
        collectives._all_gather, lambda p: _rotated(p, lambda a: a.axis), "all_gather"),
    "all_to_all-chunk-at-wrong-place": (
        collectives._all_to_all, lambda p: _rotated(p, lambda a: a.concat_axis), "all_to_all"),
    "all_to_all-result-in-wider-dtype": (collectives._all_to_all, _widened, "all_to_all"),
    "ragged-first-slice-dropped": (collectives._ragged, _dropping_first_slice, "ragged_all_to_all"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_simulator_is_caught_and_shrunk(name, monkeypatch):
    """A wrong protocol makes the differential comparison fail, on a case Hypothesis shrinks to <= 2 devices."""
    module, mutate, op = MUTANTS[name]
    monkeypatch.setattr(module, "_protocol", mutate(module._protocol))
    failing: list[Case] = []

    @_SEARCH
    @given(case=cases(op))
    def differential_property(case):
        try:
            check_agreement(case)
        except AssertionError:
            failing.append(case)
            raise

    with pytest.raises(AssertionError, match=r"simulator != spec") as caught:
        differential_property()
    minimal = failing[-1]  # Hypothesis replays the shrunk example last
    assert minimal.devices <= 2, f"shrinking stopped at {minimal!r}"
    assert repr(minimal) in str(caught.value)


def test_value_equal_but_byte_different_result_is_caught(monkeypatch):
    """Comparing bytes, not values: a simulator that turns -0.0 into 0.0 and quiets NaNs is caught."""
    def adds_zero(protocol):
        def mutant(port, args):
            result = yield from protocol(port, args)
            with np.errstate(invalid="ignore"):
                return result + np.zeros((), result.dtype)
        return mutant

    monkeypatch.setattr(collectives._all_gather, "_protocol", adds_zero(collectives._all_gather._protocol))
    case = dense_case("all_gather", {"x": 2}, (2,), "float32", axis_name="x")
    signalling_nan = np.array([0x7F800001], np.uint32).view(np.float32)[0]
    case = dataclasses.replace(case, args=((np.array([-0.0, 1.0], np.float32),
                                            np.array([signalling_nan, 2.0], np.float32)),))
    with pytest.raises(AssertionError, match=r"device 0: simulator != spec: bytes differ at 2 element\(s\)"):
        check_agreement(case)


def _ragged_with_local_offsets(operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes,
                               mesh_shape, *, axis_name, axis_index_groups=None):
    """A wrong spec: each receiver writes at its *own* output_offsets (the misreading the docs warn about)."""
    exchanged = spec.all_to_all(output_offsets, mesh_shape, axis_name, 0, 0,
                                axis_index_groups=axis_index_groups, tiled=True)
    return spec.ragged_all_to_all(operands, outputs, input_offsets, send_sizes, exchanged, recv_sizes,
                                  mesh_shape, axis_name=axis_name, axis_index_groups=axis_index_groups)


@pytest.mark.differential
@pytest.mark.parametrize("case", [
    pytest.param(DOCS_RAGGED, id="docs-example"),
    pytest.param(ragged_case({"x": 2, "y": 2}, ("y", "x"), [[1, 1, 1, 1]] * 4),
                 id="2d-tuple-axis"),
])
def test_wrong_spec_is_caught_by_jax(case, jax_oracle):
    """A spec that misreads output_offsets as local write offsets disagrees with real JAX (and the simulator)."""
    with pytest.raises(AssertionError) as caught:
        check_agreement(case, jax_oracle, reference=lambda c: run_spec(c, op_spec=_ragged_with_local_offsets))
    message = str(caught.value)
    assert "spec != jax" in message
    assert "simulator != spec" in message
    assert "simulator != jax" not in message
