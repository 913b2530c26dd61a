"""`Definition`: one collective's record, written beside its protocol, that every other layer reads.

A collective is defined once, in its own module: its public function, the arrays it takes, its other
parameters (defaults, and the rule a scenario file's value must follow), its device-variance rule, its
transpose rule, its batching rule, how the JAX worker binds the real op, the strategy the generated tests
draw calls from, its algorithms (`Algorithm` records), what it reduces, how its bytes scale, how a sweep
times it, how a drawing lays it out, and what `meshsim explain` says about it. This package imports neither
jax nor hypothesis: the JAX binding and the strategy are functions that are handed those modules.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sim
from collectives._algorithm import Algorithm
from collectives._facts import Drawing, Peers, Reduction, Sizes, Sweep


class Vma(enum.Enum):
    """How a collective's result varies across devices: its row of the design note's table (see `_vma.py`)."""

    REDUCE = "reduce"
    KEEP = "keep"
    INTRODUCE = "introduce"
    INDEX = "index"
    INVARIANT = "invariant"


class _Required:
    """The default of a parameter that has none."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Param:
    """A parameter besides the arrays: its default (REQUIRED if none) and the rule a scenario value follows.

    `accepts` checks a TOML value and `rule` words it for errors (`{name}={value!r} must be {rule}`);
    `from_toml` turns an accepted value into what the function takes; `jax` says whether `jax.lax` takes
    the parameter too (`algorithm` is the simulator's own); `choices` lists the values of a parameter
    that takes one of a few.
    """

    name: str
    accepts: Callable[[Any], bool]
    rule: str
    default: Any = REQUIRED
    from_toml: Callable[[Any], Any] = _same
    jax: bool = True
    choices: tuple[Any, ...] = ()

    @property
    def required(self) -> bool:
        """Whether a call must give this parameter."""
        return self.default is REQUIRED


@dataclass(frozen=True)
class JaxBinding:
    """How the JAX worker runs a collective, and what JAX calls it.

    `bind(jax, params)` returns the per-device function of the collective's arrays. `jax` is the worker's
    namespace of JAX modules (`jax.lax`, `jax.parallel` for `jax._src.lax.parallel`, `jax.linear_transpose`),
    handed in so this package never imports jax; `params` are the keyword parameters JAX takes.
    `name` is JAX's name for the op (the design note's psum2 is JAX's `psum_invariant`, its pbroadcast is
    `pvary`); `primitives` the jaxpr primitives that are this collective (none for pmean, which JAX builds
    as psum / n, nor for pscatter, a slice at axis_index). `grouped_unchecked`: JAX runs the op with
    axis_index_groups only under `check_vma=False` (it raises NotImplementedError otherwise).
    `on_cpu` says how XLA:CPU runs it: 'real' (the op itself), 'cpu lowering' (JAX's own primitive through
    the lowering `oracles.install_cpu_lowerings()` registers) or 'equivalent' (XLA:CPU cannot run the op and
    no lowering can be registered: `bind` runs the equivalent JAX's docs give); `cpu_note` says how, for the
    oracle's reports.
    """

    name: str
    primitives: tuple[str, ...]
    bind: Callable[[Any, dict[str, Any]], Callable[..., Any]]
    grouped_unchecked: bool = False
    on_cpu: str = "real"
    cpu_note: str = ""

    def __post_init__(self) -> None:
        if self.on_cpu not in ("real", "cpu lowering", "equivalent") or (self.on_cpu == "real") != (not self.cpu_note):
            raise ValueError(f"JaxBinding {self.name!r}: on_cpu={self.on_cpu!r} must be 'real', 'cpu lowering' or "
                             f"'equivalent', with a cpu_note exactly when it is not 'real'")


@dataclass(frozen=True)
class NotLinear:
    """The transpose rule of a collective that is not linear in its operand: `reason` says why."""

    reason: str


