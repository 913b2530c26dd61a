"""Collectives inside JAX's control flow, against the unrolled program: a kind of the rules campaign.

A generated call (any collective with arrays, any dtype) becomes a `jax.shard_map` program that runs the
collective `ITERATIONS` times on different data (the i-th run adds i to every data argument; index arrays
stay as drawn) inside one of JAX's control-flow constructs, and the same program with the construct
unrolled in Python (the collective bound once per run, no control-flow primitive):

- `scan`: `lax.scan` over the runs, each run's result stacked; `scan_checkpoint` the same with the step
  under `jax.checkpoint` (remat of a scanned layer, its collective recomputed by the transpose);
- `fori_loop`, `while_loop`: the runs' results summed in a loop carry (run i reads its data with a dynamic
  index; the unrolled sum adds in the same order);
- `cond`: `lax.cond` on a replicated predicate picks run 1 or run 0;
- `checkpoint`: `jax.checkpoint` around the collective (saving nothing, so the transpose recomputes it);
- `nested`: the collective in a `jax.shard_map` nested in another, the outer one manual over the mesh
  axes the collective does not use and the inner over those it does (when it uses every axis of a 2-D
  mesh, the outer is manual over the first and the inner over the second, so the collective reads an
  axis of the outer shard_map; on a 1-D mesh the inner shard_map stands alone).

`control_problem` checks the outputs equal; then either (drawn) `jax.vmap` of the program over a batch of
its data arguments against the unrolled program run once per batch element (the batching rules of the
constructs with a collective inside), or, for a linear collective in a float dtype, JAX's reverse mode
through the construct (`jax.vjp` of the program against `jax.vjp` of the unrolled one; `while_loop` has no
reverse mode, so there its forward mode, `jax.jvp`). Like `oracles._rules`, this imports jax with
64-bit types: import it only in a process made for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

import collectives
from oracles._jax_dispatch import route
from oracles._rules import Case, Program, small_ints
from oracles._rules_forward import close, shown

ITERATIONS = 3
CONSTRUCTS = ("scan", "scan_checkpoint", "fori_loop", "while_loop", "cond", "checkpoint", "nested")
STACKED = ("scan", "scan_checkpoint")  # constructs whose runs' results are stacked, not summed


class Looped:
    """One call run `ITERATIONS` times inside `construct`, as a JAX program and as its unrolled twin."""

    def __init__(self, case: Case, check_vma: bool, construct: str, pred: bool) -> None:
        self.p = Program(case, check_vma)
        self.construct, self.pred = construct, pred
        d = self.p.definition
        self.data = [k for k, name in enumerate(d.arrays) if name not in d.index_arrays]
        self.inputs = [np.stack([g + np.asarray(i, g.dtype) for i in range(ITERATIONS)]) if k in self.data else g
                       for k, g in enumerate(self.p.globals)]
        self.specs = tuple(PartitionSpec(None, *s) if k in self.data else s for k, s in enumerate(self.p.jax_specs))
        self.call = route(case.op).body(case.params)

    def program(self, unrolled: bool) -> Callable[..., Any]:
        """The jitted shard_map of the construct (or, `unrolled`, of its Python unrolling)."""
        on = self.p.case.mesh_shape
        names = tuple(on)
        out = PartitionSpec(None, names) if self.construct in STACKED else PartitionSpec(names)
        body = self._unrolled if unrolled else self._looped
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:int(np.prod(list(on.values())))]).reshape(
            tuple(on.values())), names)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=self.specs, out_specs=out,
                                     check_vma=self.p.check_vma))

    def _run(self, blocks: tuple, i: Any) -> Any:
        """The collective on run `i`'s data (a Python int or a traced index)."""
        args = [b[i, 0] if k in self.data else b[0] for k, b in enumerate(blocks)]
        return self.call(*args)

    def _unrolled(self, *blocks: Any) -> Any:
        runs = [self._run(blocks, i) for i in range(ITERATIONS)]
        if self.construct in STACKED:
            return jnp.stack(runs)[:, None]
        if self.construct in ("fori_loop", "while_loop"):
            total = runs[0]
            for r in runs[1:]:
                total = total + r
            return total[None]
        return (runs[1] if self.construct == "cond" and self.pred else runs[0])[None]

    def _looped(self, *blocks: Any) -> Any:
        out = _CONSTRUCTS[self.construct](self, blocks)
        return out[:, None] if self.construct in STACKED else out[None]


def _scan(lp: Looped, blocks: tuple) -> Any:
    def step(carry: Any, i: Any) -> tuple[Any, Any]:
        return carry, lp._run(blocks, i)
    return lax.scan(step, None, jnp.arange(ITERATIONS))[1]


