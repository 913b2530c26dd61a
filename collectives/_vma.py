"""The collectives' device-variance rules (the design note's table) and their place in the program record.

Every collective names mesh axes. Under `check_vma=True`, as in JAX, an operand that is invariant along
those axes is first promoted by a recorded `pvary` (no data moves), except for the two collectives
that take invariant operands (`pvary`, `pscatter`), which reject varying ones. The result then:

| rule       | collectives                                                   | result varies along   |
|------------|---------------------------------------------------------------|-----------------------|
| reduce     | psum_invariant (= psum), pmean, pmax, pmin, all_gather_invariant        | operand's axes - axes |
| keep       | all_gather, all_to_all, psum_scatter, ppermute, ragged         | operand's axes + axes |
| introduce  | pvary, pscatter (operand must be invariant along axes)   | operand's axes + axes |
| index      | axis_index                                                    | axes                  |
| invariant  | psend (its token), precv, as JAX types them                    | nothing               |

Each collective's rule is the `vma` of its `Definition`. A reduction over `axis_index_groups` smaller than
the axis still differs between groups, so its result keeps the axes (one group, the whole axis, does not).
The summing collectives (psum, pmean, psum_invariant, psum_scatter: `Definition.sums`) need an operand that
varies along all of their axes or along none, as JAX requires: promoting only some of them would change
the sum.
With `check_vma=False` nothing is promoted, checked or typed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sim
from collectives._call_budget import check_call
from collectives._definition import Definition, Vma

REDUCE, KEEP, INTRODUCE, INDEX, INVARIANT = Vma.REDUCE, Vma.KEEP, Vma.INTRODUCE, Vma.INDEX, Vma.INVARIANT


def typed(definition: Definition, axis_name: Any, operands: list, compute: Callable[[], Any], params: dict | tuple,
          grouped: bool = False, called: str | None = None, context: sim.DeviceContext | None = None
          ) -> sim.Varying:
    """Run `compute` (the collective on plain arrays) and give its result the type `definition.vma` prescribes.

    The collective is recorded in the device's program as `definition.name[params]` applied to `operands`;
    errors name it as the caller `called` it (psum is recorded as psum_invariant). `context` is the running
    device's (`sim.current()`, found here when not given).
    """
    if context is None:
        context = sim.current()
    recorded, op, rule = definition.name, called or definition.name, definition.vma
    check_call(context, definition, operands, axis_name, params, op)  # the call's memory, before it allocates
    if not context.check_vma:
        return sim.wrap(compute(), _NOTHING, recorded, params, operands, context)
    if rule == INVARIANT:  # JAX's abstract evaluation gives the result no varying axes, whatever it reads
        return sim.wrap(compute(), _NOTHING, recorded, params, operands, context)
    axes = _axes(context, axis_name, op)
    if rule == KEEP and len(operands) == 1 and type(operands[0]) is sim.Varying and not definition.sums:
        x = operands[0]  # the common call: one typed operand, its axes kept (the general rule below, in short)
        if not x.vma >= axes:
            x = sim.promote(x, x.vma | axes)
        return sim.wrap(compute(), x.vma, recorded, params, [x], context)
    if rule == INTRODUCE:
        for x in operands:
            if sim.vma_of(x) & axes:
                raise sim.InvalidTypeError(
                    f"device {context.device}: {op}: the operand already varies along "
                    f"{sorted(sim.vma_of(x) & axes)}; {op} takes a value invariant along {sorted(axes)}"
                )
    elif rule != INDEX:
        for x in operands:
            varying = sim.vma_of(x) & axes
            if definition.sums and varying and varying != axes:
                raise sim.InvalidTypeError(
                    f"device {context.device}: {op}: the operand varies along {sorted(varying)} but not along "
                    f"{sorted(axes - varying)}; over axis_name={axis_name!r} it must vary along all of them or "
                    f"none (pvary it first)"
                )
        operands = [sim.promote(x, sim.vma_of(x) | axes) for x in operands]
    vma = frozenset().union(*(sim.vma_of(x) for x in operands)) | axes
    if rule == REDUCE and not grouped:
        vma -= axes
    return sim.wrap(compute(), vma, recorded, params, operands, context)


def _axes(context: sim.DeviceContext, axis_name: Any, op: str) -> frozenset:
    """The mesh axes `axis_name` names, as a frozenset (found once per run for a single name)."""
    key = ("vma axes", axis_name) if type(axis_name) is str else None
    found = context.shared.get(key) if key is not None else None
    if found is not None:
        return found
    try:
        axes = frozenset(context.mesh.axis_names_of(axis_name))
    except sim.MeshError as error:
        raise type(error)(f"device {context.device}: {op}: {error}") from None
    if key is not None:
        context.shared[key] = axes
    return axes


_NOTHING: frozenset = frozenset()
