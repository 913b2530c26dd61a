"""Small generated shard_map programs, as plain data both the simulator and JAX's worker can run.

See `oracles/_jax_programs.py` for the format. Every value has local shape (4,); the mesh is {x: 2, y: 2}.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

import collectives as C
import sim

MESH_SHAPE = {"x": 2, "y": 2}
LOCAL = 4
AXES = ["x", "y", ("x", "y")]
SPECS = [(), ("x",), ("y",), (("x", "y"),)]
LINEAR_OPS = ["add", "neg", "scale", "psum", "ppermute", "all_to_all", "pvary", "all_gather", "psum_scatter"]
ALL_OPS = LINEAR_OPS + ["mul", "pmax", "axis_index"]


def _perm(axis: str, shift: int) -> list[tuple[int, int]]:
    n = MESH_SHAPE[axis]
    return [(i, (i + shift) % n) for i in range(n)]


def step(op: str, args: list, params: dict) -> Any:
    """One step of a generated program on the simulator (mirrors `oracles._jax_programs._step`)."""
    a = args[0] if args else None
    axis = params.get("axis")
    return {
        "add": lambda: a + args[1],
        "mul": lambda: a * args[1],
        "neg": lambda: -a,
        "scale": lambda: a * 2.0,
        "psum": lambda: C.psum(a, axis),
        "pmax": lambda: C.pmax(a, axis),
        "ppermute": lambda: C.ppermute(a, axis, _perm(axis, params.get("shift", 1))),
        "all_to_all": lambda: C.all_to_all(a, axis, 0, 0, tiled=True),
        "pvary": lambda: C.pvary(a, axis),
        "all_gather": lambda: C.all_gather(a, axis, tiled=True)[: a.shape[0]],
        "psum_scatter": lambda: C.all_gather(C.psum_scatter(a, axis, tiled=True), axis, tiled=True),
        "axis_index": lambda: a + C.axis_index(axis).astype(a.dtype),
    }[op]()


def shard_mapped(program: dict) -> sim.ShardMapped:
    """The program as a simulated shard_map, with its `check_vma` (True unless the program says)."""
    def body(*inputs: Any) -> tuple:
        values = list(inputs)
        for op, arg_indices, params in program["steps"]:
            values.append(step(op, [values[i] for i in arg_indices], params))
        return tuple(values[i] for i, _ in program["outputs"])

    return sim.shard_map(body, mesh=sim.Mesh(MESH_SHAPE), in_specs=tuple(sim.P(*s) for s in program["inputs"]),
                         out_specs=tuple(sim.P(*s) for _, s in program["outputs"]),
                         check_vma=program.get("check_vma", True))


def global_shape(spec: tuple) -> tuple[int, ...]:
    """The global shape whose block under `spec` has the local shape (LOCAL,)."""
    count = 1
    for entry in spec:
        for name in entry if isinstance(entry, tuple) else (entry,):
            count *= MESH_SHAPE[name]
    return (LOCAL * count,)


@st.composite
def programs(draw, ops: list[str] = ALL_OPS, max_steps: int = 5) -> dict:
    """A random program: 1-2 inputs, up to `max_steps` steps, 1-2 outputs with random out_specs."""
    inputs = [draw(st.sampled_from(SPECS)) for _ in range(draw(st.integers(1, 2)))]
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        count = len(inputs) + len(steps)
        op = draw(st.sampled_from(ops))
        arity = 2 if op in ("add", "mul") else 1
        args = [draw(st.integers(0, count - 1)) for _ in range(arity)]
        axis = draw(st.sampled_from(["x", "y"] if op in ("ppermute", "all_to_all", "all_gather", "psum_scatter")
                                    else AXES))
        params = {"axis": axis}
        if op == "ppermute":
            params["shift"] = 1
        steps.append((op, args, params))
    values = len(inputs) + len(steps)
    outputs = [(draw(st.integers(len(inputs), values - 1)), draw(st.sampled_from(SPECS)))
               for _ in range(draw(st.integers(1, 2)))]
    return {"inputs": inputs, "steps": steps, "outputs": outputs}


def describe(program: dict) -> str:
    """A readable one-line-per-step listing for failure messages."""
    lines = [f"inputs {program['inputs']}"]
    lines += [f"v{len(program['inputs']) + k} = {op}({', '.join(f'v{i}' for i in args)}; {params})"
              for k, (op, args, params) in enumerate(program["steps"])]
    lines.append(f"outputs {program['outputs']}")
    return "\n  ".join(lines)
