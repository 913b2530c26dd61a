"""The JAX worker: runs real `jax.lax` collectives under `jax.shard_map` on 8 CPU virtual devices.

Started by `JaxOracle` as `python -m oracles._jax_worker`; reads requests from stdin and writes replies to
stdout in the `oracles._protocol` format until stdin closes. A request names a registered collective
(run by its route in `oracles._jax_dispatch`) or one of the worker's own ops below: device placement and
collectives with layouts (`oracles._jax_layouts`), generated programs (`oracles._jax_programs`) and the
two that let the tests watch the parent survive a dying or hanging worker. Per-device inputs are stacked
along a new leading axis sharded over the mesh, so device d holds exactly its own input; compiled
functions are cached per signature (`oracles._jax_setup`).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import jax

from oracles import _compile_pool, _jax_layouts, _jax_programs
from oracles._jax_dispatch import run_case
from oracles._jax_setup import mesh
from oracles._processes import planted_kill
from oracles._protocol import read_message, write_message


def _collective(request: dict[str, Any]) -> tuple[Any, str]:
    return run_case(request["op"], request["mesh_shape"], request["args"], request["params"])


def _program_types(request: dict[str, Any]) -> tuple[Any, str]:
    params = request["params"]
    return _jax_programs.program_types(mesh(request["mesh_shape"]), params["program"], params["shapes"]), "real"


def _program_transpose(request: dict[str, Any]) -> tuple[Any, str]:
    params = request["params"]
    on = mesh(request["mesh_shape"])
    return _jax_programs.program_transpose(on, params["program"], params["primals"], params["cotangents"]), "real"


# The worker's own ops; any other op names a collective.
_OPS: dict[str, Callable[[dict[str, Any]], tuple[Any, str]]] = {
    "place": _jax_layouts.answer_place,
    "layout_collective": _jax_layouts.answer_layout_collective,
    "program_types": _program_types,
    "program_transpose": _program_transpose,
}


def _crash(params: dict[str, Any]) -> tuple[Any, ...]:
    os._exit(int(params.get("exit_code", 70)))


def _sleep(params: dict[str, Any]) -> tuple[Any, ...]:
    time.sleep(float(params.get("seconds", 3600)))
    return ("ok", [], "sleep")


# Hidden ops that let the tests watch the parent survive a dying or hanging worker.
TEST_OPS: dict[str, Callable[[dict[str, Any]], tuple[Any, ...]]] = {"crash": _crash, "sleep": _sleep}


def answer(request: dict[str, Any]) -> tuple[Any, ...]:
    """Turn one request into its reply; an exception from JAX becomes an ("error", kind, message) reply."""
    op = request["op"]
    if op in TEST_OPS:
        return TEST_OPS[op](request["params"])
    try:
        value, path = _OPS.get(op, _collective)(request)
    except Exception as error:
        return ("error", type(error).__name__, str(error))
    return ("ok", value, path)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Announce readiness, then answer requests until `requests` closes."""
    write_message(replies, ("ready", {"jax": jax.__version__, "devices": len(jax.devices())}))
    first = True
    while (request := read_message(requests)) is not None:
        if first:
            planted_kill()
            first = False
        write_message(replies, answer(request))


def main() -> None:
    """Serve on the real stdout; anything else printing to stdout (JAX, XLA) is sent to stderr."""
    faulthandler.enable()  # a segfault inside XLA then leaves a stack in the log the parent reports
    _compile_pool.from_environment()  # JAX is configured (`_jax_setup`), its backend not yet started
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
