"""Simulator == executable spec == real JAX, bit for bit, on generated and on explicit cases.

Every comparison goes through `strategies.check_agreement`: dtype, shape and bytes of every device's
result. The explicit table guarantees coverage of each feature (checked by
`test_explicit_cases_cover_every_feature`); the generated cases explore around it.
"""

from __future__ import annotations

import numpy as np
import pytest
import strategies as cases_
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from strategies import DOCS_RAGGED, Case, check_agreement, dense_case, features, ragged_case

import sim

pytestmark = pytest.mark.differential

_SIDE_EXAMPLES = max(10, settings().max_examples // 4)
# each generated case compiles its own program in the JAX worker: half the profile's examples keep the suite
# within its time (the explore and fuzz profiles draw more)
_JAX_EXAMPLES = max(10, settings().max_examples // 2)


def _record(case: Case) -> None:
    for label in sorted(features(case)):
        event(label)


# ---------------------------------------------------------------------------------------------- docs' examples

DOCS_ALL_GATHER = Case("all_gather", {"i": 4}, (tuple(np.arange(4)),), {"axis_name": "i"})
DOCS_ALL_GATHER_GROUPS = Case("all_gather", {"i": 4}, (tuple(np.arange(16).reshape(4, 4)),),
                              {"axis_name": "i", "axis_index_groups": [[0, 2], [3, 1]]})
DOCS_ALL_TO_ALL = dense_case("all_to_all", {"i": 4}, (3, 4, 2), axis_name="i", split_axis=1, concat_axis=2)


# ---------------------------------------------------------------------------------------------- generated


@settings(max_examples=_JAX_EXAMPLES)
@given(case=cases_.cases("all_gather"))
@example(case=DOCS_ALL_GATHER_GROUPS)
def test_all_gather_agrees(case, jax_oracle):
    """all_gather: simulator, spec and JAX give the same bytes on every device for generated cases."""
    _record(case)
    check_agreement(case, jax_oracle)


@settings(max_examples=_JAX_EXAMPLES)
@given(case=cases_.cases("all_to_all"))
@example(case=DOCS_ALL_TO_ALL)
def test_all_to_all_agrees(case, jax_oracle):
    """all_to_all: simulator, spec and JAX give the same bytes on every device for generated cases."""
    _record(case)
    check_agreement(case, jax_oracle)


@settings(max_examples=_JAX_EXAMPLES)
@given(case=cases_.cases("ragged_all_to_all"))
@example(case=DOCS_RAGGED)
def test_ragged_all_to_all_agrees(case, jax_oracle):
    """ragged_all_to_all: simulator, spec and JAX give the same bytes on every device for generated cases."""
    _record(case)
    check_agreement(case, jax_oracle)


@pytest.mark.parametrize("op", ["all_gather", "all_to_all"])
@settings(max_examples=_SIDE_EXAMPLES)
@given(data=st.data())
def test_pytrees_agree_with_spec_leaf_by_leaf(op, data):
    """A dict/tuple pytree through the simulator equals the spec applied leaf by leaf, tree structure kept."""
    case = data.draw(cases_.cases(op, leaves=data.draw(st.integers(1, 3), label="leaves")), label="case")
    _record(case)
    check_agreement(case)


@settings(max_examples=_SIDE_EXAMPLES)
@given(case=cases_.cases("all_to_all", negative_axes=True))
def test_all_to_all_negative_axes_are_rejected_like_jax(case):
    """A negative split_axis or concat_axis is refused by name before any message is sent.

    jax.lax.all_to_all does not normalise negative axes: JAX 0.10.2 fails to lower them (and for some
    pairs the process crashes), so the simulator rejects them instead of giving an answer JAX cannot.
    """
    _record(case)
    with pytest.raises(sim.InvalidArgumentError, match=r"(split|concat)_axis=-\d+ must be in \[0, "):
        cases_.run_simulator(case)


# ---------------------------------------------------------------------------------------------- explicit


def _explicit() -> list:
    """Hand-picked cases that together hit every feature in REQUIRED_FEATURES."""
    table = {
        "all_gather-docs-groups-[[0,2],[3,1]]": DOCS_ALL_GATHER_GROUPS,
        "all_gather-docs-arange-scalar": DOCS_ALL_GATHER,
        "all_gather-2d-('y','x')-tiled-axis=-1-rank3-float16": dense_case(
            "all_gather", {"x": 2, "y": 2}, (2, 1, 3), "float16", axis_name=("y", "x"), axis=-1, tiled=True),
        "all_gather-2d-'y'-groups-untiled-axis=1-rank2-int8": dense_case(
            "all_gather", {"x": 2, "y": 4}, (2, 3), "int8", axis_name="y", axis=1,
            axis_index_groups=[[3, 0], [2, 1]]),
        "all_gather-1d-zero-dim-untiled": dense_case(
            "all_gather", {"x": 3}, (0, 2), "float64", axis_name="x", axis=2),
        "all_to_all-docs-shape-rules-rank3": DOCS_ALL_TO_ALL,
        "all_to_all-1d-tiled-rank1-uint8": dense_case(
            "all_to_all", {"x": 4}, (8,), "uint8", axis_name="x", split_axis=0, concat_axis=0, tiled=True),
        "all_to_all-2d-('y','x')-groups-tiled-rank3-float64": dense_case(
            "all_to_all", {"x": 2, "y": 2}, (1, 4, 2), "float64", axis_name=("y", "x"), split_axis=1,
            concat_axis=0, tiled=True, axis_index_groups=[[0, 3], [2, 1]]),
        "all_to_all-2d-('x','y')-untiled-rank2-int64": dense_case(
            "all_to_all", {"x": 2, "y": 3}, (6, 2), "int64", axis_name=("x", "y"), split_axis=0,
            concat_axis=1),
        "all_to_all-1d-tiled-zero-chunks-float32": dense_case(
            "all_to_all", {"x": 2}, (0, 3), "float32", axis_name="x", split_axis=0, concat_axis=1, tiled=True),
        "ragged-docs-example": DOCS_RAGGED,
        "ragged-1d-zero-slices-rank1": ragged_case(
            {"x": 3}, "x", [[2, 0, 1], [0, 0, 3], [1, 2, 0]]),
        "ragged-2d-('y','x')-groups-rank3-float32": ragged_case(
            {"x": 2, "y": 2}, ("y", "x"), [[1, 0], [2, 1], [0, 3], [1, 1]], axis_index_groups=[[3, 0], [1, 2]],
            trailing=(2, 2), dtype="float32", index_dtype="int64"),
        "ragged-1d-zero-width-rows-rank3": ragged_case(
            {"x": 2}, "x", [[1, 2], [0, 1]], trailing=(2, 0), dtype="int64"),
        "ragged-2d-'x'-two-slices-per-peer-rank2-uint8": ragged_case(
            {"x": 2, "y": 2}, "x", [[1, 0, 2, 1], [0, 1, 1, 1], [3, 0, 0, 2], [1, 1, 0, 0]], trailing=(3,),
            dtype="uint8"),
    }
    for dtype in cases_.DTYPES:
        table[f"all_gather-dtype-{dtype}"] = dense_case(
            "all_gather", {"x": 2}, (2,), dtype, axis_name="x", tiled=True)
        table[f"all_to_all-dtype-{dtype}"] = dense_case(
            "all_to_all", {"x": 2}, (2, 2), dtype, axis_name="x", split_axis=1, concat_axis=0)
        table[f"ragged-dtype-{dtype}"] = ragged_case({"x": 2}, "x", [[1, 2], [0, 1]], dtype=dtype)
    return [pytest.param(case, id=name) for name, case in table.items()]


EXPLICIT = _explicit()

REQUIRED_FEATURES = {
    "all_gather", "all_to_all", "ragged_all_to_all", "1-D mesh", "2-D mesh", "tuple axis_name",
    "tuple axis_name against mesh order", "axis_index_groups", "tiled", "untiled", "rank 1", "rank 2", "rank 3",
    "negative axis", "zero-size dimension", "zero-size ragged slice", "slice ends at last output row",
    "slice ends at last operand row", "output rows left as padding",
    *(f"dtype {dtype}" for dtype in cases_.DTYPES),
}


@pytest.mark.parametrize("case", EXPLICIT)
def test_explicit_case_agrees(case, jax_oracle):
    """Each hand-picked case: simulator, spec and JAX give the same bytes on every device."""
    check_agreement(case, jax_oracle)


def test_explicit_cases_cover_every_feature():
    """The explicit table covers every required feature, for each collective where it applies."""
    seen = set().union(*(features(p.values[0]) for p in EXPLICIT))
    assert seen >= REQUIRED_FEATURES, f"not covered: {sorted(REQUIRED_FEATURES - seen)}"
    for op in cases_.DOCUMENTED:
        mine = set().union(*(features(p.values[0]) for p in EXPLICIT if p.values[0].op == op))
        wanted = {"1-D mesh", "2-D mesh", "tuple axis_name", "axis_index_groups", "rank 1", "rank 2", "rank 3"}
        wanted |= {"tiled", "untiled"} if op != "ragged_all_to_all" else {"zero-size ragged slice"}
        assert wanted <= mine, f"{op}: not covered: {sorted(wanted - mine)}"
        assert len({f for f in mine if f.startswith("dtype ")}) >= 3, f"{op}: fewer than 3 dtypes"
