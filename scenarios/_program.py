"""Program scenarios: a whole `shard_map` program, its inferred types, and its transpose run both ways.

A `[program]` table holds Python `source` defining `f`, the `in_specs` / `out_specs` written as `P(...)`
values (parsed, never evaluated: `scenarios._specs`), and `[[args]]` tables giving each global argument
(a literal `value`, or `seed`/`shape`/`dtype`).
The source sees `np`, `P` and every collective by name (`psum`, `all_gather`, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import CodeType
from typing import Any

import numpy as np

import collectives
import layouts
import sim
from scenarios._address_space import address_space_limit
from scenarios._consent import TimeLimitError, refuse_program, user_code
from scenarios._errors import ScenarioError, Source
from scenarios._inputs import rounded
from scenarios._specs import parse_specs

_PROGRAM_KEYS = ("source", "in_specs", "out_specs", "check_vma", "transpose", "linear_argnums")


@dataclass(frozen=True, eq=False)
class ProgramScenario:
    """A validated program scenario: mesh, the mapped function, its example arguments, what to show."""

    path: str
    title: str
    description: str
    mesh: sim.Mesh
    source: str
    function: sim.ShardMapped
    args: tuple[np.ndarray, ...]
    transpose: bool
    linear_argnums: tuple[int, ...] | None
    payload: str = "bytes"  # "abstract": each `shape` argument a sim.ShapeDtypeStruct, the forward pass alone


@dataclass(frozen=True, eq=False)
class Pass:
    """One run of a program: its typed listing (device 0), outputs, messages (`sim.record.Traffic`) and time."""

    program: sim.Program
    outputs: Any
    traffic: sim.record.Traffic
    end_time_s: float

    @classmethod
    def of(cls, run: sim.Run) -> Pass:
        return cls(run.program(0), run.outputs, sim.record.Traffic.of(run.trace), run.end_time_s)

    @property
    def messages(self) -> int:
        """Every message of the run, a device's message to itself included."""
        return self.traffic.messages

    @property
    def network_bytes(self) -> int:
        """The bytes of the messages between devices: what crossed the network."""
        return self.traffic.network_bytes

    def to_dict(self) -> dict:
        outputs = self.outputs if isinstance(self.outputs, tuple) else (self.outputs,)
        return {"program": str(self.program), "ops": self.program.ops(), "outputs": [_listed(o) for o in outputs],
                "messages": self.messages, "between_devices": self.traffic.between,
                "network_bytes": self.network_bytes, "end_time_s": self.end_time_s}


@dataclass(frozen=True, eq=False)
class ProgramResult:
    """Forward pass, transposed pass, twice-transposed pass and the adjoint identity's two sides."""

    scenario: ProgramScenario
    forward: Pass
    transposed: Pass | None = None
    twice: Pass | None = None
    adjoint: tuple[float, float] | None = None

    @property
    def no_growth(self) -> bool | None:
        """Whether transposing twice gives back the forward program's equations, op for op."""
        return None if self.twice is None else self.twice.program.ops() == self.forward.program.ops()

    def to_dict(self) -> dict:
        passes = {"forward": self.forward, "transposed": self.transposed, "transposed_twice": self.twice}
        return {"scenario": self.scenario.path, "title": self.scenario.title, "mesh": dict(self.scenario.mesh.shape),
                "source": self.scenario.source,
                **{k: None if v is None else v.to_dict() for k, v in passes.items()},
                "no_growth": self.no_growth, "adjoint": None if self.adjoint is None else list(self.adjoint)}


def _listed(output: Any) -> Any:
    """An output as JSON holds it: its values, or an abstract one's shape and dtype."""
    if sim.memory.is_abstract(output):
        return {"abstract": True, "shape": list(output.shape), "dtype": str(sim.memory.logical_dtype(output.dtype))}
    return np.asarray(output).tolist()


def load_program(source: Source, data: dict, mesh: sim.Mesh, title: str, description: str,
                 allow_code: bool = True, payload: str = "bytes") -> ProgramScenario:
    """Validate the `[program]` and `[[args]]` tables of a scenario file, then (with `allow_code`) run its source.
    With `payload="abstract"` each argument given by its `shape` is a `sim.ShapeDtypeStruct` (one given by its
    `value` keeps it) and the program runs forward only (its transposes check values).

    Raises:
        CodeNotAllowedError: the tables are valid but `allow_code` is False; the message shows the source.
        ScenarioError: a table breaks the format, or the source fails or does not define `f`.
    """
    table = source.table(data, "program")
    source.check_keys("program", table, ("source", "in_specs", "out_specs"), _PROGRAM_KEYS)
    if not isinstance(table["source"], str):
        raise source.error("program", "source", f"[program] source={table['source']!r} must be a string of Python")
    in_specs, out_specs = (parse_specs(source, key, table[key]) for key in ("in_specs", "out_specs"))
    abstract = payload == "abstract"
    if abstract and table.get("transpose") is True:
        raise source.error("program", "transpose", "[program] transpose = true checks the adjoint identity on "
                                                   "values, and payload = \"abstract\" has none: leave it out")
    args = tuple(_arg(source, i, spec, abstract) for i, spec in enumerate(data.get("args", [])))
    if not allow_code:
        raise refuse_program(source, table["source"])
    f = _defined_f(source, table["source"], mesh.max_memory_bytes)
    try:
        function = sim.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=table.get("check_vma", True))
    except sim.MeshError as error:
        raise source.error("program", "in_specs", f"[program] {error}") from None
    linear = table.get("linear_argnums")
    if linear is not None and not (isinstance(linear, list) and all(type(i) is int for i in linear)):
        raise source.error("program", "linear_argnums",
                           f"[program] linear_argnums={linear!r} must be a list of argument indices")
    return ProgramScenario(source.path, title, description, mesh, table["source"], function, args,
                           bool(table.get("transpose", not abstract)), None if linear is None else tuple(linear),
                           payload)


