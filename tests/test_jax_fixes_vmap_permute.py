"""With `oracles.install_jax_fixes` the programs FINDINGS.md pins for findings 18, 19 and 20 give the correct
answer in JAX.

The pinning tests (tests/test_jax_coverage.py with tests/jax_vmap_axis_child.py) expect JAX 0.10.2's wrong
behaviour; here the same programs and larger ones run in a child process with 8 CPU devices and the fixes of
`oracles.jax_fixes._vmap_permute` installed (`jax_fixes_vmap_permute_child.py`), and this process, which
never imports jax, judges JAX's answers against ones worked out here with numpy from the docs: a ppermute
member no pair writes to gets zeros, an index along a tuple of axes is row-major in the tuple's order, and
every member of a pbroadcast gets the source's value.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jax_fixes_children import KEYS, child_report, ok

from oracles.jax_fixes import FOLDER
from oracles.jax_fixes import _vmap_permute as vmap_permute

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

CHILD = Path(__file__).resolve().parent / "jax_fixes_vmap_permute_child.py"
ROOT = CHILD.parent.parent


@pytest.fixture(scope="module")
def fixed() -> dict[str, Any]:
    """The child's report: the fixes it installed and JAX's answer to every program."""
    return child_report(CHILD)



def test_every_vmap_permute_fix_is_installed_and_has_its_folder(fixed):
    """The child installed every fix of `_vmap_permute.FIXES`; each has a folder with its reproducer, its diff
    against JAX's source, its report's text (every key, the number of its FINDINGS.md entry) and its upstream
    status."""
    assert fixed["installed"] == list(vmap_permute.FIXES)
    findings = (ROOT / "FINDINGS.md").read_text()
    for name in vmap_permute.FIXES:
        folder = FOLDER / name
        assert {"finding.toml", "fix.diff", "repro.py", "upstream.toml"} <= {p.name for p in folder.iterdir()}, name
        text = tomllib.loads((folder / "finding.toml").read_text())
        assert set(text) == KEYS and text["stock_failure"], name
        assert f"## {text['number']}. " in findings and f"[{name}]" in findings, name
        assert (folder / "fix.diff").read_text().startswith("--- a/jax/_src/"), name


def test_fixed_pbroadcast_over_a_vmap_axis(fixed):
    """Finding 20 (pinned by test_jax_coverage.py's test_jax_pbroadcast_over_a_vmap_axis_is_pinned: TypeError):
    with the fix, every member of the vmap axis holds the source's value, alone or inside a shard_map over 8
    devices; an operand the vmap does not batch (right before) is unchanged."""
    assert ok(fixed, "pbroadcast: vmap") == [1.0, 1.0]
    x = np.arange(48.0).reshape(16, 3)  # 'y' along axis 1, source 2
    assert ok(fixed, "pbroadcast: shard_map") == np.repeat(x[:, 2:], 3, axis=1).tolist()
    assert ok(fixed, "pbroadcast: unbatched") == [[1.0, 2.0]] * 3


def test_fixed_ppermute_with_a_partial_perm_over_a_vmap_axis(fixed):
    """Finding 19 (pinned by test_jax_coverage.py's test_jax_ppermute_partial_perm_over_a_vmap_axis_is_pinned:
    AssertionError): with the fix, a member no pair writes to gets zeros, the others their source's value, as
    the same call over a mesh axis of 3 devices gives; an operand the vmap does not batch reaches only the
    destinations; a full perm (right before) is unchanged."""
    assert ok(fixed, "ppermute partial: vmap") == [0.0, 1.0]
    x = np.arange(6.0).reshape(2, 3)
    expected = np.zeros_like(x)
    for src, dst in [(0, 2), (2, 1)]:
        expected[:, dst] = x[:, src]
    assert ok(fixed, "ppermute partial: vmap axis 1") == expected.tolist() == ok(fixed, "ppermute partial: on a mesh")
    assert ok(fixed, "ppermute partial: unbatched") == [[0.0, 0.0], [0.0, 0.0], [1.0, 2.0]]
    assert ok(fixed, "ppermute partial: full perm") == [2.0, 0.0, 1.0]


TUPLE_PERMS = {"full": [(0, 5), (5, 2), (2, 7), (7, 1), (1, 4), (4, 6), (6, 3), (3, 0)],
               "partial": [(6, 0), (0, 3), (5, 1)], "negative": [(-8, 5), (5, -1)]}


def permuted(x: np.ndarray, names: str, perm: list[tuple[int, int]]) -> np.ndarray:
    """ppermute by the docs of members x[i, j] (x = i of 4, y = j of 2) over the axes `names` ('xy' or 'yx'):
    the index along the tuple is row-major in its order (a negative one counts from the end); a member no pair
    writes to gets zeros."""
    def member(index: int) -> tuple[int, int]:
        return divmod(index % 8, 2) if names == "xy" else divmod(index % 8, 4)[::-1]

    out = np.zeros_like(x)
    for src, dst in perm:
        out[member(dst)] = x[member(src)]
    return out


def test_fixed_ppermute_over_a_tuple_holding_a_vmap_axis(fixed):
    """Finding 18 (pinned by test_jax_coverage.py's test_jax_ppermute_over_a_tuple_with_a_vmap_axis_is_pinned:
    the perm applied to 'x' alone, [[2, 3], [0, 1]]): with the fix, the pinned program gives what the same call
    on a 2 x 2 mesh gives, [[1, 0], [0, 0]]; over ('x', 'y') and ('y', 'x') with 'x' a mesh axis of 4 and
    'y' a vmap axis of 2, full, partial and negative-index perms of a batched operand (and a partial one of an
    operand the vmap does not batch) move each member's value as the docs say (over ('x', 'y'), the order of
    the mesh, what the mesh program gives)."""
    assert ok(fixed, "ppermute tuple: pinned") == [[1.0, 0.0], [0.0, 0.0]]
    x = np.arange(24.0).reshape(4, 2, 3)
    for names in ["xy", "yx"]:
        for kind, perm in TUPLE_PERMS.items():
            assert ok(fixed, f"ppermute tuple: {names} {kind}") == permuted(x, names, perm).tolist(), (names, kind)
        unbatched = np.repeat(x[:, :1], 2, axis=1)
        expected = permuted(unbatched, names, TUPLE_PERMS["partial"])
        assert ok(fixed, f"ppermute tuple: {names} unbatched") == expected.tolist(), names
    assert ok(fixed, "ppermute tuple: xy full on a mesh") == permuted(x, "xy", TUPLE_PERMS["full"]).tolist()
