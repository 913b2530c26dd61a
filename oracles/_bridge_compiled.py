"""A device's compiled segment: typed as equation-by-equation evaluation types it, recorded in the device's
program equation by equation, and run as one XLA computation.

The types of a segment's values depend only on its inputs' types, so they are worked out once per segment and
input types (`typing`): each local equation's result varies along the union of its operands' axes (under
`check_vma`, an operand that varies along fewer is first promoted by a recorded `pvary`, as `sim.apply` does),
a cast takes the type the jaxpr gives it, and so does a loop or a branch, joined with the type of its
choice (`_choice`; `local` keeps every other primitive whose JAX typing may slip out of a segment). Where a
result's type differs from the jaxpr's, the segment is not compiled: its equations run one by one, where the
mismatch is reported on the equation that makes it.

>>> # in a body `x * w` with x varying along 'i' and w invariant, the segment records
>>> #   b = pvary[axes=('i',)] w ; c = mul a b   (c varies along 'i', as the jaxpr says)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import starmap
from typing import Any

import numpy as np
from jax.extend import core

import sim
from oracles._bridge_diagnostics import CHOICES
from oracles._bridge_eval import contains
from oracles._bridge_segments import RETYPES, Segment, execute, held

numbered = sim.Program.numbered  # a program's variable of a given number
Varying = sim.Varying


@dataclass(frozen=True)
class _Step:
    """One equation of a typed segment: its op and recorded params, each operand (a segment value's index, or
    a constant), the operands promoted and to which axes, and its results' indices and types."""

    op: str
    params: tuple
    operands: tuple[int | sim.Const, ...]
    promoted: tuple[tuple[int, frozenset], ...]  # (position among the operands, the axes it is raised to)
    results: tuple[int, ...]
    avals: tuple[tuple[np.dtype, tuple[int, ...], frozenset], ...]  # each result's dtype, shape and vma
    cast: bool


@dataclass(frozen=True)
class _Typed:
    """A segment typed for one set of input types: its steps, how many values it names, and where each of the
    segment's outputs is among them with its type; `rows` holds the steps as plain tuples for `_equations`
    (op, params, operands, promoted, first result index, result types, cast), `fresh` how many variables
    its record makes and `numbered` each output's number among them and type."""

    steps: tuple[_Step, ...]
    count: int
    outputs: tuple[tuple[int, frozenset], ...]
    rows: tuple[tuple, ...] = ()
    fresh: int = 0
    numbered: tuple[tuple[int, tuple], ...] = ()
    outs: dict = field(default_factory=dict, compare=False)  # the output variables, by first variable number

    def __post_init__(self) -> None:
        rows = tuple((s.op, s.params, s.operands if all(k.__class__ is int for k in s.operands) else _Mixed(s.operands),
                      s.promoted, s.results[0] if s.results else 0, s.avals, s.cast) for s in self.steps)
        object.__setattr__(self, "rows", rows)
        number, numbers = 0, {}
        for step in self.steps:  # the order `_equations` makes them in: each step's pvary results, then its own
            number += len(step.promoted)
            for index, aval in zip(step.results, step.avals):
                numbers[index] = (number, aval)
                number += 1
        object.__setattr__(self, "fresh", number)
        object.__setattr__(self, "numbered", tuple(numbers[index] for index, _ in self.outputs))


@dataclass(frozen=True)
class _Mixed:
    """A step's operands where some are constants: segment value indices and `sim.Const`s, in order."""

    items: tuple[int | sim.Const, ...]


def run(segment: Segment, values: list, check_vma: bool) -> list | None:
    """A device's outputs of `segment` on its `values`, each a `sim.Varying` recorded in the device's program;
    None where the segment must run equation by equation (its types differ from the jaxpr's, or XLA cannot
    compile it)."""
    if segment.eager:
        return None
    key = (check_vma, tuple([(True, v.vma) if v.__class__ is Varying else (isinstance(v, Varying), sim.vma_of(v))
                             for v in values]))
    typed = segment.typed.get(key)
    if typed is None:
        typed = segment.typed[key] = typing(segment, key[1], check_vma) or False
    if typed is False:
        return None
    outs = execute(segment, [np.asarray(v) for v in values])
    if outs is None:
        return None
    found = []
    for out, (_, vma), var in zip(outs, typed.outputs, _record(typed, values)):
        value = out.view(Varying)  # as `sim.wrap` makes it: the vma is a frozenset already
        value.vma, value.variable = vma, var
        found.append(value)
    return found


def typing(segment: Segment, inputs: tuple[tuple[bool, frozenset], ...], check_vma: bool) -> _Typed | None:
    """`segment`'s steps for inputs of these (is a `Varying`, vma) types; None where a result's type differs
    from the one the jaxpr gives it."""
    index = {var: k for k, var in enumerate(segment.invars)}
    types = [vma if check_vma else frozenset() for _, vma in inputs]
    varying = [is_varying for is_varying, _ in inputs]
    steps = []
    for eqn in segment.eqns:
        operands = tuple(sim.Const(np.asarray(v.val, dtype=v.aval.dtype)) if isinstance(v, core.Literal)
                         else index[v] for v in eqn.invars)
        cast = eqn.primitive.name in RETYPES
        choice = _choice(eqn, types, operands) if check_vma and not cast else None
        if cast or choice is not None:
            vmas = tuple(aval_vma(v.aval) | (choice or frozenset()) if check_vma else frozenset()
                         for v in eqn.outvars)
            promoted: tuple = ()
        else:
            union = frozenset().union(*(types[k] for k in operands if isinstance(k, int))) if check_vma \
                else frozenset()
            promoted = tuple((p, union) for p, k in enumerate(operands)
                             if isinstance(k, int) and varying[k] and types[k] != union)
            vmas = (union,) * len(eqn.outvars)
        if check_vma and any(vma != aval_vma(v.aval) for vma, v in zip(vmas, eqn.outvars)):
            return None
        results = tuple(range(len(types), len(types) + len(eqn.outvars)))
        for var, vma in zip(eqn.outvars, vmas):
            index[var] = len(types)
            types.append(vma)
            varying.append(True)
        avals = tuple((*held(v.aval), vma) for v, vma in zip(eqn.outvars, vmas))
        steps.append(_Step(eqn.primitive.name, _params(eqn.primitive.name, eqn.params), operands, promoted, results,
                           avals, cast))
    outputs = tuple((index[v], types[index[v]]) for v in segment.outvars)
    return _Typed(tuple(steps), len(types), outputs)


