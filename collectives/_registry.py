"""`REGISTRY`: every collective's `Definition`, the one table the other layers read.

Registering a collective is one line in `_DEFINITIONS` below (its module defines the record beside its
protocol). Code reaches a definition by its public function (`REGISTRY.of(collectives.psum)`), a name
given by a user or recorded in a program (`definition('psum')`), or a JAX primitive
(`REGISTRY.by_primitive('psum_invariant')`), never through a table of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import sim
from collectives._all_gather import ALL_GATHER
from collectives._all_to_all import ALL_TO_ALL
from collectives._axis_index import AXIS_INDEX
from collectives._axis_size import AXIS_SIZE
from collectives._definition import Definition
from collectives._invariant import ALL_GATHER_INVARIANT, PCAST, PSCATTER, PVARY
from collectives._pbroadcast import PBROADCAST
from collectives._ppermute import PPERMUTE
from collectives._psend import PRECV, PSEND
from collectives._pshuffle import PSHUFFLE, PSWAPAXES
from collectives._psum_scatter import PSUM_SCATTER
from collectives._ragged import RAGGED_ALL_TO_ALL
from collectives._reduce import PMAX, PMEAN, PMIN, PSUM, PSUM_INVARIANT


class Registry(Mapping[str, Definition]):
    """Definitions by name, in registration order; also by public function and by JAX primitive.

    `ops` holds every public function by name, for transpose rules (`ops.psum_scatter(...)`).
    """

    def __init__(self, definitions: Iterable[Definition]) -> None:
        self._by_name: dict[str, Definition] = {}
        self._by_function: dict[Callable[..., Any], Definition] = {}
        self._by_primitive: dict[str, Definition] = {}
        for d in definitions:
            taken = [p for p in d.jax.primitives if p in self._by_primitive]
            if d.name in self._by_name or d.function in self._by_function or taken:
                raise sim.InvalidArgumentError(
                    f"{d.name}: its name, function or JAX primitives {taken} are registered twice"
                )
            self._by_name[d.name], self._by_function[d.function] = d, d
            self._by_primitive.update(dict.fromkeys(d.jax.primitives, d))
        self.ops = SimpleNamespace(**{name: d.function for name, d in self._by_name.items()})

    def __getitem__(self, name: str) -> Definition:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def of(self, function: Callable[..., Any]) -> Definition:
        """The definition of a public function, e.g. `REGISTRY.of(collectives.psum)`."""
        return self._by_function[function]

    def by_primitive(self, primitive: str) -> Definition:
        """The collective a JAX primitive is, e.g. 'psum_invariant' -> psum_invariant, 'pvary' -> pvary."""
        return self._by_primitive[primitive]


_DEFINITIONS = (
    ALL_GATHER, ALL_TO_ALL, RAGGED_ALL_TO_ALL, PSUM, PMEAN, PMAX, PMIN, PSUM_SCATTER, PPERMUTE, AXIS_INDEX,
    PSUM_INVARIANT, PVARY, PCAST, ALL_GATHER_INVARIANT, PSCATTER, PBROADCAST,
    PSHUFFLE, PSWAPAXES, PSEND, PRECV, AXIS_SIZE,
)
REGISTRY = Registry(_DEFINITIONS)
_ALIASES = {"psum2": "psum_invariant"}  # the design note's name, the same function (`collectives.psum2`)


def definition(name: Any) -> Definition:
    """The definition of the collective called `name` (a scenario's `op`, a recorded equation's op).

    Raises:
        InvalidArgumentError: no collective has that name.
    """
    found = REGISTRY.get(_ALIASES.get(name, name)) if isinstance(name, str) else None
    if found is None:
        raise sim.InvalidArgumentError(f"op={name!r} must name a collective: one of "
                                       + ", ".join(repr(n) for n in REGISTRY))
    return found
