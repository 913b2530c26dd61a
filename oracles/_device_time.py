"""Time for the bridge's local work, and its asynchronous collectives beside it.

On a network with a roofline (every preset; `sim.Roofline`), the local work a device runs between
collectives is charged on its compute track (`sim.compute`): a compiled segment by XLA's own cost analysis
(`charge_cost(compiled.cost_analysis())`), an equation evaluated alone by the same counts XLA's
`HloCostAnalysis` makes (`equation_cost`: a dot is 2 flops per multiply-add, an elementwise op one flop per
output element, a transcendental one transcendental per element; the bytes are the operands' and results'),
so that work and messages share one clock. Without a roofline nothing is charged and runs keep their times.

JAX's asynchronous collectives (`ppermute_start(...)` ... `.done()`) run as lanes (`sim.start`): the messages
fly while the device goes on with the work between the start and the done, as XLA's async collectives do.
Where time is charged, every other collective runs as dataflow too: it starts when its operands are ready
and its outputs are futures, waited for where an equation first reads them (`ready`), so work that does
not depend on it goes on meanwhile.

>>> f32 = np.dtype("float32")
>>> equation_time_counts(((f32, (64, 32)), (f32, (32, 16))), ((f32, (64, 16)),), "dot_general", 32)
(65536.0, 14336.0, 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from jax.extend import core

import sim

# The elementwise primitives XLA counts as transcendentals (HloCostAnalysis: exp, expm1, log, log1p, pow,
# sqrt, rsqrt, cbrt, sin, cos, tan, tanh, logistic, erf, atan2), by JAX's names.
TRANSCENDENTAL = frozenset({"exp", "exp2", "expm1", "log", "log1p", "pow", "sqrt", "rsqrt", "cbrt", "sin", "cos",
                            "tan", "tanh", "logistic", "erf", "atan2"})
# Primitives that move or relabel data without arithmetic: bytes, no flops.
_MOVES = frozenset({"reshape", "broadcast_in_dim", "transpose", "slice", "dynamic_slice", "dynamic_update_slice",
                    "concatenate", "gather", "scatter", "squeeze", "expand_dims", "convert_element_type", "copy",
                    "copy_p", "pad", "rev", "select_n", "iota", "bitcast_convert_type", "split"})


def charging() -> bool:
    """Whether the running device's work is charged time: inside a simulated program on a network with a
    roofline."""
    context = sim.current_or_none()
    return context is not None and context.mesh.network.roofline is not None


def charge_cost(cost: Mapping[str, float] | Sequence[Mapping[str, float]] | None, name: str = "") -> None:
    """Charge work the running device has just done, given as XLA's cost analysis of it (a dict, or JAX's
    older list of one dict per computation: 'flops', 'bytes accessed', 'transcendentals'), on its compute
    track. Nothing happens outside a simulated program or on a network without a roofline."""
    if cost is None or not charging():
        return
    parts = [cost] if isinstance(cost, Mapping) else list(cost)
    totals = [sum(max(float(p.get(key, 0.0) or 0.0), 0.0) for p in parts)
              for key in ("flops", "bytes accessed", "transcendentals")]
    if any(totals):
        sim.compute(*totals, name=name)


def equation_time_counts(ins: Sequence[tuple[Any, tuple[int, ...]]], outs: Sequence[tuple[Any, tuple[int, ...]]],
                         primitive: str, contracted: int = 1) -> tuple[float, float, float]:
    """(flops, bytes accessed, transcendentals) of one equation with operands `ins` and results `outs`, each
    (dtype, shape), as XLA's cost analysis counts them; `contracted` is a dot's contracted size."""
    bytes_accessed = float(sum(_itemsize(d) * math.prod(s) for d, s in (*ins, *outs)))
    out_elements = float(sum(math.prod(s) for _, s in outs))
    if primitive in _MOVES:
        return 0.0, bytes_accessed, 0.0
    if primitive == "dot_general":
        return 2.0 * out_elements * contracted, bytes_accessed, 0.0
    if primitive in TRANSCENDENTAL:
        return 0.0, bytes_accessed, out_elements
    if primitive.startswith(("reduce_", "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin")):
        return float(sum(math.prod(s) for _, s in ins)), bytes_accessed, 0.0
    return out_elements, bytes_accessed, 0.0


def _itemsize(dtype: Any) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # a dtype numpy does not know (a PRNG key's): its own item size
        return int(getattr(dtype, "itemsize", 4))


def charge_equation(eqn: Any) -> None:
    """Charge one equation the device has just evaluated alone (`equation_time_counts` of its avals); nothing
    without a roofline."""
    if not charging():
        return
    shaped = [(v.aval.dtype, tuple(v.aval.shape)) for v in eqn.invars if hasattr(v.aval, "shape")]
    results = [(v.aval.dtype, tuple(v.aval.shape)) for v in eqn.outvars if hasattr(v.aval, "shape")]
    contracted = 1
    if eqn.primitive.name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        contracted = math.prod(eqn.invars[0].aval.shape[d] for d in lhs_contract)
    counts = equation_time_counts(shaped, results, eqn.primitive.name, contracted)
    if any(counts):
        sim.compute(*counts, name=eqn.primitive.name)


class Started:
    """Output `index` of an asynchronous collective started as a lane, until its done hands it on."""

    def __init__(self, pending: sim.Pending, index: int, check: Callable[[int, Any], None] | None = None) -> None:
        self.pending, self.index, self.check = pending, index, check

    def value(self) -> Any:
        """The output, waiting for its collective where it has not ended; checked (`check(index, value)`)
        the first time it is read."""
        out = self.pending.result()[self.index]
        if self.check is not None:
            check, self.check = self.check, None
            check(self.index, out)
        return out


def start_collective(run: Callable[[], list], count: int,
                     check: Callable[[int, Any], None] | None = None) -> list[Started]:
    """Start `run()` (a collective's outputs) beside the device's work: its `count` futures, each checked
    with `check(index, value)` when first read."""
    pending = sim.start(run)
    return [Started(pending, k, check) for k in range(count)]


def done(values: Sequence[Any]) -> list:
    """The outputs the futures `values` stand for, waiting for their collective where it has not ended."""
    return [v.value() if isinstance(v, Started) else v for v in values]


def ready(values: list) -> list:
    """`values` with every future among them waited for (`done`); `values` itself when it holds none."""
    for value in values:
        if value.__class__ is Started:
            return done(values)
    return values


_hoisted: dict[int, tuple[Any, Any]] = {}


def hoisted(jaxpr: Any, collective: Callable[[Any], bool]) -> Any:
    """`jaxpr` with each equation `collective` accepts moved up to where its operands are ready: just after
    the equations that make them or, for an operand another collective makes, just before the first
    equation that reads that one (where the device waits for it anyway); never above an earlier collective
    or an equation with effects, so every device still calls its collectives in one order. The order in
    which a device that starts each collective as soon as its operands are ready meets them; made once per
    jaxpr.

    For a body `y = x @ w; z = ppermute(x)`, the ppermute comes first: its messages fly during the matmul.
    """
    cached = _hoisted.get(id(jaxpr))
    if cached is not None and cached[0] is jaxpr:
        return cached[1]
    order: list[Any] = []
    for eqn in jaxpr.eqns:
        if collective(eqn):
            order.insert(_ready_at(order, eqn, collective), eqn)
        else:
            order.append(eqn)
    result = jaxpr.replace(eqns=order)
    _hoisted[id(jaxpr)] = (jaxpr, result)
    return result


def _ready_at(order: list, eqn: Any, collective: Callable[[Any], bool]) -> int:
    """Where in `order` the collective `eqn` starts (see `hoisted`)."""
    ins = set(_variables(eqn))
    at = 0
    for k, e in enumerate(order):
        if collective(e) or e.effects:
            at = k + 1
        made = ins.intersection(e.outvars)
        if made:
            at = max(at, k + 1)
            if collective(e):  # wait where the device first reads it anyway
                readers = [j for j in range(k + 1, len(order))
                           if not collective(order[j]) and any(v in made for v in _variables(order[j]))]
                at = max(at, readers[0] if readers else len(order))
    return at


def _variables(eqn: Any) -> list:
    """The variables `eqn` reads (its operands but literals)."""
    return [v for v in eqn.invars if not isinstance(v, core.Literal)]