def _choice(eqn: core.JaxprEqn, types: list, operands: tuple) -> frozenset | None:
    """For a loop or branch whose bodies hold no loop or branch of their own, the axes its choice varies along
    (a cond's index, a while_loop's predicate; none for a scan), which its results vary along too (where JAX
    types them without, FINDINGS.md 13 and 14, the segment is walked and the slip reported); None for any
    other equation, typed by the union of its operands' types."""
    bodies = core.jaxprs_in_params(eqn.params)
    if not bodies or any(contains(body, CHOICES) for body in bodies):
        return None
    if eqn.primitive.name == "cond":
        return types[operands[0]] if isinstance(operands[0], int) else frozenset()
    if eqn.primitive.name == "while":
        return aval_vma(eqn.params["cond_jaxpr"].jaxpr.outvars[0].aval)
    return frozenset()


def record_late(typed: _Typed, values: list) -> list:
    """Record the typed segment's equations in the running device's program, made when the program is read
    (`sim.Program.defer`): the variables of its outputs, numbered and typed as `record_now` makes them."""
    program = sim.current().program
    refs = _refs(values)
    first = program.defer(lambda first: _equations(typed, refs, first, dict(zip(
        [first + number for number, _ in typed.numbered], outs))), typed.fresh)
    outs = typed.outs.get(first)
    if outs is None:  # a variable is a value (its name and type): every program numbering it so shares it
        outs = typed.outs[first] = tuple([numbered(first + number, *aval) for number, aval in typed.numbered])
    return outs


def record_now(typed: _Typed, values: list) -> list:
    """Record the typed segment's equations in the running device's program as it runs: the variables of its
    outputs."""
    program = sim.current().program
    first, made = program.take(typed.fresh), {}
    program.recorded += _equations(typed, _refs(values), first, made)
    return [made[first + number] for number, _ in typed.numbered]


def _refs(values: list) -> list:
    """What a program reads for each input of a segment: its variable, or the constant it is."""
    return [v.variable if isinstance(v, sim.Varying) and v.variable is not None else sim.Const(np.asarray(v))
            for v in values]


# How a device records a segment's equations: `record_late` (`record_now` records the same, as it runs).
_record = record_late


def _equations(typed: _Typed, inputs: list, first: int, made: dict) -> list:
    """The typed segment's equations on the variables or constants `inputs`, their fresh variables numbered
    from `first` on (those in `made`, by number, taken as they are; the others added to it)."""
    refs = inputs + [None] * (typed.count - len(inputs))
    number, equations, equation = first, [], sim.Equation

    def var(dtype: np.dtype, shape: tuple[int, ...], vma: frozenset) -> sim.Var:
        nonlocal number
        found = made.get(number)
        if found is None:
            found = made[number] = numbered(number, dtype, shape, vma)
        number += 1
        return found

    for op, params, operands, promoted, first_result, avals, cast in typed.rows:
        if operands.__class__ is tuple:  # indices alone
            ins = tuple([refs[k] for k in operands])
        else:  # a _Mixed: indices and constants
            ins = tuple([refs[k] if k.__class__ is int else k for k in operands.items])
        if promoted:
            raised = list(ins)
            for position, vma in promoted:  # raised to its axes by a pvary, as `sim.apply` records it
                low = raised[position]
                raised[position] = var(low.dtype, low.shape, vma)
                equations.append(equation("pvary", (("axes", tuple(sorted(vma - low.vma))),), (low,),
                                          (raised[position],)))
            ins = tuple(raised)
        outs = tuple(starmap(var, avals))
        if cast:
            equations += [equation(op, params, (i,), (o,)) for i, o in zip(ins, outs)]
        else:
            equations.append(equation(op, params, ins, outs))
        refs[first_result:first_result + len(outs)] = outs
    return equations


def _params(name: str, params: dict) -> tuple:
    """The parameters a program records, sorted as `Program.record` sorts them: bodies shown by name; none
    for a cast, and `pvary`'s axes as meshsim's pvary records them."""
    if name == "pvary":
        axes = tuple(params["axes"])
        return (("axis_name", axes[0] if len(axes) == 1 else axes),)
    if name in RETYPES:
        return ()
    return tuple(sorted((k, "<jaxpr>" if isinstance(v, (core.Jaxpr, core.ClosedJaxpr)) else v)
                        for k, v in params.items()))


def aval_vma(aval: Any) -> frozenset:
    """The axes JAX types `aval` as varying along, and those it holds unreduced."""
    mat = getattr(aval, "mat", None)
    return frozenset(getattr(mat, "varying", ()) or ()) | frozenset(getattr(mat, "unreduced", ()) or ())
