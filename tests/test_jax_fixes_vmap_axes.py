"""With `oracles.install_jax_fixes` the programs FINDINGS.md pins for findings 17 and 22 give the correct answer
in JAX.

The pinning tests (tests/test_jax_coverage.py with tests/jax_vmap_axis_child.py) expect JAX 0.10.2's failures;
here the same programs, and their neighbours, run in a child process with 8 CPU devices and the fixes of
`oracles.jax_fixes._vmap_axes` installed (`jax_fixes_vmap_axes_child.py`), and this process, which never imports
jax, judges JAX's answers against ones worked out here member by member with numpy.
"""

from __future__ import annotations

import importlib.util
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jax_fixes_children import KEYS, child_report, ok

from oracles.jax_fixes import FIXES, FOLDER
from oracles.jax_fixes import _vmap_axes as vmap_axes

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

CHILD = Path(__file__).resolve().parent / "jax_fixes_vmap_axes_child.py"
ROOT = CHILD.parent.parent


@pytest.fixture(scope="module")
def fixed() -> dict[str, Any]:
    """The child's report: the fixes it installed and JAX's answer to every program."""
    return child_report(CHILD)



def test_every_vmap_axes_fix_is_installed_and_has_its_folder(fixed):
    """The child installed every fix of `_vmap_axes.FIXES` (each one of `oracles.jax_fixes.FIXES`); each has a
    folder with its reproducer, its diff against JAX's source and its report's text."""
    assert fixed["installed"] == list(vmap_axes.FIXES)
    assert set(vmap_axes.FIXES) <= set(FIXES)
    findings = (ROOT / "FINDINGS.md").read_text()
    for name in vmap_axes.FIXES:
        folder = FOLDER / name
        assert {"finding.toml", "fix.diff", "repro.py", "upstream.toml"} <= {p.name for p in folder.iterdir()}, name
        text = tomllib.loads((folder / "finding.toml").read_text())
        assert set(text) == KEYS and text["stock_failure"], name
        assert f"## {text['number']}. " in findings and f"[{name}]" in findings, name
        assert (folder / "fix.diff").read_text().startswith("--- a/jax/_src/"), name


def over_y(collective: Callable[[list[np.ndarray]], list[np.ndarray]], x: np.ndarray, batched: bool) -> np.ndarray:
    """The child's `over_y` worked out member by member: 2 devices along 'x', 3 members along 'y' on each.
    Device d holds block d of x (x's halves; a batched x's column halves, member m its row m); `collective`
    maps the 3 members' values on one device to theirs; out_specs=P(None, 'x') joins the devices' (3, ...)
    results along axis 1."""
    blocks = np.split(x, 2, axis=1 if batched else 0)
    per_device = [np.stack(collective([b[m] if batched else b for m in range(3)])) for b in blocks]
    return np.concatenate(per_device, axis=1)


def across_x(collective: Callable[[list[np.ndarray]], list[np.ndarray]], x: np.ndarray,
             batched: bool) -> np.ndarray:
    """`over_y` of a collective over ('x', 'y'): all 6 members of both devices at once."""
    blocks = np.split(x, 2, axis=1 if batched else 0)
    flat = collective([b[m] if batched else b for b in blocks for m in range(3)])
    return np.concatenate([np.stack(flat[3 * d:3 * d + 3]) for d in range(2)], axis=1)


def summed(values: list[np.ndarray]) -> list[np.ndarray]:
    return [sum(values)] * len(values)


def gathered(values: list[np.ndarray]) -> list[np.ndarray]:
    return [np.stack(values)] * len(values)


def shifted(values: list[np.ndarray]) -> list[np.ndarray]:
    """ppermute with perm [(0, 1), (1, 2), (2, 0)]: member m receives member m - 1's value."""
    return [values[(m - 1) % 3] for m in range(3)]


def scattered(values: list[np.ndarray]) -> list[np.ndarray]:
    """Tiled psum_scatter: member m keeps chunk m of the sum."""
    return np.split(sum(values), 3)


