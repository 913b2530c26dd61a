"""The `jax.lax` primitives the vma kind of the rules campaign types, and the operands each takes.

A vma case (`VmaCase`) calls one of `VMA_PRIMITIVES` inside a `jax.shard_map` whose operands each vary
along a chosen subset of the mesh axes; `oracles._rules_vma` builds and judges the program. This module
does not import jax, so the campaign's plan (`scenarios.campaign.KINDS`) can name the primitives.

Shapes are written over two lengths drawn per case, `n` (2 to 4) and `m` (1 to n): `("n",)` is a vector
of n, `()` a scalar. Each operand's values come from its `kind`: "data" (the case's dtype, 0 to 8),
"index" (int32, 0 to `high` - 1, `high` a length name), "bool", or "count" (int32, 0 to 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Operand:
    """One operand of a primitive's call: its shape over the case's lengths and its kind of values."""

    shape: tuple[str, ...]
    kind: str = "data"
    high: str = "n"

    def dims(self, lengths: dict[str, int]) -> tuple[int, ...]:
        """The block shape on a device, e.g. `("n", "m")` with n=3, m=2 -> (3, 2)."""
        return tuple(lengths[s] for s in self.shape)


N, M, S = Operand(("n",)), Operand(("m",)), Operand(())
INDEX, START = Operand(("m",), "index"), Operand((), "index")
PRED, FLAG, COUNT = Operand(("n",), "bool"), Operand((), "bool"), Operand((), "count")

# name -> operands, in call order (the bodies of `oracles._rules_vma.BODIES` take them so)
VMA_PRIMITIVES: dict[str, tuple[Operand, ...]] = {
    "sort": (N, N, N),
    "sort_key_val": (N, N),
    "argsort": (N,),
    "top_k": (N,),
    "scatter": (N, INDEX, M),
    "scatter_add": (N, INDEX, M),
    "gather": (N, INDEX),
    "dynamic_slice": (N, START),
    "dynamic_update_slice": (N, M, START),
    "select_n": (PRED, N, N),
    "where": (PRED, N, N),
    "cond": (FLAG, N, N),
    "while_loop": (COUNT, N),
    "cumsum": (N,),
    "cumprod": (N,),
    "cummax": (N,),
    "associative_scan": (N, N),
    "concatenate": (N, M),
    "pad": (N, S),
    "dot_general": (Operand(("n", "m")), Operand(("m", "n"))),
    "custom_jvp": (N, N),
    "custom_vjp": (N, N),
    "pure_callback": (N, N),
}


@dataclass(frozen=True)
class VmaCase:
    """One call of a primitive in a typed shard_map: operand k varies along `varying[k]` (mesh order).

    `args[k]` is operand k's global array: one block per coordinate along its axes, stacked on a leading
    axis (size 1 for an invariant operand), so device d's block is row `row(d, varying[k])`. `variant`
    picks among a primitive's forms (num_keys, reverse, cond or switch, ...).
    """

    primitive: str
    mesh_shape: dict[str, int]
    varying: tuple[tuple[str, ...], ...]
    args: tuple[np.ndarray, ...]
    variant: int = 0
    lengths: dict[str, int] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return int(np.prod(list(self.mesh_shape.values())))

    def coords(self, d: int) -> dict[str, int]:
        """Device d's coordinate along each mesh axis (devices row-major over the axes)."""
        return {a: int(i) for a, i in zip(self.mesh_shape, np.unravel_index(d, tuple(self.mesh_shape.values())))}

    def row(self, d: int, axes: tuple[str, ...]) -> int:
        """The row of device d in an array stacked over `axes` (row-major), e.g. axes () -> 0."""
        at = self.coords(d)
        return int(np.ravel_multi_index([at[a] for a in axes], [self.mesh_shape[a] for a in axes])) if axes else 0

    def blocks(self, d: int) -> list[np.ndarray]:
        """Device d's operands."""
        return [g[self.row(d, axes)] for g, axes in zip(self.args, self.varying)]

    def __repr__(self) -> str:
        lines = [f"VmaCase({self.primitive} variant {self.variant} on mesh {self.mesh_shape}, lengths {self.lengths})"]
        for k, (g, axes) in enumerate(zip(self.args, self.varying)):
            where = f"varies along {axes}" if axes else "invariant"
            lines.append(f"  operand {k}: {g.dtype}{list(g.shape[1:])} {where}: {_rows(g)}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def _rows(g: np.ndarray) -> str:
    return "; ".join(np.array2string(r, separator=",").replace("\n", "") for r in g)


__all__ = ["VMA_PRIMITIVES", "Operand", "VmaCase"]