def _defined_f(source: Source, code: str, max_memory_bytes: int | None) -> Any:
    """The function `f` that the `[program]` source defines, once the source has run (under the address-space
    limit `max_memory_bytes` sets: `scenarios._address_space`)."""
    namespace = {"np": np, "P": sim.P, "sim": sim, "linear_transpose": collectives.linear_transpose,
                 **{name: d.function for name, d in collectives.REGISTRY.items()}}
    with user_code(source.path), address_space_limit(max_memory_bytes, source.path):
        try:
            exec(_compiled(source, code), namespace)
        except (TimeLimitError, MemoryError):
            raise
        except Exception as error:  # the file's code is the user's: report any failure as a scenario error
            message = f"[program] source does not run: {type(error).__name__}: {error}"
            raise source.error("program", "source", message) from error
    if not callable(namespace.get("f")):
        raise source.error("program", "source", "[program] source must define a function f")
    return namespace["f"]


def _compiled(source: Source, code: str) -> CodeType:
    """The `[program]` source compiled so that its line numbers (in labels, tracebacks and errors) are the
    scenario file's own; a source the file does not hold line for line is named `path:[program].source`."""
    before = source.lines_before(code)
    if before is None:
        return compile(code, f"{source.path}:[program].source", "exec")
    return compile("\n" * before + code, str(source.path), "exec")


def _arg(source: Source, index: int, spec: dict, abstract: bool = False) -> Any:
    dtype = np.dtype(spec.get("dtype", "float32"))
    if "value" in spec:
        return np.asarray(spec["value"], dtype)
    if "shape" not in spec:
        raise source.error("args", None, f"[[args]] number {index} needs `value` or `shape`", index)
    if abstract:
        return sim.ShapeDtypeStruct(tuple(spec["shape"]), dtype)
    rng = np.random.default_rng(spec.get("seed", index))
    return _draw(rng, tuple(spec["shape"]), dtype)


def _draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if layouts.is_any_float(dtype):
        return rounded(rng.standard_normal(shape), dtype)
    return rng.integers(-5, 6, shape).astype(dtype)


@contextlib.contextmanager
def running(path: str, max_memory_bytes: int | None = None) -> Iterator[None]:
    """Run the block as a program scenario's code: every failure becomes a ScenarioError naming the file.

    The block runs under the address-space limit `max_memory_bytes` sets (`scenarios._address_space`; None
    for the default), and running out of it is one ScenarioError. A time limit running out passes through
    unchanged; `sys.exit` and interrupts are reported (`user_code`).
    """
    with user_code(path), address_space_limit(max_memory_bytes, path):
        try:
            yield
        except (TimeLimitError, MemoryError):
            raise
        except sim.MeshError as error:
            raise ScenarioError(f"{path}: the simulator rejected the program: {error}") from error
        except Exception as error:  # the program is the file's own code: its failures are the file's errors
            raise ScenarioError(f"{failed_at(path, error)}: [program] source failed: {type(error).__name__}: "
                                f"{error}") from error


def failed_at(path: str, error: BaseException) -> str:
    """`path`, with ':N' for the file's line N where the innermost frame of `error` in the program's source
    ran (its code is compiled with the file's name and lines: `_compiled`); `path` alone when none did."""
    line, frame = None, error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename == str(path):
            line = frame.tb_lineno
        frame = frame.tb_next
    return str(path) if line is None else f"{path}:{line}"


def run_forward(scenario: ProgramScenario) -> sim.Run:
    """The simulator's run of the program on its example arguments (no transposes)."""
    with running(scenario.path, scenario.mesh.max_memory_bytes):
        return scenario.function.run(*scenario.args)


def run_program(scenario: ProgramScenario) -> ProgramResult:
    """Run the program, then (if asked) its transpose on seeded cotangents and the transpose of that."""
    with running(scenario.path, scenario.mesh.max_memory_bytes):
        run = scenario.function.run(*scenario.args)
        forward = Pass.of(run)
        if not scenario.transpose:
            return ProgramResult(scenario, forward)
        linear = scenario.linear_argnums or tuple(range(len(scenario.args)))
        others = [a for i, a in enumerate(scenario.args) if i not in linear]
        outs = run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)
        rng = np.random.default_rng(0)
        cts = [_draw(rng, o.shape, o.dtype) for o in outs]
        t = collectives.linear_transpose(scenario.function, *scenario.args, linear_argnums=scenario.linear_argnums)
        back = t.run(*others, *cts)
        grads = back.outputs if isinstance(back.outputs, tuple) else (back.outputs,)
        tt = collectives.linear_transpose(t, *others, *cts,
                                          linear_argnums=tuple(range(len(others), len(others) + len(cts))))
        twice = tt.run(*others, *(scenario.args[i] for i in linear))
    lhs = sum(float(np.vdot(o.astype(np.float64), c)) for o, c in zip(outs, cts))
    rhs = sum(float(np.vdot(scenario.args[i].astype(np.float64), g)) for i, g in zip(linear, grads))
    return ProgramResult(scenario, forward, Pass.of(back), Pass.of(twice), (lhs, rhs))
