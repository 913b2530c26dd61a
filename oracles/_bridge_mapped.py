"""Each shard_map equation's simulated program, made once and run on every call that reaches it; and what
else the equation alone fixes (`equation_facts`), found once.

What a `shard_map` equation runs on the simulated mesh depends only on the equation (its body, specs and
mesh) and on how the bridge runs it (the network, `strict`, `compiled` and the options given to
`sim.shard_map`): a warm call of a jitted program reaches the same equation objects, so it takes the same
`sim.Mesh` and `sim.ShardMapped` again, as `jax.jit` keeps its executable. The mapped function keeps, per
input signature, its outputs' global types, so from the second call on the devices' output blocks are
written straight into the global outputs (`sim.ShardMapped`), as on any repeated call of a mapped function.
Each run starts with an empty `Watch`.

>>> # simulate_jax(f, x) twice: the second call's shard_map equation finds its ShardMapped here
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jax.extend import core

import sim
from oracles._bridge_device import Watch
from oracles._bridge_diagnostics import label, source_line
from oracles._bridge_segments import is_key
from oracles._bridge_specs import Entry

# How many shard_map equations keep their mapped programs (the oldest are dropped past this).
_KEPT = 256


@dataclass(eq=False)
class Mapped:
    """A shard_map equation's program on the simulated mesh and the `Watch` its devices report slips to;
    `busy` while a run of it is under way (a run inside that run makes its own)."""

    function: sim.ShardMapped
    watch: Watch
    keep: tuple  # the objects the cache key names by identity, kept alive with it
    busy: bool = False


_mapped: OrderedDict[tuple, Mapped] = OrderedDict()


def mapped(eqn: Any, network: sim.Network | None, strict: bool, compiled: bool, options: Mapping[str, Any],
           make: Callable[[Watch], sim.ShardMapped], where: str) -> Mapped:
    """The `Mapped` of `eqn` run this way, its watch emptied and marked busy until `run` ends; made by
    `make(watch)` on the first call (and on a call made while another run of it is under way, or with options
    that cannot be a key)."""
    try:
        key: tuple | None = (id(eqn), id(network), strict, compiled, tuple(sorted(options.items())))
        hash(key)
    except TypeError:
        key = None
    found = _mapped.get(key) if key is not None else None
    if found is not None and found.keep[0] is eqn and found.keep[1] is network and not found.busy:
        _mapped.move_to_end(key)
        found.watch.reset()
        found.busy = True
        return found
    watch = Watch(strict, where)
    made = Mapped(make(watch), watch, (eqn, network), busy=True)
    if key is not None and (found is None or not found.busy):
        _mapped[key] = made
        while len(_mapped) > _KEPT:
            _mapped.popitem(last=False)
    return made


def run(kept: Mapped, *args: Any) -> sim.Run:
    """One run of the kept program on `args`; the mapped function lets go of the run (the caller holds it)."""
    try:
        return kept.function.run(*args)
    finally:
        kept.function.last_run = None
        kept.busy = False


@dataclass(frozen=True, eq=False)
class Facts:
    """What running a shard_map equation takes that the equation alone fixes: its mesh axes and the manual
    ones among them (`axis_names=`), its source line and label, which operands and results hold PRNG keys
    (the simulator takes a key array as its key data), and each output's out_specs entry."""

    axes: dict[str, int]
    manual: frozenset[str]
    line: str
    label: str
    in_keys: tuple[bool, ...]
    out_keys: tuple[bool, ...]
    out_entries: tuple[Entry, ...]


_facts: dict[int, tuple[core.JaxprEqn, Facts]] = {}


def equation_facts(eqn: core.JaxprEqn) -> Facts:
    """The `Facts` of the shard_map equation `eqn`, found once per equation."""
    found = _facts.get(id(eqn))
    if found is not None and found[0] is eqn:
        return found[1]
    p, line = eqn.params, source_line(eqn)
    axes = dict(zip(p["mesh"].axis_names, p["mesh"].axis_sizes))
    manual = p.get("newly_manual_axes", p.get("manual_axes", frozenset(axes)))
    facts = Facts(axes, frozenset(manual), line, label(line), tuple(is_key(v.aval) for v in eqn.invars),
                  tuple(is_key(v.aval) for v in eqn.outvars), tuple(Entry.of(s) for s in p["out_specs"]))
    if len(_facts) >= _KEPT * 4:
        _facts.clear()
    _facts[id(eqn)] = (eqn, facts)
    return facts
