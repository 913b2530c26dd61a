"""Programs on the mesh: `shard_map` and its runs, typed device-local values (`Varying`), timed copies and
relayouts, `jit` over placed arrays, pytrees, and arrival-order exploration."""

from sim.program._add import add_step
from sim.program._compile import Compiled, Jitted, Lowered, ShapeDtypeStruct, jit
from sim.program._copy import copy_step, with_layout_constraint
from sim.program._explore import OrderDifference, OrderReport, RowsDiffer, explore
from sim.program._labelled import labelled
from sim.program._shard_map import Run, ShardMapped, shard_map
from sim.program._tree import leaves, tree_map
from sim.program._varying import Varying, apply, as_array, promote, vma_of, wrap

__all__ = [
    "Compiled", "Jitted", "Lowered", "OrderDifference", "OrderReport", "RowsDiffer", "Run", "ShapeDtypeStruct",
    "ShardMapped", "Varying", "add_step", "apply", "as_array", "copy_step", "explore", "jit", "labelled", "leaves",
    "promote", "shard_map", "tree_map", "vma_of", "with_layout_constraint", "wrap",
]