@dataclass(frozen=True, eq=False)
class Transposition:
    """What a transpose rule gets for one recorded equation.

    `params` are the keyword arguments the equation was recorded with, `ct` the cotangent of its output,
    `primal` the values of its non-linear inputs (None for the linear ones), `linear` which inputs are
    linear, `ops` every registered collective's public function by name (`ops.psum_scatter(...)`).
    A rule returns one cotangent (or None) per input.
    """

    params: dict[str, Any]
    ct: Any
    primal: list[Any]
    linear: list[bool]
    equation: sim.Equation
    ops: Any

    def refuse(self) -> None:
        """Raise: the program is not linear in the transposed arguments at this equation."""
        raise sim.InvalidArgumentError(
            f"linear_transpose: `{self.equation}` is not linear in the transposed arguments")


TransposeRule = Callable[[Transposition], list]
BatchRule = Callable[["Definition", list, list, dict], tuple[Any, Any]]
Teach = Callable[[dict[str, Any], int], list[str]]

# Fields every definition must give, with the type each must have (None allowed where the tuple says so):
# a definition that leaves one out is refused by name when its module is imported.
_REQUIRED_FACTS: dict[str, tuple[type, ...] | None] = {  # None: any callable
    "batch": None, "algorithms": (tuple,), "reduction": (Reduction, type(None)), "sizes": (Sizes,),
    "sweep": (Sweep, type(None)), "drawing": (Drawing,),
}