def _scan_checkpoint(lp: Looped, blocks: tuple) -> Any:
    @jax.checkpoint
    def step(carry: Any, i: Any) -> tuple[Any, Any]:
        return carry, lp._run(blocks, i)
    return lax.scan(step, None, jnp.arange(ITERATIONS))[1]


def _fori(lp: Looped, blocks: tuple) -> Any:
    return lax.fori_loop(1, ITERATIONS, lambda i, total: total + lp._run(blocks, i), lp._run(blocks, 0))


def _while(lp: Looped, blocks: tuple) -> Any:
    def step(carry: tuple[Any, Any]) -> tuple[Any, Any]:
        i, total = carry
        return i + 1, total + lp._run(blocks, i)
    return lax.while_loop(lambda c: c[0] < ITERATIONS, step, (1, lp._run(blocks, 0)))[1]


def _cond(lp: Looped, blocks: tuple) -> Any:
    # the predicate is replicated (a literal the program cannot fold: it comes through an optimization barrier)
    pred = lax.optimization_barrier(jnp.asarray(lp.pred))
    return lax.cond(pred, lambda: lp._run(blocks, 1), lambda: lp._run(blocks, 0))


def _checkpoint(lp: Looped, blocks: tuple) -> Any:
    saved = jax.checkpoint(lambda *bs: lp._run(bs, 0), policy=jax.checkpoint_policies.nothing_saveable)
    return saved(*blocks)


def _axes(axis_name: Any) -> tuple[str, ...]:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


_CONSTRUCTS: dict[str, Callable[[Looped, tuple], Any]] = {
    "scan": _scan, "scan_checkpoint": _scan_checkpoint, "fori_loop": _fori, "while_loop": _while, "cond": _cond,
    "checkpoint": _checkpoint}


def constructs(op: str) -> tuple[str, ...]:
    """The constructs a call of `op` is run in: all but `nested` for an operand that must be invariant
    (its blocks are laid out over the other axes only, which the nested layout does not follow)."""
    return CONSTRUCTS[:-1] if collectives.definition(op).invariant_operand else CONSTRUCTS


class Nested:
    """The call (its first run) in a shard_map manual over its own axes, nested in one manual over the others.

    Every argument is laid out with one dimension per mesh axis (device d's block at its coordinates), so
    the outer shard_map splits the other axes' dimensions and the inner one the collective's; the result
    comes back in the same layout and is flattened to the plain program's (device-major) one.
    """

    def __init__(self, p: Program) -> None:
        self.p = p
        self.names, self.sizes = tuple(p.case.mesh_shape), tuple(p.case.mesh_shape.values())
        mine = _axes(p.case.params["axis_name"])
        others = tuple(a for a in self.names if a not in mine)
        # without other axes, the outer one is manual over the collective's first axis (a 2-axis collective
        # then reads one of its axes from the outer shard_map); on a 1-axis mesh there is nothing to nest
        self.outer = others or (self.names[:1] if len(self.names) > 1 else ())
        self.inner = tuple(a for a in self.names if a not in self.outer)
        self.inputs = [g.reshape(*self.sizes, *g.shape[1:]) for g in p.globals]
        self.call = route(p.case.op).body(p.case.params)

    def _spec(self, manual: tuple[str, ...]) -> PartitionSpec:
        return PartitionSpec(*(a if a in manual else None for a in self.names))

    def program(self) -> Callable[..., Any]:
        """The jitted nested program, taking and returning the plain program's (device-major) arrays."""
        k, p = len(self.names), self.p
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:int(np.prod(self.sizes))]).reshape(self.sizes), self.names)
        inner_spec, outer_spec = self._spec(self.inner), self._spec(self.outer)
        specs = len(self.inputs)

        def inner(*bs: Any) -> Any:
            return self.call(*(b.reshape(b.shape[k:]) for b in bs))[(None,) * k]

        def outer(*bs: Any) -> Any:
            return jax.shard_map(inner, mesh=jax.sharding.get_abstract_mesh() if self.outer else mesh,
                                 in_specs=(inner_spec,) * specs, out_specs=inner_spec,
                                 axis_names=frozenset(self.inner), check_vma=p.check_vma)(*bs)

        nested = outer if not self.outer else jax.shard_map(
            outer, mesh=mesh, in_specs=(outer_spec,) * specs, out_specs=outer_spec,
            axis_names=frozenset(self.outer), check_vma=p.check_vma)

        def flat(*args: Any) -> Any:
            shaped = [a.reshape(*self.sizes, *a.shape[1:]) for a in args]
            out = nested(*shaped)
            return out.reshape(int(np.prod(self.sizes)), *out.shape[k:])
        return jax.jit(flat)


