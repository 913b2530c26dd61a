"""Independent answers for the collectives: the executable spec (numpy) and real JAX on CPU devices.

`spec` transcribes each JAX doc into numpy; `JaxOracle` runs the real `jax.lax` op in a worker process
(the only place jax is imported). Both read `collectives.REGISTRY` to know the collectives (spec functions
are registered per definition, the worker binds each by its definition's `JaxBinding`), but neither calls
the simulator's implementation: they are second opinions. `install_cpu_ragged_all_to_all` lets JAX users
(and the worker) run `jax.lax.ragged_all_to_all` on CPU, `install_cpu_lowerings` every collective XLA:CPU
lacks (ragged_all_to_all and pbroadcast); `size_compile_pool` sets how many threads
XLA:CPU compiles on in a process that has not started JAX yet; `serial_mlir_verification` has a lowering that
fails verification raise instead of hanging. `check` compares the simulator's answer to a call
with both, bit for bit (`compare` is the one comparator of answers), or, for a float reduction whose
algorithm adds in another order, within that order's rounding bound (`oracles._reordered`).

The bridge (`simulate_jax`, `compare_jax`, `cpu_mesh`, their errors, and the `Diagnostic` and
`BridgeWarning` it gives where JAX's own answer is wrong on some device) runs real JAX programs on the
simulated mesh and imports jax in the calling process, so it is loaded on first use: `import oracles`
alone never imports jax.
"""

import importlib
from typing import Any

from oracles import spec
from oracles._check import PATHS, Call, Comparison, Report, bit_for_bit, check, jax_unavailable, path_text
from oracles._compare import Difference, compare, describe
from oracles._compile_pool import size_compile_pool
from oracles._cpu_lowerings import install_cpu_lowerings
from oracles._cpu_ragged import install_cpu_ragged_all_to_all
from oracles._serial_verify import serial_mlir_verification
from oracles.jax_fixes import install_jax_fixes
from oracles.jax_oracle import JaxOracle, OracleError, OracleFailure, OracleResult, shared_oracle

__all__ = ["PATHS", "Call", "Comparison", "Difference", "JaxOracle", "OracleError", "OracleFailure", "OracleResult",
           "Report", "bit_for_bit", "check", "compare", "describe", "install_cpu_lowerings",
           "install_cpu_ragged_all_to_all", "install_jax_fixes", "jax_unavailable", "path_text",
           "serial_mlir_verification", "shared_oracle", "size_compile_pool", "spec"]

# The bridge's names, loaded (with jax) on first use, by the module that defines each.
_BRIDGE = {
    "simulate_jax": "oracles._bridge", "Simulated": "oracles._bridge", "cpu_mesh": "oracles._bridge_meshes",
    "DeviceCountError": "oracles._bridge_meshes", "compare_jax": "oracles._bridge_compare",
    "JaxComparison": "oracles._bridge_compare", "OutputAgreement": "oracles._bridge_compare",
    "LoweringMissingError": "oracles._bridge_compare", "BridgeError": "oracles._bridge_eval",
    "UnsupportedPrimitiveError": "oracles._bridge_eval", "TypeMismatchError": "oracles._bridge_device",
    "Diagnostic": "oracles._bridge_diagnostics", "BridgeWarning": "oracles._bridge_diagnostics",
    "JaxSlipError": "oracles._bridge_diagnostics",
}
__all__ += sorted(_BRIDGE)


def __getattr__(name: str) -> Any:
    if name in _BRIDGE:
        return getattr(importlib.import_module(_BRIDGE[name]), name)
    raise AttributeError(f"module 'oracles' has no attribute {name!r}")
