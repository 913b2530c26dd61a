"""A JAX program cut at its collectives, in plain JAX: the bridge's answer, computed without the bridge.

`cut(f, *args)` evaluates `f`'s jaxpr piece by piece. On the host, each run of equations between shard_maps is
jitted as one function. Each shard_map is cut into pieces: every maximal run of local equations is jitted on
its own and run on each device's values, and every collective runs alone in a shard_map over the same mesh
(each device's value one row of a global array sharded over every mesh axis), so XLA compiles each local
piece as one module and each collective as its own. Nothing of meshsim runs here.

The bridge compiles the local work between collectives the same way, so `simulate_jax` must equal this cut
program bit for bit; where jitted JAX differs from it, XLA fused work across a collective (or across the
forward and backward shard_maps of a gradient) inside its one module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax._src.lax import parallel
from jax.extend import core
from jax.sharding import PartitionSpec as P

# Collective primitives: each runs in a shard_map of its own. Casts between types move no data.
_COLLECTIVES = frozenset(p.name for p in vars(parallel).values() if isinstance(p, core.Primitive))
_CASTS = frozenset(name for name in _COLLECTIVES if name.endswith(("_cast_p", "_cast"))) | {"pvary", "preduced"}
_MOVING = _COLLECTIVES - _CASTS  # the collectives that move data
# A collective bound as the check_vma=False shard_map binds it (its invariant form has no other meaning).
_PLAIN = {"psum_invariant": "psum"}


def cut(f: Any, *args: Any) -> list[np.ndarray]:
    """`f(*args)`'s flat outputs, computed by `f`'s jaxpr cut at its collectives (see the module docstring).

    Raises:
        NotImplementedError: a collective inside a nested body (a loop's, a branch's), which this cut would
            have to unroll.
    """
    closed = jax.make_jaxpr(f)(*args)
    return [np.asarray(x) for x in _host(closed.jaxpr, closed.consts, jax.tree.leaves(args))]


def _host(jaxpr: core.Jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list:
    """The host's equations: each shard_map cut, each nested jit walked, each run of other equations jitted as
    one function (as XLA compiles the host's work between shard_maps)."""
    env = dict(zip(jaxpr.constvars, consts)) | dict(zip(jaxpr.invars, args))
    read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
    pieces = _runs(jaxpr.eqns, lambda e: e.primitive.name in ("jit", "shard_map"))
    for piece, later in zip(pieces, _later(pieces, jaxpr.outvars)):
        eqn = piece[0]
        if eqn.primitive.name in ("jit", "shard_map"):  # every result, in order
            made = list(eqn.outvars)
            if eqn.primitive.name == "jit":
                inner = eqn.params["jaxpr"]
                outs = _host(inner.jaxpr, inner.consts, [read(v) for v in eqn.invars])
            else:
                outs = _shard_map(eqn, [read(v) for v in eqn.invars])
        else:
            reads, made = _reads(piece), _made(piece, later)
            outs = jax.jit(_local(piece, reads, made, rows=False))(*[env[v] for v in reads])
        env.update((v, o) for v, o in zip(made, outs) if not isinstance(v, core.DropVar))
    return [read(v) for v in jaxpr.outvars]


def _shard_map(eqn: core.JaxprEqn, ins: list) -> list:
    """One shard_map, cut: its inputs split into each device's block by its in_specs; each run of local
    equations jitted on its own and run on each device's values; each collective in a shard_map of its own
    over one row per device; the outputs put together by its out_specs."""
    params = eqn.params
    mesh, body = params["mesh"], params["jaxpr"]
    rows = P(tuple(mesh.axis_names))  # each device's value as one row of a global array, in mesh order
    mapped = lambda fn, i, o: jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=i, out_specs=o, check_vma=False))
    split = mapped(lambda *blocks: [b[None] for b in blocks], tuple(params["in_specs"]), [rows] * len(ins))(*ins)
    env = {v: list(np.asarray(x)) for v, x in zip(body.invars, split)}  # by variable: each device's value
    collective = lambda e: e.primitive.name in _MOVING
    pieces = _runs(body.eqns, collective)
    for piece, later in zip(pieces, _later(pieces, body.outvars)):
        for e in piece:
            if any(_has_collective(inner) for inner in core.jaxprs_in_params(e.params)):
                raise NotImplementedError(f"a collective inside `{e.primitive.name}`: only top-level collectives "
                                          f"are cut")
        reads, made = _reads(piece), _made(piece, later)
        if collective(piece[0]):
            outs = mapped(_local(piece, reads, made), (rows,) * len(reads), [rows] * len(made))(
                *[np.stack(env[v]) for v in reads])
            env.update((v, list(np.asarray(x))) for v, x in zip(made, outs))
        else:
            local = jax.jit(_local(piece, reads, made, rows=False))
            each = [local(*[env[v][d] for v in reads]) for d in range(mesh.size)]
            env.update((v, [np.asarray(outs[k]) for outs in each]) for k, v in enumerate(made))
    outs = [np.stack(env[v]) if not isinstance(v, core.Literal) else np.stack([v.val] * mesh.size)
            for v in body.outvars]
    return mapped(lambda *r: [x[0] for x in r], (rows,) * len(outs), list(params["out_specs"]))(*outs)


