"""The bridge's host side and a run's block bookkeeping, each against the slower form it replaces.

A reshard or sharding constraint between two whole placements on the host (`oracles._bridge._placed`) gives
the value JAX's eager `bind` gives, bit for bit, dtype and shape included (checked in
`bridge_host_child.py`, its own process: this one starts no JAX backend); `sim.program._blocks`' writers
and axis indices, kept per mesh shape, equal their computation from the mesh's coordinates device by device;
`sim.program._tree`'s leaves and tree_map equal the plain recursion. Each comparison is shown to fail on a
wrong answer.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim
from sim.program import _blocks

CHILD = Path(__file__).with_name("bridge_host_child.py")
CHECKS = ("test_whole_placement_on_the_host_is_the_value_jax_binds", "test_a_python_scalar_is_placed_in_its_aval_dtype",
          "test_placement_comparison_can_fail", "test_a_program_with_host_reshards_equals_jitted_jax")


def test_host_placements_in_a_jax_child():
    """The child's checks of the host's placements (random bits of every dtype against JAX's bind, a Python
    scalar, a wrong bit told apart, a jitted gradient with a reshard and a sharding constraint on the host
    bit for bit with JAX and neither bound) all pass."""
    pytest.importorskip("jax")
    done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=CHILD.parent.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == list(CHECKS), done.stdout


@st.composite
def _meshes_and_specs(draw: st.DrawFn) -> tuple[sim.Mesh, sim.PartitionSpec]:
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    names = [f"a{k}" for k in range(len(sizes))]
    mesh = sim.Mesh(dict(zip(names, sizes)))
    chosen = draw(st.permutations(names))[:draw(st.integers(0, len(names)))]
    groups = draw(st.integers(0, len(chosen)))
    entries: list = [tuple(chosen[:groups]) if groups > 1 else (chosen[0] if groups else None)]
    entries += list(chosen[groups:])
    return mesh, sim.P(*entries)


def _writers_by_coords(mesh: sim.Mesh, spec: sim.PartitionSpec) -> list[int]:
    left_out = [a for a in mesh.axis_names if a not in spec.axes()]
    return [d for d in mesh.devices if not any(mesh.coords(d)[a] for a in left_out)]


def _indices_by_coords(mesh: sim.Mesh, names: tuple[str, ...]) -> list[int]:
    found = []
    for d in mesh.devices:
        index = 0
        for name in names:
            index = index * mesh.shape[name] + mesh.coords(d)[name]
        found.append(index)
    return found


@given(_meshes_and_specs())
def test_kept_writers_and_indices_equal_the_coordinates(mesh_and_spec):
    """On random meshes and specs (twice: computed, then kept): the writers are the devices at index 0 along
    every left-out axis, and each device's index along every axis and ordered tuple of axes is the row-major
    one of its coordinates."""
    mesh, spec = mesh_and_spec
    for _ in range(2):
        assert _blocks._writers(mesh, spec) == _writers_by_coords(mesh, spec)
        for count in range(1, len(mesh.axis_names) + 1):
            for names in itertools.permutations(mesh.axis_names, count):
                name = names if len(names) > 1 else names[0]
                assert _blocks._axis_indices(mesh, name).tolist() == _indices_by_coords(mesh, names)


def test_kept_indices_are_read_only_and_the_comparison_can_fail():
    """A kept index array cannot be written through; a wrong writer list or index is told apart."""
    mesh = sim.Mesh({"x": 2, "y": 3})
    kept = _blocks._axis_indices(mesh, "y")
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = 5
    assert _blocks._writers(mesh, sim.P("y")) != _writers_by_coords(mesh, sim.P("x"))
    assert kept.tolist() != _indices_by_coords(mesh, ("x",))


def _leaves_by_recursion(tree, is_leaf=lambda _: False) -> list:
    if tree is None:
        return []
    if is_leaf(tree):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [leaf for child in tree for leaf in _leaves_by_recursion(child, is_leaf)]
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves_by_recursion(tree[key], is_leaf)]
    return [tree]


def _map_by_recursion(fn, tree, *rest):
    if tree is None:
        return None
    if isinstance(tree, (tuple, list)):
        mapped = [_map_by_recursion(fn, *children) for children in zip(tree, *rest)]
        return type(tree)(mapped) if not hasattr(tree, "_fields") else type(tree)(*mapped)
    if isinstance(tree, dict):
        return {key: _map_by_recursion(fn, tree[key], *(r[key] for r in rest)) for key in tree}
    return fn(tree, *rest)


def _trees(leaf: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(leaf, lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=3),
                                                      st.dictionaries(st.sampled_from("abc"), inner, max_size=3)),
                        max_leaves=12)


_PLAIN = st.one_of(st.none(), st.integers(-5, 5))
_SPECS = st.one_of(_PLAIN, st.sampled_from([sim.P(), sim.P("x"), sim.P(None, "x")]))


@given(_trees(_SPECS), _trees(_PLAIN))
def test_tree_leaves_and_map_equal_their_recursive_forms(tree, plain):
    """`sim.program._tree`'s leaves and tree_map, which take leaf children without a call, equal the plain
    recursion on random pytrees of ints and Nones (and, for leaves, specs: tuples `is_leaf` may mark as
    leaves)."""
    from sim.program import _tree

    def is_spec(x):
        return isinstance(x, sim.PartitionSpec)

    assert _tree.leaves(tree) == _leaves_by_recursion(tree)
    assert _tree.leaves(tree, is_spec) == _leaves_by_recursion(tree, is_spec)
    assert _tree.tree_map(repr, plain) == _map_by_recursion(repr, plain)
    assert _tree.tree_map(lambda a, b: (a, b), plain, plain) == _map_by_recursion(lambda a, b: (a, b), plain, plain)


def test_tree_comparison_can_fail():
    """A tree whose leaves come out in another order, or mapped otherwise, is told apart."""
    from sim.program import _tree

    assert _tree.leaves({"b": 1, "a": 2}) != _leaves_by_recursion({"b": 2, "a": 1})
    assert _tree.tree_map(str, (1, [2])) != _map_by_recursion(repr, (1, ["2"]))
