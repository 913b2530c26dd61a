"""`install_cpu_lowerings()`: every `jax.lax` collective XLA:CPU cannot run in jax 0.10.2, made runnable.

Running each collective of jax 0.10.2 under `jax.jit(jax.shard_map(...))` on CPU devices, these fail:

- `ragged_all_to_all`: lowers, but XLA:CPU cannot compile it ("UNIMPLEMENTED: HLO opcode
  `ragged-all-to-all` is not supported by XLA:CPU ThunkEmitter");
- `pbroadcast`: JAX registers a GPU lowering only ("MLIR translation rule for primitive 'pbroadcast' not
  found for platform cpu"), as for its async form `pbroadcast_start` (not exported by `jax.lax`);
- `psend` and `precv`: their default lowerings raise ("psend is currently only implemented on GPU").

Installing registers, through JAX's public `jax.interpreters.mlir.register_lowering(..., platform="cpu")`,
a CPU lowering for the first two (`oracles._cpu_ragged_rule`, `oracles._cpu_pbroadcast_rule`); the
primitives, their abstract evaluation and their JVP, transpose and batching rules stay JAX's own. psend and
precv get none (see `UNLOWERABLE`): XLA:CPU has no Send or Recv ("UNIMPLEMENTED: HLO opcode `send` is not
supported by XLA:CPU ThunkEmitter"), and psend's result is a token, which carries no data to the precv
that takes it, so a lowering of the pair out of collectives XLA:CPU runs would have to pass the bytes
outside the program.

Caching: ragged_all_to_all lowers and then fails to compile, so a function run before the install keeps
its failing lowering until `jax.clear_caches()`; pbroadcast fails while lowering, so nothing is cached and
the same function runs once installed. Install before the first call to be safe. Importing this module does not
import jax; installing does, and only registers lowerings, so `XLA_FLAGS` set afterwards still counts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from oracles._cpu_ragged import install_cpu_ragged_all_to_all

UNLOWERABLE = {
    "psend": "XLA:CPU has no Send (\"UNIMPLEMENTED: HLO opcode `send` is not supported by XLA:CPU "
             "ThunkEmitter\") and psend's result is a token, which carries no data to the precv that takes it",
    "precv": "XLA:CPU has no Recv (\"UNIMPLEMENTED: HLO opcode `recv` is not supported by XLA:CPU "
             "ThunkEmitter\") and the token precv takes carries no data from the psend that made it",
}

_installed: set[str] = set()
_lock = threading.Lock()


def _install_pbroadcast() -> bool:
    from jax.interpreters import mlir

    from oracles import _cpu_pbroadcast_rule as rule

    mlir.register_lowering(rule.PRIMITIVE, rule.lowering(), platform="cpu")
    return True


_INSTALLERS: dict[str, Callable[[], bool]] = {
    "pbroadcast": _install_pbroadcast,
    "ragged_all_to_all": install_cpu_ragged_all_to_all,
}
KNOWN = tuple(sorted(_INSTALLERS))


def install_cpu_lowerings(names: Iterable[str] | str | None = None) -> tuple[str, ...]:
    """Register a CPU lowering for every `jax.lax` collective XLA:CPU cannot run (or for `names` of them),
    so each runs on CPU devices under `jit` and `shard_map`, check_vma on or off.

    Idempotent: returns the names it newly installed, in `KNOWN` order; a second call returns `()`, and so
    does `names=("ragged_all_to_all",)` after `install_cpu_ragged_all_to_all()`.

    >>> import oracles; oracles.install_cpu_lowerings()                 # doctest: +SKIP
    ('pbroadcast', 'ragged_all_to_all')

    Raises:
        ValueError: a name is not one of `KNOWN` (psend and precv are refused with the reason they have no
            CPU lowering).
    """
    chosen = _chosen(names)
    with _lock:
        newly = []
        for name in chosen:
            if name not in _installed and _INSTALLERS[name]():
                newly.append(name)
            _installed.add(name)
        return tuple(newly)


def _chosen(names: Iterable[str] | str | None) -> tuple[str, ...]:
    """The known names asked for, in `KNOWN` order; the first unknown one is an error naming them all."""
    if names is None:
        return KNOWN
    asked = (names,) if isinstance(names, str) else tuple(names)
    for name in asked:
        if name in UNLOWERABLE:
            raise ValueError(f"install_cpu_lowerings: name={name!r} has no CPU lowering: {UNLOWERABLE[name]}; "
                             f"the known names are {', '.join(KNOWN)}")
        if name not in _INSTALLERS:
            raise ValueError(f"install_cpu_lowerings: name={name!r} must be one of {', '.join(KNOWN)} "
                             f"(collectives XLA:CPU cannot run in jax 0.10.2)")
    return tuple(name for name in KNOWN if name in asked)