def _runs(eqns: Sequence[core.JaxprEqn], alone: Any) -> list[list[core.JaxprEqn]]:
    """`eqns` as pieces: each equation for which `alone` holds by itself, each maximal run of others together."""
    pieces: list[list[core.JaxprEqn]] = []
    for eqn in eqns:
        if alone(eqn) or not pieces or alone(pieces[-1][0]):
            pieces.append([eqn])
        else:
            pieces[-1].append(eqn)
    return pieces


def _has_collective(jaxpr: core.Jaxpr) -> bool:
    return any(e.primitive.name in _MOVING or any(_has_collective(j) for j in core.jaxprs_in_params(e.params))
               for e in jaxpr.eqns)


def _reads(piece: list[core.JaxprEqn]) -> list:
    """The variables a piece reads that it does not make, in order of first reading."""
    made: set = set()
    reads: list = []
    for eqn in piece:
        reads += [v for v in eqn.invars if not isinstance(v, core.Literal) and v not in made and v not in reads]
        made.update(eqn.outvars)
    return reads


def _made(piece: list[core.JaxprEqn], later: set) -> list:
    """What a piece makes that is read after it (XLA materialises only its outputs: which values are outputs
    decides what it fuses)."""
    return [v for e in piece for v in e.outvars if v in later]


def _later(pieces: list[list[core.JaxprEqn]], outvars: Sequence[Any]) -> list[set]:
    """For each piece, the variables read by the pieces after it or by the outputs."""
    seen = {v for v in outvars if not isinstance(v, core.Literal)}
    later: list[set] = []
    for piece in reversed(pieces):
        later.append(set(seen))
        seen.update(v for e in piece for v in e.invars if not isinstance(v, core.Literal))
    return later[::-1]


def _local(piece: list[core.JaxprEqn], reads: list, made: list, rows: bool = True) -> Any:
    """The piece as a function of the values it reads, returning those it makes; with `rows`, as the body of
    a shard_map over rows (each device's row in and out)."""
    def run(*values: Any) -> list:
        env = {v: x[0] if rows else x for v, x in zip(reads, values)}
        for eqn in piece:
            ins = [v.val if isinstance(v, core.Literal) else env[v] for v in eqn.invars]
            name = eqn.primitive.name
            if name in _CASTS:
                outs = ins
            else:
                primitive, params = eqn.primitive, eqn.params
                if name in _PLAIN:
                    primitive, params = getattr(parallel, f"{_PLAIN[name]}_p"), {"axis_index_groups": None, **params}
                out = primitive.bind(*ins, **primitive.get_bind_params(params))
                outs = list(out) if primitive.multiple_results else [out]
            env.update((v, o) for v, o in zip(eqn.outvars, outs) if not isinstance(v, core.DropVar))
        return [env[v][None] if rows else env[v] for v in made]

    return run