@dataclass(frozen=True, eq=False)
class Definition:
    """One collective: everything the simulator, the transposer, the oracles, the scenario files and the
    generated tests need to know about it. Definitions compare and hash by identity, so tables may be keyed
    by them.

    Attributes:
        name: the public name (`collectives.<name>`), which a recorded equation and a scenario's `op` use.
        function: the public function.
        arrays: the positional array arguments, in call order.
        params: every other parameter (positional or keyword), in signature order.
        vma: the device-variance rule.
        transpose: the transpose rule, or a `NotLinear` marker.
        jax: how the JAX worker binds the real op.
        strategy: `strategy(st, axes, **options)`, given hypothesis's `strategies` module and the drawn
            `Axes`, returns a strategy of valid `Sample`s (JAX accepts them too). Every strategy takes
            `transposable=True` (calls on which the transpose rule is defined) and ignores options it
            does not know.
        index_arrays: the arrays holding offsets or sizes (integers; int32 in scenario files).
        sums: the collective adds its operands: an operand must vary along all of its axes or none.
        keeps: the array whose rows the result keeps where no message writes (ragged's `output`).
        from_recorded: the keyword arguments that call `function` again from an equation's recorded
            params (sim's automatic pvary records `axes`, not `axis_name`).
        alone: for a one-sided collective, what a call alone runs as in a program (a scenario's
            `[collective]`, the generated tests, the campaign): `alone(*arrays, **params)`, the call with its
            partner (psend with the precv that takes its messages); None: `function` itself (see `call`).
        partner: the collective a one-sided one runs beside (precv's is 'psend'): its generated calls are
            its partner's, which run both.
        batch: the batching rule, `batch(definition, arrays, dims, params) -> (result, batch axis or None)`
            (JAX's batcher for the primitive; see `collectives._batching`).
        algorithms: its `Algorithm` records, 'direct' first (the default) and 'auto' among them, in the
            order 'auto' considers them; the `algorithm` parameter (appended to `params`) takes their names.
        reduction: what it reduces element by element (`Reduction`), or None for a collective that moves
            values unchanged.
        sizes: how its result and messages scale with the group (`Sizes`), for memory budgets.
        sweep: how `meshsim sweep` times it (`Sweep`), or None for a collective sweeps do not offer.
        drawing: how `meshsim draw` lays out its arrays (`Drawing`).
        teach: `teach(params, n)`, the paragraphs `meshsim explain` prints about its protocol for a call with
            `params` on groups of n; None for the generic text (the algorithm's own paragraph), which is
            true for every collective.

    Every field from `batch` on must be given (keywords; `reduction` and `sweep` may be None): a definition
    that leaves one out is refused with its name and the field's.
    """

    name: str
    function: Callable[..., Any]
    arrays: tuple[str, ...]
    params: tuple[Param, ...]
    vma: Vma
    transpose: TransposeRule | NotLinear
    jax: JaxBinding
    strategy: Callable[..., Any]
    index_arrays: tuple[str, ...] = ()
    sums: bool = False
    keeps: str | None = None
    from_recorded: Callable[[dict[str, Any]], dict[str, Any]] = dict
    alone: Callable[..., Any] | None = None
    partner: str | None = None
    batch: BatchRule = REQUIRED
    algorithms: tuple[Algorithm, ...] = REQUIRED
    reduction: Reduction | None = REQUIRED
    sizes: Sizes = REQUIRED
    sweep: Sweep | None = REQUIRED
    drawing: Drawing = REQUIRED
    teach: Teach | None = None

    def __post_init__(self) -> None:
        self._check_facts()
        appended = _algorithm_param(self.algorithms)
        given = [p for p in self.params if p.name == "algorithm"]
        if given and (given[0].choices != appended.choices or self.params[-1] is not given[0]):
            raise sim.InvalidArgumentError(f"{self.name}: params must leave out 'algorithm', which the definition "
                                           f"appends from algorithms={self.algorithms}")
        object.__setattr__(self, "params", (*self.params[:len(self.params) - len(given)], appended))
        names = [p.name for p in self.params]
        if len(set(names)) != len(names) or set(names) & set(self.arrays):
            raise sim.InvalidArgumentError(
                f"{self.name}: params={names} and arrays={self.arrays} must not repeat a name"
            )
        if not set(self.index_arrays) <= set(self.arrays) or self.keeps not in (None, *self.arrays):
            raise sim.InvalidArgumentError(
                f"{self.name}: index_arrays={self.index_arrays} and keeps={self.keeps!r} must name "
                f"arrays among {self.arrays}"
            )

    def _check_facts(self) -> None:
        """Refuse a definition that leaves out a required fact, or gives one of the wrong type, by name."""
        for field, types in _REQUIRED_FACTS.items():
            value = getattr(self, field)
            if value is REQUIRED:
                raise sim.InvalidArgumentError(f"Definition {self.name!r} must give {field}=...: every collective "
                                               f"states it (see CONTRIBUTING.md, 'Adding a collective')")
            if not (callable(value) if types is None else isinstance(value, types)):
                wanted = "callable" if types is None else " or ".join(t.__name__ for t in types)
                raise sim.InvalidArgumentError(f"Definition {self.name!r}: {field}={value!r} must be {wanted}")
        algorithms = self.algorithms
        if not algorithms or not all(isinstance(a, Algorithm) for a in algorithms) \
                or algorithms[0].name != "direct" or sum(a.auto for a in algorithms) != 1 \
                or len({a.name for a in algorithms}) != len(algorithms):
            raise sim.InvalidArgumentError(
                f"Definition {self.name!r}: algorithms={algorithms} must be Algorithm records with distinct names, "
                f"'direct' first and one 'auto'")

    def __repr__(self) -> str:
        return f"Definition({self.name!r})"

    def call(self, *arrays: Any, **params: Any) -> Any:
        """The collective called alone in a device's program on `arrays`: `function`, or for a one-sided
        collective the call with its partner (`alone`), whose result is what arrives. The result is arrays:
        a Python scalar (axis_size's int, a constant) is the 0-d array JAX's shard_map returns for it
        (`sim.as_array`: an int32)."""
        return sim.tree_map(sim.as_array, (self.alone or self.function)(*arrays, **params))

    def algorithm(self, name: Any) -> Algorithm:
        """The record of the algorithm called `name`; InvalidArgumentError if the collective has none."""
        for a in self.algorithms:
            if a.name == name:
                return a
        raise sim.InvalidArgumentError(f"{self.name}: algorithm={name!r} must be one of "
                                       f"{tuple(a.name for a in self.algorithms)}")

    def most_messages(self, algorithm: Algorithm, devices: int, shape: tuple[int, ...]) -> int:
        """At most how many messages a call with `algorithm` sends on `devices` devices, in groups laid out as
        the grid `shape`: each member's own count where the record states one (`Algorithm.messages`, plus one
        to itself; an algorithm that works node by node as on one node, where it sends the most), else the
        per-peer bound (`Sizes.messages`); 'auto' as its costliest choice.

        >>> from collectives import definition
        >>> psum = definition("psum")
        >>> psum.most_messages(psum.algorithm("recursive_doubling"), 1024, (1024,))  # 10 steps, 1 to itself
        11264
        >>> psum.most_messages(psum.algorithm("direct"), 1024, (1024,))
        1048576
        """
        n = math.prod(shape)
        if algorithm.auto:
            return max(self.most_messages(a, devices, shape) for a in self.algorithms if not a.auto and a.fits(n))
        ran = algorithm.over(shape)
        if ran.messages is not None and self.sizes.peers is Peers.GROUP:  # node by node: at most as one node
            return devices * (ran.messages((1, n) if ran.nodes else shape) + 1)
        return self.sizes.messages(devices, n, ran.messages_per_peer)

    def explain(self, params: dict[str, Any], group_size: int) -> list[str]:
        """What `meshsim explain` says about the protocol of a call with `params` on groups of `group_size`:
        the collective's own text, or else the paragraph of the algorithm the call asks for."""
        if self.teach is not None:
            return self.teach(params, group_size)
        return [f"Algorithm {self.algorithm(params.get('algorithm', 'direct')).text}"]

    @property
    def data_arrays(self) -> tuple[str, ...]:
        """The arrays that hold data (not offsets or sizes)."""
        return tuple(name for name in self.arrays if name not in self.index_arrays)

    @property
    def required(self) -> tuple[str, ...]:
        """The names of the parameters a call must give."""
        return tuple(p.name for p in self.params if p.required)

    @property
    def optional(self) -> tuple[str, ...]:
        """The names of the parameters that have a default."""
        return tuple(p.name for p in self.params if not p.required)

    @property
    def linear(self) -> bool:
        """Whether the collective has a transpose rule."""
        return not isinstance(self.transpose, NotLinear)

    @property
    def invariant_operand(self) -> bool:
        """Whether the operand must be invariant along the axes (pvary, pscatter)."""
        return self.vma is Vma.INTRODUCE

    def param(self, name: str) -> Param:
        """The parameter called `name`; InvalidArgumentError if the collective has none."""
        for p in self.params:
            if p.name == name:
                return p
        raise sim.InvalidArgumentError(f"{self.name} has no parameter {name!r}; it has {[p.name for p in self.params]}")

    def takes(self, name: str) -> bool:
        """Whether the collective has a parameter called `name`."""
        return any(p.name == name for p in self.params)

    def jax_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` without the simulator's own (those JAX does not take)."""
        return {k: v for k, v in params.items() if not self.takes(k) or self.param(k).jax}


# ---------------------------------------------------------------------------------------------- parameters


def _is_int(value: Any) -> bool:
    """An int that is not a bool (TOML's true is not an axis)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_axis_name(value: Any) -> bool:
    """A name or a non-empty list of names."""
    names = value if isinstance(value, list) else [value]
    return bool(names) and all(isinstance(name, str) for name in names)


def _is_groups(value: Any) -> bool:
    """A list of lists of ints."""
    return isinstance(value, list) and all(isinstance(g, list) and all(_is_int(i) for i in g) for g in value)


def _is_perm(value: Any) -> bool:
    """A list of [source, destination] pairs of ints."""
    return isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 and all(_is_int(i) for i in p)
                                           for p in value)


def _names(value: Any) -> Any:
    """A list of axis names as the tuple the collectives take."""
    return tuple(value) if isinstance(value, list) else value


AXIS_NAME = Param("axis_name", _is_axis_name, "a mesh axis name or a list of names", from_toml=_names)
AXIS_INDEX_GROUPS = Param("axis_index_groups", _is_groups, "a list of lists of axis indices", default=None)
PERM = Param("perm", _is_perm, "a list of [source, destination] pairs of axis indices",
             from_toml=lambda pairs: [tuple(p) for p in pairs])


def integer(name: str, default: Any = REQUIRED) -> Param:
    """An integer parameter (an axis or a dimension)."""
    return Param(name, _is_int, "an integer", default)


def flag(name: str, default: bool) -> Param:
    """A true-or-false parameter."""
    return Param(name, lambda value: isinstance(value, bool), "true or false", default)


def _algorithm_param(algorithms: tuple[Algorithm, ...]) -> Param:
    """The simulator's choice of message pattern (JAX has none), 'direct' by default: one of the names of
    `algorithms`."""
    options = tuple(a.name for a in algorithms)
    shown = ", ".join(repr(o) for o in options)
    return Param("algorithm", lambda value: value in options, f"one of {shown}", "direct", jax=False,
                 choices=options)
