"""`serial_mlir_verification()`: a lowering that fails verification raises, instead of hanging for good.

JAX 0.10.2 gives every MLIR context it makes one shared thread pool (`jax._src.interpreters.mlir.make_ir_context`),
so verifying a lowered module checks its functions on the pool's threads while the calling thread waits,
holding the GIL. When a check fails on a worker thread, the bindings' diagnostic handler on that thread waits
for the GIL: neither thread goes on, and `jax.jit(f).lower(...)` hangs instead of raising "Cannot lower jaxpr
with verifier errors" (the MLIR Python bindings' fault: llvm/llvm-project#215781, fix #215848 still open). Which
thread meets the failing operation varies from run to run, so one program may raise in one process and hang in
the next: FINDINGS.md entry 24's fault, met with a ragged_all_to_all under `jax.vjp`, hung in 4 of 6 processes.

`serial_mlir_verification()` turns multithreading off in every context JAX makes from then on, so each module is
verified on the calling thread: the same checks, the same error, raised. Nothing else changes: the module, the
passes' output and the compiled code are those of the threaded context. meshsim installs it wherever it lowers
programs it generates (the JAX worker, the rules campaign and its workers); a user lowering programs that may
fail verification can call it too. Importing this module does not import jax.
"""

from __future__ import annotations

_installed: list[bool] = []


def serial_mlir_verification() -> bool:
    """Have every MLIR context JAX makes from now on verify on the calling thread, so that a lowering whose module
    fails verification raises JAX's "Cannot lower jaxpr with verifier errors" in every process: with JAX 0.10.2's
    threaded contexts, a check failing on a worker thread deadlocks the MLIR Python bindings and the lowering
    hangs for good in some processes (llvm/llvm-project#215781). The lowered module and compiled code are
    unchanged. True the first time, False when it was installed already.

    >>> import oracles; oracles.serial_mlir_verification()      # doctest: +SKIP
    True
    """
    if _installed:
        return False
    from jax._src.interpreters import mlir

    threaded = mlir.make_ir_context

    def make_ir_context():  # JAX's own contexts, verified on the calling thread
        context = threaded()
        context.enable_multithreading(False)
        return context

    make_ir_context.__doc__ = threaded.__doc__
    mlir.make_ir_context = make_ir_context
    _installed.append(True)
    return True
