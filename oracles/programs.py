"""Parent side of the program ops: ask the JAX worker for a generated program's types or transpose."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oracles.jax_oracle import JaxOracle


def program_types(oracle: JaxOracle, mesh_shape: Mapping[str, int], program: dict,
                  shapes: Sequence[tuple[int, ...]]) -> tuple[str, Any]:
    """JAX's verdict on `program` under `check_vma=True`: ('ok', [sorted vma per output]) or
    ('rejected', message). See `oracles._jax_programs` for the program format."""
    request = {"op": "program_types", "mesh_shape": dict(mesh_shape), "args": (),
               "params": {"program": program, "shapes": [tuple(s) for s in shapes]}}
    reply = oracle.call(request, f"program_types({program!r})")
    return tuple(reply[1])


def program_transpose(oracle: JaxOracle, mesh_shape: Mapping[str, int], program: dict,
                      primals: Sequence[np.ndarray], cotangents: Sequence[np.ndarray]) -> list[np.ndarray]:
    """`jax.linear_transpose` of `program` at `primals` applied to `cotangents` (global arrays)."""
    request = {"op": "program_transpose", "mesh_shape": dict(mesh_shape), "args": (),
               "params": {"program": program, "primals": list(primals), "cotangents": list(cotangents)}}
    return list(oracle.call(request, f"program_transpose({program!r})")[1])
