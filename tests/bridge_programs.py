"""Generated JAX programs for the bridge's tests, run in a worker process with 8 CPU devices.

`python tests/bridge_programs.py NAME...` runs each named batch (`BATCHES`) and writes a pickled dict
NAME -> result to stdout; `test_bridge.py` starts it with XLA_FLAGS set, as a JAX user would. A program
batch returns one row per program: (collective, label, agrees, report). Programs are drawn from a seeded
generator: a mesh of up to 8 devices, a collective of `jax.lax` with parameters its docs allow, around
it a few local operations, and three forms of each: the program, `jax.grad` of a weighted sum of its
outputs, and `jax.vmap` of it over a new axis.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

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
    spec_axes = tuple(mesh)
    # pvary takes an invariant operand: its input is replicated (P()), every other one split over all axes
    split = name != "pvary"
    global_shape = ((shape[0] * int(np.prod(list(mesh.values()))),) + shape[1:]) if split else shape
    scale = np.float32(rng.choice([0.5, 3.0, -1.0]))
    f = jax.shard_map(lambda x: body(x * 2.0) * scale, mesh=oracles.cpu_mesh(mesh),
                      in_specs=P(spec_axes) if split else P(), out_specs=P(spec_axes), check_vma=check)
    x = rng.standard_normal(global_shape).astype(np.float32)
    return f"{name} seed={seed} mesh={mesh} axes={axes!r} shape={shape} check_vma={check}", f, (x,)


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


def batch(names: tuple[str, ...], count: int, size: int = 12) -> list[tuple[str, str, bool, str]]:
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


def readme() -> list[str]:
    """Run every ```py block of the README's bridge section; return what each printed."""
    import contextlib
    import io
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split("## Running JAX programs on the simulated mesh", 1)[1].split("\n## ", 1)[0]
    printed = []
    for code in re.findall(r"```py\n(.*?)```", section, flags=re.S):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
        printed.append(out.getvalue())
    return printed


def _moe(mesh: Any, capacity: int) -> Callable[..., Any]:
    """A mixture-of-experts layer: each token goes to its top expert (one per device) through all_to_all,
    the expert's weights act on it there, and a second all_to_all brings it back to be combined."""
    n = mesh.shape["e"]

    def layer(tokens: Any, router: Any, experts: Any) -> Any:
        choice = jnp.argmax(tokens @ router, axis=-1)                        # [T]
        onehot = jax.nn.one_hot(choice, n, dtype=tokens.dtype)               # [T, E]
        slot = (jnp.cumsum(onehot, axis=0) - 1.0) * onehot                   # each token's place in its expert's queue
        dispatch = onehot[:, :, None] * jax.nn.one_hot(slot.sum(-1), capacity, dtype=tokens.dtype)[:, None, :]
        sent = jnp.einsum("tec,td->ecd", dispatch, tokens)                   # [E, C, d], row e for expert e
        arrived = lax.all_to_all(sent, "e", 0, 0, tiled=True)                # [E, C, d], row s from device s
        done = jnp.tanh(arrived @ experts[0])
        back = lax.all_to_all(done, "e", 0, 0, tiled=True)
        out = jnp.einsum("tec,ecd->td", dispatch, back)
        return lax.psum(jnp.sum(out * out), "e")

    return jax.shard_map(layer, mesh=mesh, in_specs=(P("e"), P(), P("e")), out_specs=P())


def moe() -> list[tuple[str, bool, str]]:
    """The MoE layer's loss and its gradient in all three inputs, compared with real JAX.

    The loss is compared bit for bit; the gradient within float32 rounding, as XLA fuses its chains of
    local products and tanh (one rounding fewer here and there) where the bridge runs them one by one."""
    rng = np.random.default_rng(7)
    mesh = oracles.cpu_mesh({"e": 4})
    d, tokens_per_device = 4, 8
    args = (rng.standard_normal((4 * tokens_per_device, d)).astype(np.float32),
            rng.standard_normal((d, 4)).astype(np.float32), rng.standard_normal((4, d, d)).astype(np.float32))
    layer = _moe(mesh, capacity=tokens_per_device)
    rows = []
    for label, f, rtol in (("loss", jax.jit(layer), 0.0), ("grad", jax.jit(jax.grad(layer, argnums=(0, 1, 2))),
                                                          1e-5)):
        report = oracles.compare_jax(f, *args, rtol=rtol, atol=rtol)
        rows.append((label, report.agrees, str(report)))
    return rows


def _ragged_moe(mesh: Any) -> Callable[..., Any]:
    """The same MoE layer with ragged_all_to_all: tokens sorted by expert, each peer sent exactly its rows
    (offsets and sizes exchanged with all_gather), processed, sent back with the offsets swapped."""
    n = mesh.shape["e"]

    def layer(tokens: Any, router: Any, experts: Any) -> Any:
        me = lax.axis_index("e")
        choice = jnp.argmax(tokens @ router, axis=-1)
        onehot = jax.nn.one_hot(choice, n, dtype=jnp.int32)
        sizes = onehot.sum(0)                                                # rows for each expert
        starts = jnp.cumsum(sizes) - sizes
        # each token's row once sorted by expert (JAX 0.10.2 types argsort's result invariant: not used)
        order = starts[choice] + jnp.take_along_axis(jnp.cumsum(onehot, 0) - 1, choice[:, None], 1)[:, 0]
        counts = lax.all_gather(sizes, "e")                                  # counts[s, r]: s sends r
        places = (jnp.cumsum(counts, axis=0) - counts).astype(jnp.int32)     # where s's rows land in r
        firsts = lax.all_gather(starts, "e")
        # JAX types ragged_all_to_all's result as its `output` (test_bridge.py pins it): the buffers vary
        buffer = lax.pcast(jnp.zeros((tokens.shape[0] * n, tokens.shape[1]), tokens.dtype), "e", to="varying")
        grouped = jnp.zeros_like(tokens).at[order].set(tokens)              # tokens sorted by expert
        arrived = lax.ragged_all_to_all(grouped, buffer, starts, sizes, places[me], counts[:, me],
                                        axis_name="e")
        done = jnp.tanh(arrived @ experts[0])
        back = lax.ragged_all_to_all(done, jnp.zeros_like(tokens), places[:, me], counts[:, me], firsts[:, me],
                                     sizes, axis_name="e")
        out = back[order]
        return lax.psum(jnp.sum(out * out), "e")

    return jax.shard_map(layer, mesh=mesh, in_specs=(P("e"), P(), P("e")), out_specs=P())


def moe_ragged() -> dict[str, Any]:
    """The ragged MoE layer and its gradient through the bridge, against the dense layer run by real JAX
    (the same function of the inputs, within float32 rounding); and against JAX's own ragged_all_to_all
    once `oracles.install_cpu_ragged_all_to_all` exists to run it on CPU."""
    rng = np.random.default_rng(7)
    mesh = oracles.cpu_mesh({"e": 4})
    args = (rng.standard_normal((32, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32),
            rng.standard_normal((4, 4, 4)).astype(np.float32))
    dense, ragged = _moe(mesh, capacity=8), _ragged_moe(mesh)
    found: dict[str, Any] = {}
    for label, wrap in (("loss", lambda f: f), ("grad", lambda f: jax.grad(f, argnums=(0, 1, 2)))):
        expected = [np.asarray(x) for x in jax.tree.leaves(jax.jit(wrap(dense))(*args))]
        simulated = oracles.simulate_jax(jax.jit(wrap(ragged)), *args)
        got = jax.tree.leaves(simulated.outputs)
        found[label] = all(np.allclose(e, g, rtol=1e-5, atol=1e-5) for e, g in zip(expected, got))
        found[f"{label} messages"] = len(simulated.run.trace.messages)
    install = getattr(oracles, "install_cpu_ragged_all_to_all", None)
    if install is not None:
        install()
        found["jax"] = oracles.compare_jax(jax.jit(jax.grad(ragged, argnums=(0, 1, 2))), *args, rtol=1e-5,
                                           atol=1e-5).agrees
    return found


def _error(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except Exception as error:
        return type(error).__name__, str(error)
    return "no error", ""


def errors() -> dict[str, tuple[str, str]]:
    """Each bad input to the bridge and the error it raises: (class name, message)."""
    from jax.sharding import AbstractMesh

    x = np.arange(8.0, dtype=np.float32)
    mesh = oracles.cpu_mesh({"i": 4})
    big = jax.shard_map(lambda v: lax.psum(v, "i"), mesh=AbstractMesh((16,), ("i",)), in_specs=P("i"),
                        out_specs=P())
    ragged = jax.shard_map(
        lambda v, o, a, b, c, e: lax.ragged_all_to_all(v, o, a, b, c, e, axis_name="i"), mesh=mesh,
        in_specs=(P("i"),) * 6, out_specs=P("i"))
    sizes = np.ones(16, np.int32)
    argsorted = jax.shard_map(jnp.argsort, mesh=oracles.cpu_mesh({"i": 2}), in_specs=P("i"), out_specs=P())
    offsets = np.tile(np.arange(4, dtype=np.int32), 4)  # device s sends row r to device r ...
    places = np.repeat(np.arange(4, dtype=np.int32), 4)  # ... which keeps it in its row s
    return {
        "no shard_map": _error(lambda: oracles.simulate_jax(jax.jit(lambda v: v * 2), x)),
        "collective outside shard_map": _error(lambda: oracles.simulate_jax(lambda v: lax.psum(v, "i"), x)),
        "unsupported primitive": _error(lambda: oracles.simulate_jax(jax.shard_map(
            lambda v: lax.pbroadcast(v, "i", source=1), mesh=mesh, in_specs=P("i"), out_specs=P("i")), x)),
        "some mesh axes": _error(lambda: oracles.simulate_jax(jax.shard_map(
            lambda v: lax.psum(v, "i"), mesh=oracles.cpu_mesh({"i": 2, "j": 2}), in_specs=P("i"), out_specs=P(),
            axis_names={"i"}), x)),
        "cpu_mesh too large": _error(lambda: oracles.cpu_mesh({"i": 16})),
        "compare on a mesh too large": _error(lambda: oracles.compare_jax(big, np.arange(32.0, dtype=np.float32))),
        "simulate on a mesh too large": ("no error", str(oracles.simulate_jax(big, np.arange(32.0,
                                                                              dtype=np.float32)).outputs)),
        "ragged without the lowering": _error(lambda: oracles.compare_jax(
            ragged, np.arange(16.0, dtype=np.float32), np.zeros(16, np.float32), offsets, sizes, places, sizes)),
        # JAX's own rules that fail today (the generated programs avoid them): pinned so a fix is noticed
        "jax: grad of an untiled all_to_all": _error(lambda: jax.grad(lambda v: jax.shard_map(
            lambda u: lax.all_to_all(u, "i", 0, 1, tiled=False), mesh=mesh, in_specs=P("i"),
            out_specs=P("i"))(v).sum())(np.ones((16, 3), np.float32))),
        "jax: vmap of an untiled psum_scatter": _error(lambda: jax.make_jaxpr(jax.vmap(jax.shard_map(
            lambda u: lax.psum_scatter(u, "i", scatter_dimension=1, tiled=False), mesh=mesh, in_specs=P("i"),
            out_specs=P("i")), in_axes=2))(np.ones((8, 4, 3), np.float32))),
        "jax: argsort of a varying array typed invariant": _error(lambda: oracles.simulate_jax(
            argsorted, np.array([3, 1, 2, 0, 1, 2], np.float32))),
        "jax: argsort's replicated output": ("no error", str(argsorted(np.array([3, 1, 2, 0, 1, 2], np.float32)))),
        "jax: ragged_all_to_all typed as its output": _error(lambda: oracles.simulate_jax(jax.shard_map(
            lambda v, a, b, c, e: lax.ragged_all_to_all(v, jnp.zeros(4, np.float32), a, b, c, e, axis_name="i"),
            mesh=mesh, in_specs=(P("i"),) * 5, out_specs=P()), np.arange(16.0, dtype=np.float32), offsets,
            sizes, places, sizes)),
        "ragged simulated": ("no error", str(oracles.simulate_jax(
            ragged, np.arange(16.0, dtype=np.float32), np.zeros(16, np.float32), offsets, sizes, places,
            sizes).outputs.tolist())),
    }


def mutation() -> tuple[bool, str]:
    """compare_jax of a psum program with the bridge's psum_invariant run as meshsim's pmax instead."""
    from collectives import REGISTRY
    from oracles import _bridge_device

    real = _bridge_device._definition
    _bridge_device._definition = lambda name: REGISTRY["pmax"] if name == "psum_invariant" else real(name)
    try:
        f = jax.shard_map(lambda v: lax.psum(v, "i"), mesh=oracles.cpu_mesh({"i": 4}), in_specs=P("i"),
                          out_specs=P())
        report = oracles.compare_jax(f, np.arange(8.0, dtype=np.float32))
    finally:
        _bridge_device._definition = real
    return report.agrees, str(report)


BATCHES: dict[str, Callable[[], Any]] = {
    "reductions": lambda: batch(("psum", "pmean", "pmax", "pmin"), 100),
    "gathers": lambda: batch(("all_gather", "all_gather_invariant", "psum_scatter"), 100),
    "exchanges": lambda: batch(("all_to_all", "ppermute", "axis_index", "pvary"), 100),
    "readme": readme, "moe": moe, "moe_ragged": moe_ragged, "errors": errors, "mutation": mutation,
}


def main(names: list[str]) -> None:
    """Run the named batches; pickle {name: ("ok", result) or ("error", traceback)} to stdout."""
    results = {}
    for name in names:
        try:
            results[name] = ("ok", BATCHES[name]())
        except Exception:
            results[name] = ("error", traceback.format_exc())
    sys.stdout.buffer.write(pickle.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
