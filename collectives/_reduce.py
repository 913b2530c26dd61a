"""`psum`, `pmean`, `pmax`, `pmin`, `psum_invariant`: all-reduce over a mesh axis, with JAX's dtypes and XLA:CPU's
arithmetic.

Every public function is a thin wrapper over one internal helper per collective (`_psum`, ...), which maps
`all_reduce_leaf` over the pytree and gives each leaf its device-variance type. psum_invariant (the design note's
psum2) is psum without axis_index_groups, what psum records under `check_vma=True`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithms import axes_shape, check_algorithm, named
from collectives._allreduce import ALGORITHMS, AllReduceArgs, all_reduce_protocol
from collectives._arithmetic import convert, mean_dtype, scale_to_mean, widen
from collectives._common import group_of, map_tree, operand, out_layout_of, same_across_group, same_operands
from collectives._definition import (
    AXIS_INDEX_GROUPS,
    AXIS_NAME,
    Definition,
    JaxBinding,
    NotLinear,
    Transposition,
    Vma,
)
from collectives._facts import MAX, MEAN, MIN, MOVES, SUM, WHOLE, Reduction, Sweep
from collectives._in_network import check_network
from collectives._strategy import any_shape
from collectives._vma import typed
from layouts import Layout


def psum(x: Any, axis_name: Any, *, axis_index_groups: Any = None, algorithm: str = "direct",
         out_layout: Any = None) -> Any:
    """Sum `x` over the devices of the group; every member gets the same sum.

    bool inputs are summed as int32; other dtypes keep theirs (integers wrap). A Python scalar is a
    constant of the program, as in JAX: `psum(1, 'x')` is the axis size, computed without messages
    (every member must pass the same scalar). `x` may be a pytree. `algorithm` chooses the messages and
    the summation order of floats (integers come out the same):

    - 'direct' (one step, every member sends to every member): the members' values are added one by one,
      in group order, to 0. This is XLA:CPU's order, so the result equals JAX's bit for bit.
    - 'ring' (2(n-1) steps of 1/n of the operand): chunk c of the flattened operand (`numpy.array_split`
      sizes) is added to 0 in the member order c+1, c+2, ..., n-1, 0, ..., c, then passed around.
    - 'recursive_doubling' (log2(n) steps, group size a power of two): a balanced tree, pairs of
      members first, the lower group index on the left.
    - 'bidirectional_ring' (2 (n // 2) steps of two messages of 1/n of the operand): chunk c is added
      along two chains of members, one from each side of the ring, that meet at member c (a reduce-scatter
      sending both ways at once), then the complete chunks travel both ways round.
    - 'rabenseifner' (2 log2(n) steps, group size a power of two): reduce-scatter by recursive halving
      (a balanced tree per chunk), then all-gather by recursive doubling.
    - 'per_axis' (when `axis_name` names several mesh axes): a ring along each axis in turn, the last
      named axis first; over one axis, or with axis_index_groups, 'ring'.
    - 'hierarchical' (on a network with nodes, `collectives._hierarchical`): each node's members add
      their terms of chunk j (one of k) in local-rank order on local rank j, the members of local rank j
      add their nodes' partial sums round a ring across nodes, and the complete chunks go to every member
      of the node. On 2 nodes of 2 (devices 0, 1 | 2, 3): device 0 gets x0[:h] + x1[:h], device 2
      x2[:h] + x3[:h] (h half the elements), devices 0 and 2 ring all-reduce that half, and device 0
      sends it to device 1. Without nodes: one node (a direct reduce-scatter, then a direct all-gather).
    - 'tree' (NCCL's, simplified, `collectives._tree`): each half of the operand is added down a chain
      from the last local rank to local rank 0 in each node, then up one of two binary trees over the
      nodes (the heap and its mirror image), and the sums go back down the trees and the chains.
    - 'in_network' (one step, only where the network's switch reduces: `sim.Network.switch_reduces`, as
      NVLS on an NVSwitch or SHARP on InfiniBand): every member sends each of its n shards into the
      switch, which adds shard j in group order (the bits of 'direct') and multicasts the sum to every
      member (`collectives._in_network`); on a network without it, an InvalidArgumentError.
    - 'multi_axis' (several mesh axes): the operand cut into one part per axis, each part reduce-scattered
      then all-gathered by bidirectional rings along the axes in its own rotation of them, all parts at
      once (`collectives._multi_axis`); over one axis, 'bidirectional_ring'. On {'x': 2, 'y': 2} a psum of
      8 elements moves elements 0:4 along y then x and 4:8 along x then y, at the same time.
    - 'auto': the fastest of these for the bytes, the group and the network (`collectives._cost`); the
      pick is recorded in `sim.CallRecord.algorithm`.

    Every order but 'direct''s and 'in_network''s may round floats differently, within `oracles._reordered`'s bound of
    (n-1) eps sum|x_i| of the exact sum.

    `x` may sit in memory in any layout; the result is written in `out_layout` (a `layouts.Layout`,
    default row-major: what JAX's `out_shardings=Format` sets). Layouts change times, never values:
    payloads go straight from memory, and an arrival in another order than the result's is unpacked by
    a timed step ('ring' works in row-major order: it packs an operand laid out otherwise first, and
    unpacks a result laid out otherwise last).

    Example on a 4-device mesh {'x': 4}: device d holds [d, 10 * d]; `psum(x, 'x')` gives [6, 60] on
    every device, and `psum(x, 'x', axis_index_groups=[[0, 1], [2, 3]])` gives [1, 10] on devices 0 and
    1 and [5, 50] on devices 2 and 3. On `sim.Network(topology='switch', switch_reduces=True)`,
    `psum(x, 'x', algorithm='in_network')` sends [d] and [10 * d] from device d into the switch, which adds
    0 + 1 + 2 + 3 = 6 and 0 + 10 + 20 + 30 = 60 and multicasts both: [6, 60] on every device after one
    switch latency plus the operand over one port.

    Raises:
        InvalidArgumentError: unknown axis name, bad groups, unknown algorithm, shapes or dtypes that
            differ within a group, an `out_layout` of another rank than the result, 'in_network' on a
            network whose switch does not reduce.
        InvalidTypeError: a non-numeric x, an `out_layout` that is not a `layouts.Layout` or None.
    """
    return _psum(x, axis_name, axis_index_groups, algorithm, out_layout)


def pmean(x: Any, axis_name: Any, *, axis_index_groups: Any = None, algorithm: str = "direct",
          out_layout: Any = None) -> Any:
    """The mean of `x` over the group: psum, then times 1/n rounded to the result dtype (as XLA:CPU does).

    Floating and complex dtypes keep theirs; bool and integers of up to 32 bits give float32, 64-bit
    integers float64 (as JAX gives, also under jax_enable_x64). The integer sum wraps before it is
    converted. `out_layout` as in `psum`.

    Example on a 2-device mesh {'x': 2}: device 0 holds int32 [1, 2], device 1 holds [2, 2];
    `pmean(x, 'x')` gives float32 [1.5, 2.0] on both.

    Raises:
        InvalidArgumentError, InvalidTypeError: as `psum`.
    """
    return _pmean(x, axis_name, axis_index_groups, algorithm, out_layout)


def pmax(x: Any, axis_name: Any, *, axis_index_groups: Any = None, algorithm: str = "direct",
         out_layout: Any = None) -> Any:
    """The elementwise maximum of `x` over the group, folded from -inf as C++ `std::max` does.

    A NaN never wins (pmax of NaNs alone is -inf) and a tie of -0.0 and +0.0 keeps the earlier member's.
    `algorithm` and `out_layout` as in `psum`.

    Example on a 2-device mesh {'x': 2}: device 0 holds [1, 5], device 1 holds [3, 2];
    `pmax(x, 'x')` gives [3, 5] on both.

    Raises:
        InvalidArgumentError: as `psum`.
        InvalidTypeError: a non-numeric or complex x (XLA:CPU cannot take the max of complex numbers).
    """
    return _pmax(x, axis_name, axis_index_groups, algorithm, out_layout)


def pmin(x: Any, axis_name: Any, *, axis_index_groups: Any = None, algorithm: str = "direct",
         out_layout: Any = None) -> Any:
    """The elementwise minimum of `x` over the group, folded from +inf as C++ `std::min` does.

    `algorithm` and `out_layout` as in `psum`.

    Example on a 2-device mesh {'x': 2}: device 0 holds [1, 5], device 1 holds [3, 2];
    `pmin(x, 'x')` gives [1, 2] on both.

    Raises:
        InvalidArgumentError, InvalidTypeError: as `pmax`.
    """
    return _pmin(x, axis_name, axis_index_groups, algorithm, out_layout)


def psum_invariant(x: Any, axis_name: Any, *, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """The sum of `x` over `axis_name` (varying -> invariant): psum's value, without axis_index_groups.

    `algorithm` and `out_layout` (the result's `layouts.Layout`, default row-major) as in `psum`.

    Example on a 2-device mesh {'i': 2}: device 0 holds [1, 2], device 1 holds [3, 4];
    `psum_invariant(x, 'i')` gives [4, 6] on both.

    The design note calls this operation psum2; `psum2` is this same function under that name.

    Raises:
        InvalidArgumentError, InvalidTypeError: as `psum`.
    """
    return _typed_reduce(PSUM_INVARIANT, PSUM_INVARIANT, x, axis_name, None, algorithm, out_layout)


psum2 = psum_invariant  # the design note's name; no JAX operation is called psum2


def _psum(x: Any, axis_name: Any, axis_index_groups: Any, algorithm: str, out_layout: Any) -> Any:
    # Without groups, psum is the design note's psum_invariant (after pvary of an invariant operand), as in JAX.
    recorded = PSUM_INVARIANT if axis_index_groups is None and sim.current().check_vma else PSUM
    return _typed_reduce(recorded, PSUM, x, axis_name, axis_index_groups, algorithm, out_layout)


def _pmean(x: Any, axis_name: Any, axis_index_groups: Any, algorithm: str, out_layout: Any) -> Any:
    return _typed_reduce(PMEAN, PMEAN, x, axis_name, axis_index_groups, algorithm, out_layout)


def _pmax(x: Any, axis_name: Any, axis_index_groups: Any, algorithm: str, out_layout: Any) -> Any:
    return _typed_reduce(PMAX, PMAX, x, axis_name, axis_index_groups, algorithm, out_layout)


def _pmin(x: Any, axis_name: Any, axis_index_groups: Any, algorithm: str, out_layout: Any) -> Any:
    return _typed_reduce(PMIN, PMIN, x, axis_name, axis_index_groups, algorithm, out_layout)


def _typed_reduce(recorded: Definition, called: Definition, x: Any, axis_name: Any, axis_index_groups: Any,
                  algorithm: str, out_layout: Any) -> Any:
    """Each leaf reduced as `called` and typed as `recorded`: invariant along the axes unless groups split them
    (one group is the whole axis)."""
    params = {"axis_name": axis_name} if recorded is PSUM_INVARIANT else {"axis_name": axis_name,
                                                                "axis_index_groups": axis_index_groups}
    return map_tree(lambda leaf: typed(
        recorded, axis_name, [leaf],
        lambda: all_reduce_leaf(called, leaf, axis_name, axis_index_groups, algorithm, out_layout),
        params, grouped=_split(axis_index_groups), called=called.name), x)


def _split(axis_index_groups: Any) -> bool:
    """Whether `axis_index_groups` splits the axes into more than one group (what is not a list of groups is
    refused by the group's own check)."""
    return isinstance(axis_index_groups, (list, tuple, np.ndarray)) and len(axis_index_groups) > 1


def all_reduce_leaf(called: Definition, x: Any, axis_name: Any, axis_index_groups: Any, algorithm: str,
                    out_layout: Any = None) -> Any:
    """One array (or Python scalar) through the all-reduce `called` (psum, pmean, psum_invariant, pmax, pmin), by its
    `Reduction`.

    The result is written in `out_layout` (None: row-major). On a mesh of one device XLA compiles the
    all-reduce away, so the value comes back unchanged (only pmean's dtype rule applies): -0.0,
    subnormals and NaN payloads survive there and nowhere else (bfloat16 NaNs become canonical: the
    conversions to float32 and back around the removed all-reduce stay).
    """
    op, reduction = called.name, called.reduction
    context, group = group_of(op, axis_name, axis_index_groups)
    rank = x.ndim if isinstance(x, np.ndarray) else np.ndim(x)  # np.ndim of a Varying goes through its typing
    layout = out_layout_of(op, context.device, out_layout, rank) or Layout.row_major(rank)
    if is_python_scalar(x):
        return _constant(called, context, group, x, axis_name)
    x = _reducible(called, context.device, x)
    check_network(op, context.device, check_algorithm(op, context.device, algorithm, group.size, ALGORITHMS),
                  context.mesh)
    memory = context.memory
    if context.mesh.size == 1:  # bfloat16 still passes through float32 and back: NaNs come back canonical
        x = convert(widen(x), x.dtype)
        return memory.view(memory.store(x.astype(mean_dtype(x.dtype)) if reduction.mean else x, layout))
    args = AllReduceArgs(memory.resident(x), reduction.element, algorithm, layout,
                         axes_shape(context.mesh, axis_name, axis_index_groups))
    params = (("axis_name", axis_name), ("algorithm", algorithm))
    total = context.collective(sim.Collective(op, group, params, args, all_reduce_protocol, same_operands(op, group)))
    return memory.view(memory.store(scale_to_mean(total, group.size), layout)) if reduction.mean else total


def is_python_scalar(x: Any) -> bool:
    """A Python int, float or complex (not bool, not a numpy scalar): a constant, as JAX treats it."""
    return isinstance(x, (int, float, complex)) and not isinstance(x, (bool, np.generic))


def _reducible(called: Definition, device: int, value: Any) -> np.ndarray:
    op = called.name
    x = operand(op, device, "x", value, reduces=True)
    if x.dtype.kind == "c" and called.reduction.extreme:
        raise sim.InvalidTypeError(
            f"device {device}: {op}: x has dtype {x.dtype}; complex numbers have no max or min "
            f"(XLA:CPU rejects the reduction)")
    if x.dtype.kind == "b" and not called.reduction.extreme:
        return x.astype(np.int32)  # as jax.lax.psum does
    return x


def _constant(called: Definition, context: sim.DeviceContext, group: sim.Group, x: Any, axis_name: Any) -> Any:
    """A Python scalar: after checking every member passed the same one, n * x (psum), x (pmean, pmax, pmin)."""
    op, reduction = called.name, called.reduction
    params = (("axis_name", axis_name), ("constant", True))
    context.collective(sim.Collective(op, group, params, x, _no_messages, _same_constant(op, group)))
    n = group.size
    if reduction.extreme:
        return x
    return n * x / n if reduction.mean else n * x


def _no_messages(port: sim.Port, args: Any) -> Generator:
    yield from ()
    return args


def _same_constant(op: str, group: sim.Group):
    def check(values: list[Any]) -> list[sim.Violation]:
        shown = [f"{type(v).__name__} {v!r}" for v in values]
        return same_across_group(op, group.members, shown, "the Python scalar x",
                                 " (a Python scalar is a constant of the program)")
    return check


# ---------------------------------------------------------------------------------------------- definitions


def _psum_transpose(t: Transposition) -> list:
    """Summing within each group is symmetric, so grouped psum (which keeps its result varying) is its own
    transpose. Ungrouped psum is recorded only under check_vma=False (typed programs record psum_invariant), whose
    transposes follow JAX's pre-vma rule: psum to psum (`linear_transpose` divides the unmapped outputs'
    cotangents)."""
    p = t.params
    if p.get("axis_index_groups") is None and sim.current().check_vma:
        t.refuse()
    return [t.ops.psum(t.ct, p["axis_name"], axis_index_groups=p["axis_index_groups"])]


def _pmean_transpose(t: Transposition) -> list:
    """Grouped pmean is its own transpose, as grouped psum; over the whole axis pmean is psum_invariant scaled by 1/n,
    whose transpose is pvary scaled by 1/n. Under check_vma=False pmean is its own transpose, as psum."""
    p = t.params
    if p.get("axis_index_groups") is not None or not sim.current().check_vma:
        return [t.ops.pmean(t.ct, p["axis_name"], axis_index_groups=p["axis_index_groups"])]
    return [t.ops.pvary(t.ct, p["axis_name"]) / sim.current().mesh.axis_size(p["axis_name"])]


def _psum_invariant_transpose(t: Transposition) -> list:
    """The design note's pair: the transpose of psum_invariant is pvary (no communication)."""
    return [t.ops.pvary(t.ct, t.params["axis_name"])]


def _axes(axis_name: Any) -> tuple[Any, ...]:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _bind_psum_invariant(jax: Any, p: dict[str, Any]) -> Any:
    return lambda x: jax.parallel.bind_psum_invariant(x, axes=_axes(p["axis_name"]), axis_index_groups=None,
                                                      is_async=False)


def _teach(reduction: Reduction):
    """What `meshsim explain` says about an all-reduce: what it does to each element, then its algorithm."""
    def teach(params: dict[str, Any], n: int) -> list[str]:
        algorithm = named(ALGORITHMS, params.get("algorithm", "direct"))
        return [f"Element-wise, it {reduction.verb} the operands of the {n} members of each group.",
                f"Algorithm {algorithm.text}"]
    return teach


def _sweep(function: Any, redop: str) -> Sweep:
    """nccl-tests' AllReduce: S is each device's buffer, busbw 2(n-1)/n of algbw."""
    return Sweep("AllReduce", "whole", "2(n-1)/n", lambda axis_name, n, algorithm: lambda x: function(
        x, axis_name, algorithm=algorithm), redop)


_GROUPED = (AXIS_NAME, AXIS_INDEX_GROUPS)
_FACTS = dict(batch=batch_rules.elementwise, algorithms=ALGORITHMS, sizes=MOVES, drawing=WHOLE)

PSUM = Definition(
    name="psum", function=psum, arrays=("x",), params=_GROUPED, vma=Vma.REDUCE, sums=True,
    transpose=_psum_transpose,
    jax=JaxBinding("psum", ("psum",), lambda jax, p: lambda x: jax.lax.psum(x, **p), grouped_unchecked=True),
    strategy=any_shape, reduction=SUM, sweep=_sweep(psum, "sum"), teach=_teach(SUM), **_FACTS,
)
PMEAN = Definition(
    name="pmean", function=pmean, arrays=("x",), params=_GROUPED, vma=Vma.REDUCE, sums=True,
    transpose=_pmean_transpose,
    jax=JaxBinding("pmean", (), lambda jax, p: lambda x: jax.lax.pmean(x, **p), grouped_unchecked=True),
    strategy=any_shape, reduction=MEAN, sweep=_sweep(pmean, "avg"), teach=_teach(MEAN), **_FACTS,
)
PMAX = Definition(
    name="pmax", function=pmax, arrays=("x",), params=_GROUPED, vma=Vma.REDUCE,
    transpose=NotLinear("the maximum of the operands is not linear in them"),
    jax=JaxBinding("pmax", ("pmax",), lambda jax, p: lambda x: jax.lax.pmax(x, **p)),
    strategy=any_shape, reduction=MAX, sweep=_sweep(pmax, "max"), teach=_teach(MAX), **_FACTS,
)
PMIN = Definition(
    name="pmin", function=pmin, arrays=("x",), params=_GROUPED, vma=Vma.REDUCE,
    transpose=NotLinear("the minimum of the operands is not linear in them"),
    jax=JaxBinding("pmin", ("pmin",), lambda jax, p: lambda x: jax.lax.pmin(x, **p)),
    strategy=any_shape, reduction=MIN, sweep=_sweep(pmin, "min"), teach=_teach(MIN), **_FACTS,
)
PSUM_INVARIANT = Definition(
    name="psum_invariant", function=psum_invariant, arrays=("x",), params=(AXIS_NAME,), vma=Vma.REDUCE,
    sums=True, transpose=_psum_invariant_transpose,
    jax=JaxBinding("psum_invariant", ("psum_invariant",), _bind_psum_invariant),
    strategy=any_shape, reduction=SUM, sweep=None, teach=_teach(SUM), **_FACTS,
)
