"""Generated JAX programs around each collective, compared with real JAX through the bridge in bundles.

Programs are drawn from a seeded generator: a mesh of up to 8 devices, a collective of `jax.lax` with
parameters its docs allow, a doubling before it and one product after it, in a shard_map manual over every
mesh axis, over only the collective's (the others left to the compiler) or nested in one over the others,
and three forms of each: the program, `jax.grad` of a weighted sum of its outputs, and `jax.vmap` of it
over a new axis. Imported by
`bridge_programs.py`, which sets the device count before jax starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax import parallel
from jax.sharding import PartitionSpec as P

import oracles

MESHES = ({"i": 2}, {"i": 4}, {"i": 8}, {"i": 2, "j": 4})
Program = tuple[str, Callable[..., Any], tuple]


def _axes(rng: np.random.Generator, mesh: dict[str, int]) -> Any:
    """One mesh axis, or (on a 2-D mesh, sometimes) both as a tuple."""
    names = list(mesh)
    if len(names) > 1 and rng.random() < 0.3:
        return tuple(names) if rng.random() < 0.5 else tuple(reversed(names))
    return names[rng.integers(len(names))]


def _size(mesh: dict[str, int], axes: Any) -> int:
    return int(np.prod([mesh[a] for a in (axes if isinstance(axes, tuple) else (axes,))]))


def _collective(name: str, rng: np.random.Generator, mesh: dict[str, int], axes: Any, differentiated: bool
                ) -> tuple[Callable[[Any], Any], tuple[int, ...], bool]:
    """The collective `name` on a local operand: (body, local shape, check_vma).

    JAX 0.10.2 cannot differentiate an untiled all_to_all whose split_axis and concat_axis differ (its
    transpose adds the untiled axis a second time; test_bridge.py pins it), so a program to differentiate
    tiles those."""
    n, check = _size(mesh, axes), True
    rank = int(rng.integers(1, 3))
    shape = [int(rng.choice([1, 2])) for _ in range(rank)]  # few shapes: JAX compiles each op once per shape
    if name in ("all_to_all", "psum_scatter"):
        dim = int(rng.integers(rank))
        shape[dim] *= n
        other = int(rng.integers(rank))
        tiled = bool(rng.random() < 0.7) or (differentiated and name == "all_to_all" and dim != other)
        if name == "all_to_all":
            if not tiled:
                shape[dim] = n
            return lambda x: lax.all_to_all(x, axes, dim, other, tiled=tiled), tuple(shape), True
        if not tiled:
            shape[dim] = n
            shape += [] if rank > 1 else [2]  # the untiled result drops `dim`: keep a dimension for out_specs
        return lambda x: lax.psum_scatter(x, axes, scatter_dimension=dim, tiled=tiled), tuple(shape), True
    if name in ("all_gather", "all_gather_invariant"):
        axis, tiled = int(rng.integers(rank + 1)), bool(rng.random() < 0.5)
        axis = min(axis, rank - 1) if tiled else axis
        gather = lax.all_gather if name == "all_gather" else parallel.all_gather_invariant
        return lambda x: gather(x, axes, axis=axis, tiled=tiled), tuple(shape), True
    if name == "ppermute":
        axis = axes if isinstance(axes, str) else axes[0]
        k = mesh[axis]
        perm = [(int(s), int(d)) for s, d in zip(rng.permutation(k), rng.permutation(k)) if rng.random() < 0.8]
        return lambda x: lax.ppermute(x, axis, perm), tuple(shape), True
    if name == "psum":
        check = bool(rng.random() < 0.5)
        groups = None
        if not check and isinstance(axes, str) and mesh[axes] > 2 and rng.random() < 0.5:
            order = [int(i) for i in rng.permutation(mesh[axes])]
            groups = [sorted(order[:mesh[axes] // 2]), sorted(order[mesh[axes] // 2:])]
        return lambda x: lax.psum(x, axes, axis_index_groups=groups), tuple(shape), check
    simple = {"pmean": lambda x: lax.pmean(x, axes), "pmax": lambda x: lax.pmax(x, axes),
              "pmin": lambda x: lax.pmin(x, axes),
              "axis_index": lambda x: x * lax.axis_index(axes).astype(x.dtype),
              "pvary": lambda x: lax.pcast(x, axes, to="varying")}
    return simple[name], tuple(shape), True


def program(name: str, seed: int, differentiated: bool = False) -> Program:
    """A shard_map program around the collective `name`: (label, function, args).

    The local operations around the collective round once each (a doubling, then one product), so XLA's
    fused program and the bridge's op-by-op evaluation give the same bits, and a difference is the
    collective's.
    """
    rng = np.random.default_rng(seed)
    mesh = MESHES[rng.integers(len(MESHES))]
    axes = _axes(rng, mesh)
    body, shape, check = _collective(name, rng, mesh, axes, differentiated)
    # JAX cannot lower reverse mode of a nested shard_map under check_vma (FINDINGS.md 24): none nested there
    mesh, manual, within = _partial(seed, mesh, axes, nestable=not (differentiated and check))
    spec_axes = tuple(a for a in mesh if a in manual)
    # pvary takes an invariant operand: its input is replicated (P()), every other one split over the manual axes
    split = name != "pvary"
    global_shape = ((shape[0] * int(np.prod([mesh[a] for a in manual | within])),) + shape[1:]) if split else shape
    scale = np.float32(rng.choice([0.5, 3.0, -1.0]))
    local = lambda x: body(x * 2.0) * scale
    if within:  # the collective in a shard_map nested in the body, manual over its own axes
        inner = tuple(a for a in mesh if a in within)
        local = jax.shard_map(local, in_specs=P(inner) if split else P(), out_specs=P(inner), check_vma=check,
                              axis_names=set(within))
    f = jax.shard_map(local, mesh=oracles.cpu_mesh(mesh), in_specs=P(spec_axes) if split else P(),
                      out_specs=P(spec_axes), check_vma=check, axis_names=set(manual))
    x = rng.standard_normal(global_shape).astype(np.float32)
    auto = f" auto={[a for a in mesh if a not in manual | within]}" if len(manual | within) < len(mesh) else ""
    auto += f" nested={sorted(within)}" if within else ""
    return f"{name} seed={seed} mesh={mesh} axes={axes!r}{auto} shape={shape} check_vma={check}", f, (x,)


def _partial(seed: int, mesh: dict[str, int], axes: Any, nestable: bool
             ) -> tuple[dict[str, int], frozenset[str], frozenset[str]]:
    """The mesh, the shard_map's manual axes and those of a shard_map nested in its body around the
    collective (empty: none). Most seeds: every axis, no nesting. For about half of the others (a stream of
    their own): only the axes the collective names, the others left to JAX's partitioner (`axis_names=`);
    for the rest, the collective in a nested shard_map manual over the axes it names, inside one manual over
    the others (unless not `nestable`). On a smaller 1-D mesh the other axis is a new one, 'a', before or
    after."""
    named = frozenset(axes if isinstance(axes, tuple) else (axes,))
    rng = np.random.default_rng([seed, 1])
    draw = rng.random()
    if draw >= 0.6:
        return mesh, frozenset(mesh), frozenset()
    if len(mesh) == 1 and mesh[next(iter(mesh))] <= 4:
        extra = {"a": int(rng.choice([2, 8 // mesh[next(iter(mesh))]]))}
        mesh = {**extra, **mesh} if rng.random() < 0.5 else {**mesh, **extra}
    if draw < 0.3 or named == set(mesh) or not nestable:
        return mesh, named, frozenset()
    return mesh, frozenset(mesh) - named, named


def form(name: str, seed: int) -> Program:
    """The program of `seed`, or its gradient, or its vmap (by seed; pmax and pmin have no gradient)."""
    which = seed % 3 if name not in NONLINEAR else seed % 2 * 2
    label, f, (x,) = program(name, seed, differentiated=which == 1)
    if which == 0:
        return label, f, (x,)
    if which == 1:
        # small integer weights keep the cotangents exact, so the transposed collectives decide the bits
        w = np.random.default_rng(seed + 1).integers(-3, 4, jax.eval_shape(f, x).shape).astype(np.float32)
        return f"grad {label}", jax.grad(lambda v: jnp.sum(f(v) * w)), (x,)
    # JAX 0.10.2's batching rule of an untiled psum_scatter raises IndexError for a batch axis after its
    # scatter_dimension (test_bridge.py pins it), so psum_scatter's programs are batched at axis 0
    axis = seed % (x.ndim + 1) if name != "psum_scatter" else 0
    batched = np.moveaxis(np.stack([x, x * 0.5, -x]), 0, axis)
    return f"vmap(in_axes={axis}) {label}", jax.vmap(f, in_axes=axis), (batched,)


COLLECTIVES = ("psum", "pmean", "pmax", "pmin", "all_gather", "all_gather_invariant", "all_to_all", "psum_scatter",
               "ppermute", "axis_index", "pvary")
NONLINEAR = ("pmax", "pmin")


def bundle(programs: list[Program]) -> Program:
    """Several programs as one jitted function of all their arguments (one XLA compile for them all)."""
    counts = [len(args) for _, _, args in programs]

    def together(*flat: Any) -> tuple:
        outs, start = [], 0
        for (_, f, _), n in zip(programs, counts):
            outs.append(f(*flat[start:start + n]))
            start += n
        return tuple(outs)

    return "bundle", jax.jit(together), tuple(a for _, _, args in programs for a in args)


def batch(names: tuple[str, ...], count: int, size: int = 50) -> list[tuple[str, str, bool, str]]:
    """`count` generated programs of each collective in `names`, compared with real JAX in bundles of at
    most `size` programs on one mesh (each program's output is compared on its own)."""
    rows = []
    for name in names:
        by_mesh: dict[str, list[Program]] = {}
        for seed in range(count):
            found = form(name, seed)
            by_mesh.setdefault(found[0].split(" mesh=")[1].split(" axes=")[0], []).append(found)
        for programs in by_mesh.values():
            for first in range(0, len(programs), size):
                rows += _compare(name, programs[first:first + size])
    return rows


def _compare(name: str, programs: list[Program]) -> list[tuple[str, str, bool, str]]:
    try:
        _, f, args = bundle(programs)
        report = oracles.compare_jax(f, *args)
    except Exception as error:
        return [(name, label, False, f"{type(error).__name__}: {error}") for label, _, _ in programs]
    return [(name, label, row.agrees, str(row)) for (label, _, _), row in zip(programs, report.outputs)]
