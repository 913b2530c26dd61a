"""`install_cpu_ragged_all_to_all()`: JAX's own `jax.lax.ragged_all_to_all` made runnable on XLA:CPU.

XLA:CPU (jax 0.10.x) traces and lowers the op but cannot compile it ("UNIMPLEMENTED: HLO opcode
ragged-all-to-all is not supported by XLA:CPU ThunkEmitter"). Installing registers, through JAX's public
`jax.interpreters.mlir.register_lowering`, a CPU-only lowering of the same primitive that XLA:CPU runs
(`oracles._cpu_ragged_rule`): a small exchange in one tiled all_to_all, a larger one in rounds of a fixed
chunk, one tiled all_to_all per round.
The primitive, its abstract evaluation and its JVP, transpose and batching rules stay JAX's own, so
`jax.grad`, `jax.vjp` and `jax.vmap` through it run JAX's rules; GPU and TPU lowerings are untouched.

Caching: JAX caches what it has lowered and compiled. A function jitted and run (or lowered) before the
install keeps the lowering it got, the failing one; call the install before the first call, or
`jax.clear_caches()` after it.

Importing this module does not import jax; installing does, and only registers a lowering, so it may run
before or after jax is imported and before the backend starts (`XLA_FLAGS` still takes effect).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_installed = False
_lock = threading.Lock()


def install_cpu_ragged_all_to_all() -> bool:
    """Register a CPU lowering for `jax.lax.ragged_all_to_all`, so it runs on CPU devices under `jit` and
    `shard_map` (check_vma on or off, with `axis_index_groups`, operands of any rank and dtype).

    Idempotent: the first call registers and returns True, later calls do nothing and return False.

    >>> import oracles; oracles.install_cpu_ragged_all_to_all()        # doctest: +SKIP
    True

    See docs/reference/cpu-lowerings.md, "ragged_all_to_all on CPU for JAX users", for an example, the cost
    and the limits: the lowering sends a small exchange in one all_to_all and a larger one in rounds of a
    fixed chunk per slot, and how it treats inputs the docs leave undefined is stated in
    `oracles._cpu_ragged_rule`.
    """
    global _installed
    with _lock:
        if _installed:
            return False
        from jax.interpreters import mlir

        from oracles import _cpu_ragged_rule as rule

        mlir.register_lowering(rule.PRIMITIVE, rule.lowering(_default_rule()), platform="cpu")
        _installed = True
        return True


def _default_rule() -> Callable[..., Any] | None:
    """JAX's own (platform-independent) lowering of the op, kept for the inputs XLA's verifier rejects."""
    from jax._src.interpreters import mlir as internal

    from oracles import _cpu_ragged_rule as rule

    entry = internal._lowerings.get(rule.PRIMITIVE)
    return None if entry is None else entry.rule
