"""With `oracles.install_jax_fixes` the programs FINDINGS.md pins for findings 21 and 23 give the correct answer
in JAX.

The pins (tests/test_jax_coverage.py, child tests/jax_vmap_axis_child.py) expect JAX 0.10.2's wrong answers;
here the same programs, and the calls that share their faulty rule (all_to_all / pswapaxes over a vmap axis, a
jit asking for a sharded zero-size result), run in a child process with 8 CPU devices and the fixes of
`oracles.jax_fixes._vmap_exchange` installed (`jax_fixes_vmap_exchange_child.py`), and this process, which never
imports jax, judges JAX's answers: against the spec (`oracles.spec`; every member of the vmap holds the one
unbatched operand) and against numpy (an identity returns its input).
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jax_fixes_children import KEYS, child_report
from jax_fixes_children import ok as answer

from oracles import spec
from oracles.jax_fixes import FIXES, FOLDER
from oracles.jax_fixes import _vmap_exchange as vmap_exchange

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

CHILD = Path(__file__).resolve().parent / "jax_fixes_vmap_exchange_child.py"
ROOT = CHILD.parent.parent


@pytest.fixture(scope="module")
def fixed() -> dict[str, Any]:
    """The child's report: the fixes it installed and JAX's answer to every program."""
    return child_report(CHILD)


def ok(fixed: dict[str, Any], name: str) -> np.ndarray:
    """JAX's answer to program `name`, which must have run."""
    return np.array(answer(fixed, name))


def test_every_vmap_exchange_fix_is_installed_and_has_its_folder(fixed):
    """The child installed every fix of `_vmap_exchange.FIXES`, all of them in `jax_fixes.FIXES`; each has a
    folder with its reproducer, its diff against JAX's source and its report's text."""
    assert fixed["installed"] == list(vmap_exchange.FIXES)
    assert set(vmap_exchange.FIXES) <= set(FIXES)
    findings = (ROOT / "FINDINGS.md").read_text()
    for name in vmap_exchange.FIXES:
        folder = FOLDER / name
        assert {"finding.toml", "fix.diff", "repro.py", "upstream.toml"} <= {p.name for p in folder.iterdir()}, name
        text = tomllib.loads((folder / "finding.toml").read_text())
        assert set(text) == KEYS and text["stock_failure"], name
        assert f"## {text['number']}. " in findings and f"[{name}]" in findings, name
        assert (folder / "fix.diff").read_text().startswith("--- a/jax/_src/"), name


def test_fixed_all_to_all_of_an_unbatched_operand_over_a_vmap_axis(fixed):
    """Finding 21's pinned program: both members hold [1, 2], member i receives chunk i of each: [[1, 1], [2, 2]]
    (stock JAX: shape (2, 2, 2), every member [[1, 2], [1, 2]])."""
    x = np.array([1.0, 2.0])
    expected = np.stack(spec.all_to_all([x, x], {"y": 2}, "y", 0, 0, tiled=True))
    assert expected.tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert ok(fixed, "all_to_all 0 0 tiled, 2 members").tolist() == expected.tolist()


@pytest.mark.parametrize("name, size, split_axis, concat_axis, tiled", [
    ("all_to_all 1 0 tiled, 2 members", 2, 1, 0, True),
    ("all_to_all 0 1 untiled, 4 members", 4, 0, 1, False),
])
def test_fixed_all_to_all_of_an_unbatched_rank_two_operand(fixed, name, size, split_axis, concat_axis, tiled):
    """Rank 2, split_axis != concat_axis, tiled and not: each member's result is the spec's for `size` members
    holding the operand, and equals the vmap of the operand batched as `size` copies."""
    m = np.arange(24.0).reshape(4, 6)
    expected = np.stack(spec.all_to_all([m] * size, {"y": size}, "y", split_axis, concat_axis, tiled=tiled))
    answer = ok(fixed, name)
    assert answer.shape == expected.shape and np.array_equal(answer, expected)
    assert np.array_equal(ok(fixed, f"{name}, batched"), expected)


def test_fixed_pswapaxes_of_an_unbatched_operand(fixed):
    """pswapaxes binds all_to_all and had the same fault; fixed, it gives the spec's answer."""
    m = np.arange(24.0).reshape(4, 6)
    expected = np.stack(spec.pswapaxes([m] * 4, {"y": 4}, "y", 0))
    assert ok(fixed, "pswapaxes 0, 4 members").tolist() == expected.tolist()
    assert np.array_equal(ok(fixed, "pswapaxes 0, 4 members, batched"), expected)


def test_fixed_eager_shard_map_of_a_zero_size_array(fixed):
    """Finding 23's pinned program: the eager shard_map of the identity returns its (2, 0) input, readable (stock
    JAX: ValueError reading it); each buffer is the whole empty array, as XLA lays it out."""
    answer = ok(fixed, "eager shard_map (2, 0)")
    assert answer.shape == (2, 0)
    assert ok(fixed, "eager shard_map (2, 0) shards").tolist() == [[2, 0], [2, 0]]


def test_fixed_jit_asking_for_a_sharded_zero_size_result(fixed):
    """A jit with `out_shardings=P('x')` and a (4, 0) result, the same fault: readable, of shape (4, 0)."""
    assert ok(fixed, "jit out_shardings P('x') (4, 0)").shape == (4, 0)


def test_non_empty_results_keep_the_sharding_asked_for(fixed):
    """The fix changes zero-size results only: a (4, 3) result of either is split in (2, 3) shards and correct."""
    assert np.array_equal(ok(fixed, "eager shard_map (4, 3)"), np.ones((4, 3)))
    assert np.array_equal(ok(fixed, "jit out_shardings P('x') (4, 3)"), np.full((4, 3), 2.0))
    for name in ("eager shard_map (4, 3)", "jit out_shardings P('x') (4, 3)"):
        assert ok(fixed, f"{name} shards").tolist() == [[2, 3], [2, 3]]