def exchanged(values: list[np.ndarray]) -> list[np.ndarray]:
    """Tiled all_to_all, split and concat axis 0: member m receives chunk m of each member, in member order."""
    chunks = [np.split(v, 3) for v in values]
    return [np.concatenate([c[m] for c in chunks]) for m in range(3)]


X = np.array([1.0, 2.0])
ROWS = np.arange(6.0).reshape(3, 2)
WIDE = np.arange(18.0).reshape(3, 6)


def test_fixed_psum_over_a_vmap_axis_inside_shard_map(fixed):
    """Finding 17's pinned program (test_jax_coverage.py: stock JAX raises AssertionError; unchecked it gives
    [[3, 6]] * 3): with the fix, each of the 3 members sums 3 copies of its device's value; so does a psum over
    ('x', 'y'), and a batched operand is summed over its members."""
    name = "vmap-axis-typed-as-mesh-axis: "
    assert ok(fixed, name + "psum unbatched") == over_y(summed, X, False).tolist() == [[3.0, 6.0]] * 3
    assert ok(fixed, name + "psum unbatched over x, y") == across_x(summed, X, False).tolist() == [[9.0, 9.0]] * 3
    assert ok(fixed, name + "psum batched") == over_y(summed, ROWS, True).tolist() == [[6.0, 9.0]] * 3
    assert ok(fixed, name + "psum batched over x, y") == across_x(summed, ROWS, True).tolist() == [[15.0, 15.0]] * 3


@pytest.mark.parametrize("reduction", ["pmax", "pmin"])
def test_fixed_pmax_and_pmin_over_a_vmap_axis_alone(fixed, reduction):
    """pmax and pmin over the vmap axis alone (a reduction on the device, its type unchanged: the fix's type
    rule asked JAX for an invariant type over no mesh axis, and JAX refused): each member gets the members'
    largest or smallest value."""
    got = ok(fixed, f"vmap-axis-typed-as-mesh-axis: {reduction} batched")
    picked = (np.max if reduction == "pmax" else np.min)(ROWS, axis=0)
    assert got == [picked.tolist()] * 3


@pytest.mark.parametrize(("program", "collective", "x"), [
    ("all_gather batched", gathered, ROWS),
    ("ppermute batched", shifted, ROWS),
    ("psum_scatter batched", scattered, WIDE),
    ("all_to_all batched", exchanged, WIDE),
])
def test_fixed_collectives_over_a_vmap_axis_inside_shard_map(fixed, program, collective, x):
    """Finding 17's other collectives (stock JAX: AssertionError for a batched operand too): with the fix, each
    moves the members' values as the same collective over a mesh axis does."""
    got = ok(fixed, f"vmap-axis-typed-as-mesh-axis: {program}")
    assert np.array_equal(np.array(got), over_y(collective, x, True))


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("in_axes", [0, 1, None])
def test_fixed_vmap_of_psend_and_precv(fixed, check_vma, in_axes):
    """Finding 22's pinned program (test_jax_coverage.py: stock JAX raises TypeError, `_ppermute_batcher` given
    `out_shape`): with the fix, vmap of the psend/precv pair traces to the per-batch program's type (f32[4])
    with the batch axis of 3 in front, whatever the operand's batch axis and check_vma."""
    per_batch = ok(fixed, f"vmap-psend-precv: per batch {check_vma}")
    assert per_batch == [4]
    assert ok(fixed, f"vmap-psend-precv: vmap {in_axes} {check_vma}") == [3, *per_batch]


def test_fixed_psend_sends_what_precv_receives_and_the_vmap_axis_is_refused(fixed):
    """Finding 22: each device's psend sends its (2,)-block of every batch element, the batch axis in front,
    (3, 2), and its precv receives that shape; a pair over the vmap axis itself, a permutation of the batch
    that the token cannot carry, is refused with NotImplementedError rather than answered wrong."""
    assert ok(fixed, "vmap-psend-precv: sent and received") == [[3, 2], [3, 2]]
    status, kind, message = fixed["answers"]["vmap-psend-precv: over the vmap axis"]
    assert (status, kind) == ("error", "NotImplementedError") and "vmap axis" in message
