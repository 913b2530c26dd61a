"""JAX's collectives as message protocols between simulated devices, with `jax.lax` names and signatures.

Each collective is defined once, by a `Definition` beside its protocol; `REGISTRY` holds them all and is
what the transposer, the oracles, the scenario files and the tests read (see CONTRIBUTING.md, "Adding a
collective").
Every collective takes `algorithm=` (its `Algorithm` records: `definition(op).algorithms`, their names the
choices of `definition(op).param('algorithm')`; 'auto' picks by the cost model `estimate_s`, whose alpha-beta
forms on a dedicated-link network are `closed_form`).
"""

from collectives._algorithm import Algorithm, Pattern
from collectives._all_gather import all_gather
from collectives._all_to_all import all_to_all
from collectives._axis_index import axis_index
from collectives._axis_size import axis_size
from collectives._batching import batch, vmap
from collectives._cost import closed_form, cost_s, estimate_s
from collectives._definition import Definition, NotLinear, Param, Vma
from collectives._facts import Drawing, Peers, Reduction, Sizes, Sweep
from collectives._invariant import all_gather_invariant, pcast, pscatter, pvary
from collectives._pbroadcast import pbroadcast
from collectives._ppermute import ppermute
from collectives._psend import Token, create_token, precv, psend
from collectives._pshuffle import pshuffle, pswapaxes
from collectives._psum_scatter import psum_scatter
from collectives._ragged import ragged_all_to_all
from collectives._reduce import pmax, pmean, pmin, psum, psum2, psum_invariant
from collectives._registry import REGISTRY, Registry, definition
from collectives._transpose import linear_transpose

__all__ = [
    "REGISTRY", "Algorithm", "Definition", "Drawing", "NotLinear", "Param", "Pattern", "Peers", "Reduction",
    "Registry", "Sizes", "Sweep", "Token", "Vma", "all_gather", "all_gather_invariant", "all_to_all", "axis_index",
    "axis_size", "batch", "closed_form", "cost_s", "create_token", "definition", "estimate_s", "linear_transpose",
    "pbroadcast", "pcast", "pmax", "pmean", "pmin", "ppermute", "precv", "pscatter", "psend", "pshuffle", "psum",
    "psum2", "psum_invariant", "psum_scatter", "pswapaxes", "pvary", "ragged_all_to_all", "vmap",
]
