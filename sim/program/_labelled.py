"""`labelled`: name the source of a device's collective calls, as `jax.named_scope` names operations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sim._errors import InvalidTypeError
from sim.engine._driver import current


@contextmanager
def labelled(label: str) -> Iterator[None]:
    """Within the block, every collective call the running device enters is recorded with `label`
    (`sim.CallRecord.label`), which `Run.explain` and `Run.draw` print beside the call. Blocks nest; the
    innermost label wins, and the outer one is back when the block ends.

    Example, inside a program run by `sim.shard_map` on 2 devices::

        with sim.labelled("moe.py:57 (dispatch)"):
            y = collectives.all_to_all(x, "i", 0, 0)
        run.calls[0].label  # 'moe.py:57 (dispatch)'

    Raises:
        InvalidTypeError: `label` is not a str.
        MeshError: called outside a program run by `sim.shard_map`.
    """
    if not isinstance(label, str):
        raise InvalidTypeError(f"label={label!r} must be a str: sim.labelled names where the calls inside the "
                               f"block were made, e.g. sim.labelled('moe.py:57 (dispatch)')")
    program = current().program
    outer, program.label = program.label, label
    try:
        yield
    finally:
        program.label = outer
