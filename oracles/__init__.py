"""Independent answers for the collectives: the executable spec (numpy) and real JAX on CPU devices.

`spec` transcribes each JAX doc into numpy; `JaxOracle` runs the real `jax.lax` op in a worker process
(the only place jax is imported). Both read `collectives.REGISTRY` to know the collectives (spec functions
are registered per definition, the worker binds each by its definition's `JaxBinding`), but neither calls
the simulator's implementation: they are second opinions.
"""

from oracles import spec
from oracles.jax_oracle import JaxOracle, OracleError, OracleFailure, OracleResult, shared_oracle

__all__ = ["JaxOracle", "OracleError", "OracleFailure", "OracleResult", "shared_oracle", "spec"]