def control_problem(case: Case, check_vma: bool, construct: str, pred: bool = True,
                    batched: bool = False) -> str | None:
    """What differs between the program with `construct` and its unrolled twin (outputs; reverse mode, or
    forward mode for while_loop, for a linear collective in a float dtype; with `batched`, `jax.vmap` of
    the program over a batch of its data arguments against the unrolled program run once per element)."""
    lp = Looped(case, check_vma, construct, pred)
    unrolled = lp.p.jax if construct == "nested" else lp.program(unrolled=True)
    inputs = lp.p.globals if construct == "nested" else lp.inputs
    want = np.asarray(unrolled(*inputs))
    try:
        looped = Nested(lp.p).program() if construct == "nested" else lp.program(unrolled=False)
        got = np.asarray(looped(*inputs))
    except Exception as error:  # JAX's rule failing is a finding, not a crash of the campaign
        return f"{construct}: JAX raised {type(error).__name__}: {str(error)[:300]}"
    if not close(want, got, 0.0 if not np.issubdtype(want.dtype, np.inexact) else 4.0):
        return shown(f"{construct}: the output differs from the unrolled program's", want, got)
    if batched:
        return _batched(lp, looped, unrolled, inputs)
    if not differentiable(lp.p):
        return None
    return _derivatives(lp, looped, unrolled, inputs, want)


BATCH = 2  # elements of the batch `batched` vmaps over


def batch_axes(case: Case) -> list[int | None]:
    """The batch axis of each argument under `control_problem(..., batched=True)`: 0 for every one (index
    arrays batched too, each element a copy: offsets and sizes stay as drawn; JAX's ragged batching rule
    refuses unbatched ones, FINDINGS.md 9, which the vmap kind meets)."""
    return [0 for _ in collectives.definition(case.op).arrays]


def _batched(lp: Looped, looped: Callable[..., Any], unrolled: Callable[..., Any], inputs: list) -> str | None:
    axes = batch_axes(lp.p.case)
    shift = [k in lp.data for k in range(len(inputs))]
    stacked = [np.stack([x + np.asarray(b if moved else 0, x.dtype) for b in range(BATCH)])
               for x, moved in zip(inputs, shift)]
    loop = [np.asarray(unrolled(*[x if a is None else x[b] for x, a in zip(stacked, axes)])) for b in range(BATCH)]
    want = np.stack(loop)
    try:
        got = np.asarray(jax.vmap(looped, in_axes=tuple(axes))(*stacked))
    except NotImplementedError as error:  # JAX's documented refusals (ragged with groups, ...)
        if "feature request" in str(error) or "axis_index_groups" in str(error):
            return None
        return f"{lp.construct}: jax.vmap raised NotImplementedError: {str(error)[:300]}"
    except Exception as error:
        return f"{lp.construct}: jax.vmap raised {type(error).__name__}: {str(error)[:300]}"
    if not close(want, got, 0.0 if not np.issubdtype(want.dtype, np.inexact) else 4.0):
        return shown(f"{lp.construct}: jax.vmap differs from the unrolled program run per batch element", want, got)
    return None


def differentiable(p: Program) -> bool:
    """A linear collective whose linear arguments are floats: what JAX's derivatives take."""
    return p.definition.linear and all(jnp.issubdtype(p.globals[k].dtype, jnp.floating) for k in p.linear)


def _derivatives(lp: Looped, looped: Callable[..., Any], unrolled: Callable[..., Any], inputs: list,
                 out: np.ndarray) -> str | None:
    linear = [k for k in lp.p.linear if k in lp.data]
    args = list(inputs)

    def of(fn: Callable[..., Any]) -> Callable[..., Any]:
        def at(*ls: Any) -> Any:
            full = list(args)
            for k, v in zip(linear, ls):
                full[k] = v
            return fn(*full)
        return at

    primals = tuple(args[k] for k in linear)
    if lp.construct == "while_loop":  # no reverse mode through a while_loop: its forward mode
        ts = tuple(small_ints(x.shape, x.dtype, 30 + k) for k, x in enumerate(primals))
        what = "jax.jvp"

        def derivative(fn: Callable[..., Any]) -> list:
            return [jax.jvp(of(fn), primals, ts)[1]]
    else:
        ct = small_ints(out.shape, out.dtype, 7)
        what = "jax.vjp"

        def derivative(fn: Callable[..., Any]) -> list:
            return list(jax.vjp(of(fn), *primals)[1](ct))
    try:
        wants = derivative(unrolled)
    except Exception as error:  # the plain program's own derivative failing: a transpose finding
        return f"{lp.construct}: {what} of the unrolled program raised {type(error).__name__}: {str(error)[:300]}"
    try:
        gots = derivative(looped)
    except Exception as error:
        return f"{lp.construct}: {what} raised {type(error).__name__}: {str(error)[:300]}"
    for want, got in zip(wants, gots):
        if not close(want, got, 8.0):
            return shown(f"{lp.construct}: {what} differs from {what} of the unrolled program", want, got)
    return None
