"""JAX's collectives as message protocols between simulated devices, with `jax.lax` names and signatures."""

from collectives._all_gather import all_gather
from collectives._all_to_all import all_to_all
from collectives._ragged import ragged_all_to_all
from collectives._transpose import linear_transpose

__all__ = ["all_gather", "all_to_all", "linear_transpose", "ragged_all_to_all"]
